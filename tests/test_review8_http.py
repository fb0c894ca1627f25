"""Round 8's outside check of the HTTP service: HEAD is safe, ids holding "/" reach their
routes, and a body that is not read as JSON is a 422 saying why, never echoing the body."""

import gzip
import json
from datetime import datetime, timezone

import pytest

pytest.importorskip("fastapi")

from _service_client import TestClient  # noqa: E402

from memlab import ManualClock  # noqa: E402
from memlab.service import ServiceState, create_app  # noqa: E402

T0 = datetime(2024, 3, 1, 9, tzinfo=timezone.utc)
JSON = {"content-type": "application/json"}


@pytest.fixture
def served():
    state = ServiceState(clock=ManualClock(T0), maintenance=False)
    with TestClient(create_app(state)) as http:
        yield state, http


def _reinforcements(state, item_id: str) -> int:
    item = state.memory("default").get(item_id, reinforce=False)
    return sum(1 for event in item["history"] if event["kind"] == "reinforced")


def test_head_answers_as_the_get_and_reinforces_nothing(served):
    state, http = served
    assert http.post("/v1/items", json={"content": "deploy notes", "item_id": "a"}) \
        .status_code == 200
    before = _reinforcements(state, "a")
    head = http.head("/v1/items/a")
    assert head.status_code == 200 and head.content == b""
    assert _reinforcements(state, "a") == before
    # the GET's headers: its length is that of the answer a GET gives now (a GET reinforces)
    assert int(head.headers["content-length"]) == len(json.dumps(
        state.memory("default").get("a", reinforce=False), separators=(",", ":")).encode())
    assert http.get("/v1/items/a").status_code == 200
    assert _reinforcements(state, "a") == before + 1  # the GET only
    for _ in range(3):
        http.head("/v1/items/a")
    assert _reinforcements(state, "a") == before + 1


def test_ids_holding_a_slash_reach_every_route(served):
    _, http = served
    assert http.post("/v1/items", json={"content": "slash item", "item_id": "doc/12"}) \
        .status_code == 200
    got = http.get("/v1/items/doc%2F12")
    assert got.status_code == 200 and got.json()["item_id"] == "doc/12"
    assert http.get("/v1/items/doc/12").json()["item_id"] == "doc/12"
    assert http.post("/v1/pins", json={"session_id": "s1", "item_id": "doc/12"}) \
        .status_code == 200
    assert list(http.get("/v1/pins/s1").json()["pins"]) == ["doc/12"]
    gone = http.delete("/v1/pins/s1/doc%2F12")
    assert gone.status_code == 200 and gone.json()["pins"] == {}
    # a session id holding "/" is read by path and unpinned by query parameters
    assert http.post("/v1/pins", json={"session_id": "team/s", "item_id": "doc/12"}) \
        .status_code == 200
    assert len(http.get("/v1/pins/team%2Fs").json()["pins"]) == 1
    gone = http.delete("/v1/pins", params={"session_id": "team/s", "item_id": "doc/12"})
    assert gone.status_code == 200 and gone.json()["pins"] == {}
    assert http.delete("/v1/pins", params={"session_id": "team/s"}).status_code == 422


@pytest.mark.parametrize("body, headers, says", [
    (b'{"query": "bad \xff"}', JSON, "not UTF-8"),
    (b'{"query": "x", "top_k": ' + b"9" * 5000 + b"}", JSON, "4300"),
    (b"[" * 5000 + b"]" * 5000, JSON, "nests too deeply"),
])
def test_a_body_json_cannot_read_is_a_422_saying_why(served, body, headers, says):
    _, http = served
    r = http.post("/v1/search", content=body, headers=headers)
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["type"] == "json_invalid" and error["loc"] == ["body"]
    assert says in error["msg"]


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          None])
def test_a_json_body_sent_as_another_type_is_named_and_not_echoed(served, content_type):
    _, http = served
    body = json.dumps({"items": [{"content": "x" * 500} for _ in range(50)]}).encode()
    headers = {} if content_type is None else {"content-type": content_type}
    r = http.post("/v1/items/bulk", content=body, headers=headers)
    assert r.status_code == 422
    (error,) = r.json()["detail"]
    assert error["type"] == "content_type" and error["loc"] == ["header", "content-type"]
    assert "application/json" in error["msg"] and repr(content_type) in error["msg"]
    assert len(r.content) < 400  # the body is not echoed
    # a JSON content type with a wrong shape keeps FastAPI's own answer
    r = http.post("/v1/items/bulk", content=b"[1]", headers=JSON)
    assert r.status_code == 422 and r.json()["detail"][0]["type"] != "content_type"
    assert http.post("/v1/search", content=b'{"query": "x"}',
                     headers={"content-type": "application/vnd.memlab+json"}).status_code == 200


def test_other_http_errors_keep_fastapis_answers(served):
    _, http = served
    r = http.get("/v1/nowhere")
    assert r.status_code == 404 and r.json() == {"detail": "Not Found"}
    r = http.put("/v1/search", json={"query": "x"})
    assert r.status_code == 405 and r.json() == {"detail": "Method Not Allowed"}


