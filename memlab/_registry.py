"""The one helper every ``register_*`` function uses: check the name and the entry, store it.

Examples
--------
>>> table = {}
>>> register(table, "double", lambda x: 2 * x)
>>> table["double"](3)
6
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
             requires: str | None = None) -> None:
    """Store ``entry`` under ``name`` in ``registry`` (replacing one of that name).

    Raises ValueError naming the argument when ``name`` is not a non-empty string, when
    ``check_callable`` and ``entry`` is not callable, or when ``entry`` lacks the attribute
    ``requires``.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if check_callable and not callable(entry):
        raise ValueError(f"the {what} registered as {name!r} must be callable, got {entry!r}")
    if requires is not None and not hasattr(entry, requires):
        raise ValueError(f"the {what} registered as {name!r} must have .{requires}, "
                         f"got {entry!r}")
    registry[name] = entry
