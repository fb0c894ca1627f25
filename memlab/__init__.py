"""memlab: research and run memory surfacing for LLM agents."""

from memlab.clock import Clock, ManualClock, SystemClock
from memlab.errors import (BudgetTooSmall, DuplicateItemError, SessionPinWorkspaceConflict,
                           UnknownItemError)
from memlab.graph import PPRCache, PPRConfig, PPRConvergenceError, SpreadConfig, spread
from memlab.memory import Memory
from memlab.session import (PMMemoryStore, PromotionPolicy, get_memory_status, promote_to_long_term,
                            resolve_context)
from memlab.model import Edge, MemoryItem, SurfacingDecision, SurfacingStrategy
from memlab.store import MemoryStore
from memlab.surfacing.config import (BM25_ONLY, DEFAULT, RECIPES, SEED_COMPAT, SurfacingConfig,
                                     get_recipe)
from memlab.signals.dense import hybrid_recipe
from memlab.surfacing.context import ContextRecord
from memlab.surfacing.ppr import personalized_pagerank

__version__ = "0.1.0"

__all__ = [
    "Memory", "MemoryStore", "ManualClock", "SystemClock", "Clock",
    "SurfacingDecision", "SurfacingStrategy", "BudgetTooSmall", "SessionPinWorkspaceConflict",
    "UnknownItemError", "DuplicateItemError", "Edge", "MemoryItem", "ContextRecord",
    "SurfacingConfig", "SEED_COMPAT", "DEFAULT", "BM25_ONLY", "hybrid_recipe", "RECIPES", "get_recipe", "__version__",
    "spread", "personalized_pagerank", "SpreadConfig", "PPRConfig", "PPRCache",
    "PPRConvergenceError", "PMMemoryStore", "PromotionPolicy", "resolve_context",
    "promote_to_long_term", "get_memory_status",
]
