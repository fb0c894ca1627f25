"""Graph algorithms over a workspace's edges: the CSR view, spreading activation, PPR (SPEC §5).

Nothing here knows about surfacing. Strategies call spreading through :func:`run_spread` and
users through :func:`spread`; PPR over a workspace (node cap, cache, saturation, time budget) is
:mod:`memlab.surfacing.ppr`'s, ``personalized_pagerank`` and ``ppr_result`` included (their
names here are deprecated aliases for one release).
"""

from memlab.graph.csr import EdgeTable, GraphSnapshot, GraphView
from memlab.graph.ppr import (
                              PPR_METHODS,
                              PPRCache,
                              PPRConfig,
                              PPRConvergenceError,
                              PPRResult,
                              auto_epsilon,
                              personalized_pagerank,
                              ppr_result,
                              register_ppr_method,
)
from memlab.graph.spreading import (
                              SPREAD_METHODS,
                              SpreadConfig,
                              SpreadResult,
                              register_spread_method,
                              spread,
                              spread_result,
)

__all__ = [
                              "PPR_METHODS",
                              "SPREAD_METHODS",
                              "EdgeTable",
                              "GraphSnapshot",
                              "GraphView",
                              "PPRCache",
                              "PPRConfig",
                              "PPRConvergenceError",
                              "PPRResult",
                              "SpreadConfig",
                              "SpreadResult",
                              "auto_epsilon",
                              "personalized_pagerank",
                              "ppr_result",
                              "register_ppr_method",
                              "register_spread_method",
                              "spread",
                              "spread_result",
]
