"""Round 6 leftovers of the outside checks: each test failed before its fix."""

import hashlib
import json

import pandas as pd
import pytest

from memlab import Memory
from memlab.datasets.synthetic import synthetic_trace


# a None weight in a bulk edge frame (pandas stores it as NaN) is named as missing, not "nan"
def test_bulk_edge_frame_names_a_missing_weight():
    mem = Memory()
    mem.add_many([{"content": c, "item_id": c} for c in "ab"])
    frame = pd.DataFrame({"src": ["a", "a"], "dst": ["b", "b"], "edge_type": ["R1", "R2"],
                          "weight": [1.0, None]})
    with pytest.raises(ValueError, match=r"^edges row 1: weight is missing \(NaN; a None"):
        mem.add_edges(frame)
    assert mem.get_edges() == []  # all or nothing
    # a bad number is still reported by its value
    frame["weight"] = [1.0, -2.0]
    with pytest.raises(ValueError, match=r"^edges row 1: weight .*-2"):
        mem.add_edges(frame)


# HEAD on a GET route answers as the GET without its body (liveness probes use HEAD), key or not
@pytest.mark.parametrize("api_key", [None, "s3cret"])
def test_head_answers_every_get_route_like_get_without_a_body(api_key):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from memlab.service.http import create_app
    client = TestClient(create_app(api_key=api_key), base_url="http://localhost")
    key = {"X-API-Key": api_key} if api_key else {}
    assert client.post("/v1/items", json={"content": "deploy", "item_id": "a1"},
                       headers=key).status_code == 200
    got, head = client.get("/health"), client.head("/health")
    assert got.status_code == head.status_code == 200 and got.json() == {"status": "ok"}
    assert head.content == b"" and head.headers["content-length"] == got.headers["content-length"]
    for path in ("/v1/items/a1", "/v1/items/zz", "/v1/status"):
        got, head = client.get(path, headers=key), client.head(path, headers=key)
        assert head.status_code == got.status_code and head.content == b""
        if path != "/v1/items/a1":  # a get reinforces the item, so its answer changes
            assert head.headers["content-length"] == got.headers["content-length"]
    if api_key:  # the key is checked for HEAD as for GET
        assert client.head("/v1/items/a1").status_code == client.get("/v1/items/a1").status_code \
            == 401
    # a POST-only route stays 405, naming what it allows; nothing is written
    head = client.head("/v1/items", headers=key)
    assert head.status_code == 405 and head.headers["allow"] == "POST"
    assert "head" not in client.get("/openapi.json", headers=key).json()["paths"]["/health"]


# a replay manifest records a ranker file by name and content, not by where it lies
def test_manifest_records_the_ranker_free_of_its_location(tmp_path):
    pytest.importorskip("sklearn")
    from memlab.harness.replay import replay
    from memlab.learn import fit_ranker
    from memlab.surfacing.config import DEFAULT, load_recipe_file
    trace = synthetic_trace(120, 20, seed=2)
    fit_on = synthetic_trace(120, 20, seed=3)
    model = fit_ranker(replay(fit_on, measures=["MRR"]), kind="logistic", seed=0)
    manifests = []
    for where in ("one", "two/deeper"):
        folder = tmp_path / where
        folder.mkdir(parents=True)
        model.save(folder / "r.ranker.json")
        recipe = folder / "mine.json"
        recipe.write_text(json.dumps(DEFAULT.replace(reranker="r.ranker.json").to_dict()))
        config = load_recipe_file(recipe)
        assert config.reranker == str((folder / "r.ranker.json").resolve())
        manifests.append(replay(trace, config, measures=["MRR"]).manifest)
    first, second = manifests
    assert first["config"] == second["config"]
    assert first["config"]["reranker"] == "r.ranker.json"
    digest = hashlib.sha256((tmp_path / "one" / "r.ranker.json").read_bytes()).hexdigest()
    assert first["reranker_file"] == second["reranker_file"] == {"name": "r.ranker.json",
                                                                  "sha256": digest}
    # another model under the same name is told apart by its content
    other = fit_ranker(replay(synthetic_trace(150, 25, seed=7), measures=["MRR"]),
                       kind="logistic", seed=0)
    other.save(tmp_path / "one" / "r.ranker.json")
    third = replay(trace, load_recipe_file(tmp_path / "one" / "mine.json"), measures=["MRR"])
    assert third.manifest["reranker_file"]["sha256"] != digest
    # a registered reranker (no file) adds nothing
    assert "reranker_file" not in replay(trace, DEFAULT, measures=["MRR"]).manifest


