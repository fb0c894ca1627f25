"""Deprecated names kept for one release: dict keys and registry entries that were renamed.

:class:`RenamedKeys` is a plain dict (JSON, ``dict(hit)`` and iteration see every key, the old
ones included) whose old keys warn when read by subscript or ``get``. :class:`RenamedEntries`
is a registry dict whose old names still look up the renamed entry, with a warning.

Examples
--------
>>> class Hit(RenamedKeys):
...     renamed = {"score": ("bm25", "raw BM25")}
>>> hit = Hit(bm25=1.5, score=1.5)
>>> import warnings
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     value = hit["score"]
>>> value, str(caught[0].message)
(1.5, "the hit's 'score' is now called 'bm25' (raw BM25); 'score' goes in the next release")
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from memlab.errors import MemlabDeprecationWarning

__all__ = ["RenamedEntries", "RenamedKeys", "caller_stacklevel"]


def caller_stacklevel() -> int:
    """The ``stacklevel``, for a ``warnings.warn`` made in the function calling this, that
    points at the first frame outside memlab: the user's line, however many of memlab's frames
    (``get_recipe`` → ``load_recipe_file`` → ``SurfacingConfig.from_dict`` → the dataclass's
    ``__init__`` → a field check …) lie between. A fixed stacklevel is right for one entry
    point only; one that lands inside memlab hides the warning from Python's default filters
    (which show a DeprecationWarning only when it is attributed to ``__main__``).

    Examples
    --------
    >>> def inner():  # a frame of memlab's (this module's) calling the helper
    ...     return caller_stacklevel()
    >>> inner() >= 2
    True
    """
    frame = sys._getframe(1)
    level = 1
    while frame is not None and _is_memlab(frame.f_globals.get("__name__")):
        frame = frame.f_back
        level += 1
    return level


def _is_memlab(module: Any) -> bool:
    # a dataclass's generated __init__ runs with its module's globals: it counts as memlab's;
    # so does dataclasses.replace, which SurfacingConfig.replace calls
    return isinstance(module, str) and (module in ("memlab", "dataclasses")
                                        or module.startswith("memlab."))


class RenamedKeys(dict):
    """A dict whose keys in :attr:`renamed` (old key -> ``(new key, what it is)``) warn with a
    DeprecationWarning when read with ``d[key]`` or ``d.get(key)``."""

    renamed: ClassVar[Mapping[str, tuple[str, str]]] = {}
    #: what the warning calls one of these dicts
    what: str = "the hit"

    def __getitem__(self, key: Any) -> Any:
        if key in self.renamed:
            self._warn(key)
        return dict.__getitem__(self, key)

    def get(self, key: Any, default: Any = None) -> Any:
        if key in self.renamed:
            self._warn(key)
        return dict.get(self, key, default)

    def _warn(self, key: str) -> None:
        new, meaning = self.renamed[key]
        warnings.warn(f"{self.what}'s {key!r} is now called {new!r} ({meaning}); {key!r} goes "
                      f"in the next release", MemlabDeprecationWarning, stacklevel=3)


class RenamedEntries(dict):
    """A registry whose old names (``aliases``: old -> new) still look up the renamed entry,
    calling ``warn(old)`` first; ``in`` answers True for them too."""

    def __init__(self, entries: Mapping[str, Any], aliases: Mapping[str, str],
                 warn: Callable[[str], Any]) -> None:
        super().__init__(entries)
        self.aliases, self.warn = aliases, warn

    def __missing__(self, name: str) -> Any:
        new = self.aliases.get(name) if isinstance(name, str) else None
        if new is None:
            raise KeyError(name)
        self.warn(name)
        return self[new]

    def __contains__(self, name: object) -> bool:
        return dict.__contains__(self, name) or (
            isinstance(name, str) and dict.__contains__(self, self.aliases.get(name)))

    def get(self, name: Any, default: Any = None) -> Any:
        return self[name] if name in self else default  # noqa: SIM401 (self.get is this)
