"""The process-wide default memory the session functions use when no memory is passed.

Its own module, below both :mod:`memlab.session.engine` and :mod:`memlab.session.longterm`,
which both need it (so neither imports the other for it).
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["default_memory", "set_default_memory", "resolve_memory"]

_DEFAULT_MEMORY = None
_DEFAULT_LOCK = threading.Lock()


def default_memory():
    """The process-wide default memory (created on first use)."""
    global _DEFAULT_MEMORY
    with _DEFAULT_LOCK:
        if _DEFAULT_MEMORY is None:
            from memlab.memory import Memory  # the facade sits above the session layer
            _DEFAULT_MEMORY = Memory(workspace_id="default", surfacing_mode="router")
        return _DEFAULT_MEMORY


def set_default_memory(memory) -> None:
    """Make ``memory`` the process-wide default (None: a fresh one on next use)."""
    global _DEFAULT_MEMORY
    if memory is not None:
        resolve_memory(memory)  # validates
    with _DEFAULT_LOCK:
        _DEFAULT_MEMORY = memory


def resolve_memory(memory: Any):
    """``memory`` itself, or the process-wide default memory when it is None."""
    if memory is None:
        return default_memory()
    if not all(hasattr(memory, attr) for attr in ("store", "workspace_id", "clock")):
        raise ValueError(f"memory must be a memlab Memory or None, got {memory!r}")
    return memory
