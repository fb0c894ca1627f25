"""Round 7 review fixes that are not in a branch's own test file."""
from __future__ import annotations

from dataclasses import replace

import pytest

from memlab.datasets.synthetic import synthetic_longmemeval
from memlab.harness.replay import replay
from memlab.surfacing.config import DEFAULT

UNTIMED = DEFAULT.replace(ppr=replace(DEFAULT.ppr, budget_ms=None),
                          spreading=replace(DEFAULT.spreading, budget_ms=None))


@pytest.mark.slow
def test_a_cluster_with_more_workers_than_asked_is_named_by_the_shards_it_ran():
    """replay(n_workers=2) on a 3-worker scheduler re-shards into 3; the manifest said "2"."""
    pytest.importorskip("distributed")
    from memlab.harness.replay import dask_address
    trace = synthetic_longmemeval(9, 3, seed=0)
    with dask_address("dask", None, 3) as address:
        sharded = replay(trace, UNTIMED, progress=False, executor="dask", address=address,
                         n_workers=2)
    assert sharded.manifest["executor"] == "dask (3 shards by workspace)"
