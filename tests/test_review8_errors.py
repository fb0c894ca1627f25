"""Round 8, second code review (the HTTP error answers): one test per defect found."""

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
def http():
    with TestClient(create_app(ServiceState(clock=ManualClock(T0), maintenance=False))) as c:
        yield c


def test_a_422_does_not_echo_a_list_of_huge_integers(http):
    # _small_plain charges one unit per int whatever its digits: 150 ints of 4,000 digits
    # pass the 200-unit budget and the 422 echoes ~600 KB
    big = "9" * 4000
    body = ('{"query": [' + ",".join([big] * 150) + "]}").encode()
    r = http.post("/v1/search", content=body, headers=JSON)
    assert r.status_code == 422
    assert len(r.content) < 5000, len(r.content)


def test_a_422_does_not_echo_a_huge_unknown_key(http):
    # extra_forbidden's loc holds the key whole; _bounded bounds only "input"
    r = http.post("/v1/search", content=json.dumps({"query": "a", "k" * 100_000: 1}).encode(),
                  headers=JSON)
    assert r.status_code == 422
    assert len(r.content) < 5000, len(r.content)


def test_a_content_encoding_on_a_request_without_a_body_is_not_refused(http):
    # nothing to decode: GET /health (a load balancer's probe) and HEAD are 415 today
    assert http.get("/health", headers={"content-encoding": "gzip"}).status_code == 200
    assert http.head("/health", headers={"content-encoding": "gzip"}).status_code == 200


def test_a_second_content_encoding_line_does_not_hide_the_first(http):
    # "gzip" then "identity" is the list "gzip, identity" (RFC 9110 §5.3): still 415;
    # the guard's dict keeps only the last line
    r = http.post("/v1/search", content=b'{"query": "a"}',
                  headers=[("content-type", "application/json"),
                           ("content-encoding", "gzip"), ("content-encoding", "identity")])
    assert r.status_code == 415, (r.status_code, r.text)


def test_a_nul_in_a_query_parameter_the_route_does_not_take_is_ignored(http):
    # check_id_args runs on every query name ending in _id: an unused one is a 400
    r = http.get("/v1/edges?trace_id=a%00b")
    assert r.status_code == 200, r.text
