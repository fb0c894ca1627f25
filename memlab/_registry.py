"""The one helper every ``register_*`` function uses: check the name and the entry, store it.

A name already in the registry is refused (ValueError naming the registry and the name) unless
``replace=True``: registering twice by accident (a notebook cell run again, two plugins picking
the same name) no longer silently swaps a built-in or another plugin's entry.

Examples
--------
>>> table = {}
>>> register(table, "double", lambda x: 2 * x, what="transform")
>>> table["double"](3)
6
>>> register(table, "double", lambda x: x + x, what="transform")
Traceback (most recent call last):
...
ValueError: the transform registry already holds 'double'; pass replace=True to replace it
>>> register(table, "double", lambda x: x + x, what="transform", replace=True)
>>> register(table, "", len)
Traceback (most recent call last):
...
ValueError: name must be a non-empty string, got ''
"""

from __future__ import annotations

from typing import Any, MutableMapping

__all__ = ["register"]


def register(registry: MutableMapping[str, Any], name: str, entry: Any, *,
             what: str = "entry", check_callable: bool = True,
             requires: str | None = None, replace: bool = False) -> None:
    """Store ``entry`` under ``name`` in ``registry``.

    Raises ValueError naming the argument when ``name`` is not a non-empty string, when
    ``check_callable`` and ``entry`` is not callable, or when ``entry`` lacks the attribute
    ``requires``; and ValueError naming the registry (``what``) and ``name`` when ``name`` is
    already registered and ``replace`` is not True, or is the deprecated name of a renamed
    entry (replacing it would change what the old name looks up but not what recipes, which
    store the new name, run).
    """
    if not isinstance(replace, bool):
        raise ValueError(f"replace must be True or False, got {replace!r}")
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if check_callable and not callable(entry):
        raise ValueError(f"the {what} registered as {name!r} must be callable, got {entry!r}")
    if requires is not None and not hasattr(entry, requires):
        raise ValueError(f"the {what} registered as {name!r} must have .{requires}, "
                         f"got {entry!r}")
    aliases = getattr(registry, "aliases", None)  # a RenamedEntries registry's old names
    if aliases and name in aliases and not dict.__contains__(registry, name):
        raise ValueError(f"{name!r} is the deprecated name of the {what} {aliases[name]!r}: "
                         f"register under another name, or replace {aliases[name]!r}")
    if not replace and name in registry:
        raise ValueError(f"the {what} registry already holds {name!r}; pass replace=True to "
                         f"replace it")
    registry[name] = entry

