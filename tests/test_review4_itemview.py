"""Round-4 review, finding 4: an item read from the store is read-only, and its metadata is a
copy, so no write through a view can change the store without the journal knowing."""

import copy
import pickle

import pytest

from memlab import Memory, MemoryStore
from memlab.model import MemoryItem


@pytest.fixture
def mem(tmp_path):
    m = Memory(store=MemoryStore(path=tmp_path / "m.db"))
    m.add("alpha beta", item_id="a", metadata={"k": {"n": 1}})
    m.add("epsilon notes", item_id="b")
    yield m
    m.close()


@pytest.mark.parametrize("field, value", [("content", "HACKED"), ("item_id", "z"),
                                          ("metadata", {}), ("salience", 2.0),
                                          ("archived", True), ("memory_type", "procedural")])
def test_every_assignment_to_a_view_is_refused(mem, field, value):
    view = mem.store.workspace("default").item(1)
    with pytest.raises(AttributeError, match=f"read-only \\(setting '{field}'\\)"):
        setattr(view, field, value)
    with pytest.raises(AttributeError, match="read-only"):
        delattr(view, "content")
    assert mem.get("b")["content"] == "epsilon notes"
    assert [h["item_id"] for h in mem.search("epsilon")] == ["b"]


def test_a_views_metadata_is_a_copy(mem, tmp_path):
    view = mem.store.workspace("default").item(0)
    got = view.metadata
    got["k"]["n"] = 99
    got["injected"] = True
    assert mem.store.workspace("default").item(0).metadata == {"k": {"n": 1}}
    assert view.to_dict()["metadata"] == {"k": {"n": 1}}
    assert mem.get("a")["metadata"] == {"k": {"n": 1}}
    mem.close()
    reopened = Memory(store=MemoryStore(path=tmp_path / "m.db"))
    assert reopened.get("a")["metadata"] == {"k": {"n": 1}}
    reopened.close()


def test_a_view_still_copies_and_pickles_as_a_plain_item(mem):
    view = mem.store.workspace("default").item(0)
    for twin in (copy.copy(view), copy.deepcopy(view), pickle.loads(pickle.dumps(view))):
        assert type(twin) is MemoryItem and twin == view
        twin.content = "changed"  # a plain copy is the caller's own
    assert mem.get("a")["content"] == "alpha beta"


def test_a_flat_metadata_is_copied_too(tmp_path):
    mem = Memory()
    mem.add("gamma", item_id="c", metadata={"title": "Gamma", "n": 3})
    view = mem.store.workspace("default").item(0)
    got = view.metadata
    got["title"] = "changed"
    got["injected"] = True
    assert mem.store.workspace("default").item(0).metadata == {"title": "Gamma", "n": 3}
    assert view.metadata is not view.metadata