def test_in_sample_note_names_the_ranker_file_not_its_folder(tmp_path):
    pytest.importorskip("sklearn")
    from memlab.errors import InSampleWarning
    from memlab.harness.replay import replay
    from memlab.learn import fit_ranker
    from memlab.surfacing.config import DEFAULT
    trace = synthetic_trace(150, 20, seed=4)
    path = fit_ranker(replay(trace, measures=["MRR"]), kind="logistic").save(
        tmp_path / "deep" / "m.json" if (tmp_path / "deep").mkdir() is None else None)
    with pytest.warns(InSampleWarning):
        staged = replay(trace, DEFAULT.replace(reranker=str(path)), measures=["MRR"])
    assert staged.manifest["in_sample"].startswith("in-sample: the ranker 'm.json' was trained")
    assert str(tmp_path) not in repr(staged.manifest)


def test_ranker_file_removed_while_replaying_keeps_the_result_and_its_hash(tmp_path,
                                                                           monkeypatch):
    pytest.importorskip("sklearn")
    import importlib
    replay_module = importlib.import_module("memlab.harness.replay")
    from memlab.learn import fit_ranker
    from memlab.surfacing.config import DEFAULT
    trace = synthetic_trace(120, 20, seed=2)
    path = fit_ranker(replay_module.replay(synthetic_trace(120, 20, seed=3), measures=["MRR"]),
                      kind="logistic").save(tmp_path / "m.json")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    original = replay_module._run_events

    def run_then_replace(*args, **kwargs):
        runner = original(*args, **kwargs)
        path.write_text("not a model any more")  # rewritten, then removed, after the run
        path.unlink()
        return runner
    monkeypatch.setattr(replay_module, "_run_events", run_then_replace)
    result = replay_module.replay(trace, DEFAULT.replace(reranker=str(path)), measures=["MRR"])
    assert result.manifest["reranker_file"] == {"name": "m.json", "sha256": digest}
    assert len(result.metrics) > 0


def test_a_float_nan_weight_in_a_bulk_edge_frame_is_refused_as_missing():
    mem = Memory()
    mem.add_many([{"content": c, "item_id": c} for c in "ab"])
    frame = pd.DataFrame({"src": ["a"], "dst": ["b"], "weight": [float("nan")]})
    with pytest.raises(ValueError, match=r"^edges row 0: weight is missing"):
        mem.add_edges(frame)
    assert mem.get_edges() == []


# a write on a closed durable store raises and changes nothing (it used to empty the store)
@pytest.mark.parametrize("group_commit", [False, True])
def test_writes_on_a_closed_store_raise_and_change_nothing(tmp_path, group_commit):
    from memlab.persist import PersistenceError, StoreClosedError
    from memlab.store import MemoryStore
    store = MemoryStore(path=tmp_path / "c.db", fsync_outside_lock=group_commit)
    mem = Memory(store=store)
    mem.add("deploy checklist", item_id="a")
    mem.add_many([{"content": "rollback plan", "item_id": "b"}])
    mem.add_edges([("a", "b")])
    store.close()
    before = store.serialize()
    attempts = [lambda: mem.add("second", item_id="c"), lambda: mem.get("a"),
                lambda: mem.search("deploy"), lambda: mem.add_edges([("b", "a")]),
                lambda: mem.pin_item("s1", "a"), store.compact]
    for attempt in attempts:
        with pytest.raises(StoreClosedError, match=r"is closed: \w+ changed nothing"):
            attempt()
    assert issubclass(StoreClosedError, PersistenceError)
    assert store.serialize() == before
    # reads that write nothing go on; flush and close again are no-ops
    assert mem.get("a", reinforce=False)["content"] == "deploy checklist"
    assert [h["item_id"] for h in mem.search("deploy", reinforce=False)] == ["a"]
    store.flush()
    store.close()
    reopened = MemoryStore(path=tmp_path / "c.db")
    assert reopened.serialize() == before
    reopened.close()


@pytest.mark.parametrize("args, message", [
    (["--limit-concurrency", "0"], "--limit-concurrency must be >= 1, got 0"),
    (["--timeout-keep-alive", "nan"], "--timeout-keep-alive must be in (0, 3600] seconds, got nan"),
    (["--timeout-keep-alive", "-1"], "--timeout-keep-alive must be in (0, 3600] seconds, got -1.0"),
])
def test_serve_refuses_bad_connection_limits(args, message, capsys):
    pytest.importorskip("uvicorn")
    from memlab.cli import main
    assert main(["serve", "--port", "0", *args]) == 2
    assert capsys.readouterr().err.strip().endswith(f"memlab serve: error: {message}")
