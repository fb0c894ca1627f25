"""Named exceptions. Every one is a :class:`ValueError`, so callers may catch either."""

from __future__ import annotations

__all__ = ["BudgetTooSmall", "SessionPinWorkspaceConflict", "UnknownItemError",
           "DuplicateItemError"]


class BudgetTooSmall(ValueError):
    """``max_tokens`` is smaller than the smallest mandatory anchor (message starts ``budget_too_small``)."""


class SessionPinWorkspaceConflict(ValueError):
    """A session's pins are bound to one workspace and another workspace tried to pin into it."""


class UnknownItemError(ValueError):
    """An argument names an item that does not exist in the workspace."""


class DuplicateItemError(ValueError):
    """``item_id`` already exists in the workspace."""
