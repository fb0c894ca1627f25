from datetime import datetime, timezone

import pytest
from hypothesis import settings

from memlab import ManualClock, Memory, MemoryStore

# No assertion may depend on wall-clock time: hypothesis's per-example deadline (200 ms by
# default) would fail a property test on a loaded machine, so it is off for every test.
settings.register_profile("memlab", deadline=None)
settings.load_profile("memlab")

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


@pytest.fixture
def clock():
    return ManualClock(T0)


@pytest.fixture
def store():
    return MemoryStore()


@pytest.fixture
def router(store, clock):
    return Memory(store=store, workspace_id="ws-a", surfacing_mode="router", clock=clock)


@pytest.fixture
def seed_router(store, clock):
    return Memory(store=store, workspace_id="ws-a", surfacing_mode="router", clock=clock,
                  config="seed_compat")


@pytest.fixture
def legacy(store, clock):
    return Memory(store=store, workspace_id="ws-a", surfacing_mode="legacy", clock=clock)


@pytest.fixture
def data_root(tmp_path):
    """The fixtures laid out as the shared data (locomo/ and hipporag/)."""
    import shutil

    from memlab.datasets import FIXTURES_DIR
    root = tmp_path / "data"
    (root / "locomo").mkdir(parents=True)
    (root / "hipporag").mkdir()
    shutil.copy(FIXTURES_DIR / "locomo_sample.json", root / "locomo" / "locomo_dev.json")
    shutil.copy(FIXTURES_DIR / "hipporag_sample.json", root / "hipporag" / "musique_train.json")
    shutil.copy(FIXTURES_DIR / "hipporag_sample_corpus.json",
                root / "hipporag" / "musique_train_corpus.json")
    return root