def test_a_reopened_store_digests_as_the_live_one_after_a_recency_context(tmp_path):
    """The recency and creation orders are derived indexes, synced lazily by reads: a store
    whose reads re-sorted them digests as its reopened copy (outside check, round 8: 2,000
    items and one `fast:recency` context used to differ)."""
    from memlab import Memory, MemoryStore
    from memlab.snapshot import state_digest
    store = MemoryStore(path=tmp_path / "m.db")
    mem = Memory(store=store, surfacing_mode="router", clock=ManualClock(T0))
    mem.add_many([f"note {i} about deploy" for i in range(2000)])
    assert mem.get_working_context("s", "what happened recently?")["strategy_used"] \
        == "fast:recency"
    store.flush()
    live = state_digest(store)
    store.close()
    assert state_digest(MemoryStore(path=tmp_path / "m.db")) == live


def test_serve_says_where_it_starts_and_fails_in_one_line_when_it_cannot(monkeypatch, capsys):
    uvicorn = pytest.importorskip("uvicorn")
    from memlab.cli import main
    monkeypatch.delenv("MEMLAB_API_KEY", raising=False)
    monkeypatch.setenv("MEMLAB_API_KEY", "a-long-secret")
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: None)
    assert main(["serve", "--port", "8799"]) == 0
    assert capsys.readouterr().err == ("memlab serve: starting on http://127.0.0.1:8799 "
                                       "(store: in memory; keys required)\n")

    def in_use(app, **kw):
        raise SystemExit(3)  # what uvicorn does when it cannot bind
    monkeypatch.setattr(uvicorn, "run", in_use)
    assert main(["serve", "--port", "8799"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("memlab serve: error: --host '127.0.0.1' --port 8799: the "
                              "server could not start on 127.0.0.1:8799")


@pytest.mark.parametrize("path, body", [
    ("/v1/cache/set", {"key": "k\x00", "value": "v"}),
    ("/v1/cache/peek", {"key": "k\x00"}),
    ("/v1/promote", {"session_id": "s", "key": "k\x00", "value": "v"}),
    ("/v1/resolve", {"session_id": "s", "key": "k\x00"}),
])
def test_a_cache_key_holding_nul_is_refused_as_ids_are(served, path, body):
    _, http = served
    r = http.post(path, json=body)
    assert r.status_code == 400 and "key must not contain NUL" in r.json()["detail"]


def test_no_body_at_all_keeps_fastapis_missing_body_answer(served):
    _, http = served
    r = http.post("/v1/search")
    assert r.status_code == 422
    assert [e["type"] for e in r.json()["detail"]] == ["missing"]


@pytest.mark.parametrize("coding", ["gzip", "br", "deflate", "GZIP", "bogus", "br, gzip"])
def test_a_body_with_a_content_encoding_is_refused_with_415(served, coding):
    _, http = served
    body = gzip.compress(b'{"content": "x"}') if coding.lower() == "gzip" else b'{"content": "x"}'
    r = http.post("/v1/items", content=body, headers={**JSON, "content-encoding": coding})
    assert r.status_code == 415 and "not supported" in r.json()["detail"]
    assert http.post("/v1/items", json={"content": "x"},
                     headers={"content-encoding": "identity"}).status_code == 200


def test_a_422_echoes_no_large_or_unencodable_input(served):
    _, http = served
    r = http.post("/v1/items", content=json.dumps(["x" * 1000] * 3000).encode(), headers=JSON)
    assert r.status_code == 422 and len(r.content) < 1000
    assert "not echoed" in r.json()["detail"][0]["input"]
    r = http.post("/v1/items/bulk", content=json.dumps({"items": [1] * 10000}).encode(),
                  headers=JSON)
    assert r.status_code == 422 and len(r.content) < 5000
    detail = r.json()["detail"]
    assert len(detail) == 21 and detail[-1]["type"] == "too_many_errors"
    for body in (b"NaN", b'{"content": NaN}', b'{"query": "x", "top_k": NaN}', b"[Infinity]"):
        path = "/v1/search" if b"query" in body else "/v1/items"
        r = http.post(path, content=body, headers=JSON)
        assert r.status_code == 422, (body, r.text)
        assert all("not echoed" in str(e.get("input", "not echoed")) for e in r.json()["detail"])
    # a small plain input is still FastAPI's own answer, echoed
    r = http.post("/v1/search", json={"query": "x", "top_k": "many"})
    assert r.status_code == 422 and r.json()["detail"][0]["input"] == "many"


def test_a_body_sent_as_another_type_is_not_read_as_json_by_the_checks(served):
    _, http = served
    plain = {"content-type": "text/plain"}
    for body in ({"content": "x", "item_id": "a\u0000"}, {"content": "x" * 100_001},
                 {"content": "x", "extra": "y" * 300_000}):
        r = http.post("/v1/items", content=json.dumps(body).encode(), headers=plain)
        assert r.status_code == 422 and r.json()["detail"][0]["type"] == "content_type", r.text


def test_a_nul_workspace_in_the_query_is_400_before_a_scoped_keys_403():
    from memlab.service.auth import KeyRing
    ring = KeyRing.from_mapping({"keys": [{"name": "w", "key": "secret-w-1", "write": ["w1"]}]})
    http = TestClient(create_app(ServiceState(clock=ManualClock(T0), maintenance=False),
                                 keys=ring))
    key = {"x-api-key": "secret-w-1"}
    for method, path in [("GET", "/v1/items/a1?workspace_id=w%001"),
                         ("GET", "/v1/edges?workspace_id=w1%00"),
                         ("DELETE", "/v1/pins?session_id=s&item_id=a&workspace_id=w%001")]:
        r = http.request(method, path, headers=key)
        assert r.status_code == 400 and "NUL" in r.json()["detail"], (path, r.text)
