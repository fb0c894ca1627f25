"""Short-term cache, long-term graph and the solution engine (SPEC §6.1, seed 000).

The seed's package-level names, importable from here or from ``memlab``::

    from memlab import PMMemoryStore, resolve_context, promote_to_long_term, get_memory_status
"""

from memlab.session.cache import PMMemoryStore
from memlab.session.engine import (DEFAULT_MIN_SCORE, PROMOTION_THRESHOLD, PromotionPolicy,
                                   default_memory, get_memory_status, promote_to_long_term,
                                   resolve_context, set_default_memory)
from memlab.session.longterm import (NODE_TYPES, add_interlinked_context, create_relation,
                                     prune_stale_links, register_node_type,
                                     retrieve_with_traversal, search_graph, upsert_node)

__all__ = ["PMMemoryStore", "PromotionPolicy", "PROMOTION_THRESHOLD", "DEFAULT_MIN_SCORE",
           "resolve_context", "promote_to_long_term", "get_memory_status", "default_memory",
           "set_default_memory", "NODE_TYPES", "register_node_type", "upsert_node",
           "search_graph", "create_relation", "retrieve_with_traversal", "prune_stale_links",
           "add_interlinked_context"]
