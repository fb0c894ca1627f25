"""Named exceptions. Every one but :class:`PPRConvergenceError` (an algorithm's outcome, not a
bad argument) is a :class:`ValueError`, so callers may catch either."""

from __future__ import annotations

__all__ = ["BudgetTooSmall", "SessionPinWorkspaceConflict", "UnknownItemError",
           "DuplicateItemError", "PPRConvergenceError", "PPRUnavailable", "InSampleWarning",
           "UnknownRecipeError", "MemlabDeprecationWarning"]


class BudgetTooSmall(ValueError):
    """``max_tokens`` is smaller than the smallest mandatory anchor (message starts ``budget_too_small``)."""


class SessionPinWorkspaceConflict(ValueError):
    """A session's pins are bound to one workspace and another workspace tried to pin into it."""


class UnknownItemError(ValueError):
    """An argument names an item that does not exist in the workspace."""


class DuplicateItemError(ValueError):
    """``item_id`` already exists in the workspace."""


class PPRConvergenceError(RuntimeError):
    """Personalized PageRank stopped before meeting its stopping rule.

    Raised when ``max_iter`` iterations pass without convergence, and by the deterministic
    algorithms of :mod:`memlab.graph.ppr` when a budget stops them. ``partial`` then holds what
    they had reached, ``(item numbers, mass, info)``, for a caller that chooses to use a
    truncated answer and say so (surfacing does, in the record's notes); None otherwise.

    Examples
    --------
    >>> err = PPRConvergenceError(3, 0.25, 1e-6)
    >>> str(err).split(";")[0]
    'personalized PageRank did not converge in 3 iterations (last L1 change 0.25, needed < 1e-06)'
    """

    def __init__(self, iterations: int, change: float, threshold: float, *,
                 partial: tuple | None = None, reason: str = "max_iter") -> None:
        super().__init__(f"personalized PageRank did not converge in {iterations} iterations "
                         f"(last L1 change {change:.3g}, needed < {threshold:.3g}); raise "
                         f"max_iter or tol" if reason == "max_iter" else
                         f"personalized PageRank was stopped by its {reason} after {iterations} "
                         f"iterations (last change {change:.3g}, needed < {threshold:.3g})")
        self.iterations, self.change, self.threshold = iterations, change, threshold
        self.partial, self.reason = partial, reason


class PPRUnavailable(RuntimeError):
    """Personalized PageRank was not computed: ``reason`` is ``"saturated"`` (enough
    computations already running) or ``"node_cap"`` (the workspace has more items than the
    configuration's ``max_nodes``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"personalized PageRank not computed: {reason}")
        self.reason = reason


class MemlabDeprecationWarning(DeprecationWarning):
    """A deprecated memlab name or argument was used (it goes in the next release).

    A subclass of :class:`DeprecationWarning`, so ``pytest.warns(DeprecationWarning)`` and
    warning filters on it see these too; the ``memlab`` command shows exactly these (one line
    each on stderr), not other libraries' deprecations.

    Examples
    --------
    >>> issubclass(MemlabDeprecationWarning, DeprecationWarning)
    True
    """


class InSampleWarning(UserWarning):
    """A score that is in-sample: a replay under a recipe whose learned ``reranker`` was trained
    on questions of the trace being scored (the score flatters the model)."""


class UnknownRecipeError(ValueError):
    """A recipe name that is neither built in, nor a recipe file, nor a recipe file's name in
    the recipe search path (a recipe file that exists but is bad raises plain ValueError)."""
