from datetime import datetime, timezone

import pytest

from memlab import ManualClock, Memory, MemoryStore

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
