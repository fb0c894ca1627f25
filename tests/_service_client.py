"""The test client of the HTTP service: Starlette's ``TestClient`` addressed to ``localhost``.

Starlette's client sends ``Host: testserver`` by default, a name the service's production Host
allow-list (:data:`memlab.service.http.LOCAL_HOSTS`) does not hold; every test talks to the app
as a loopback client would. Import it as ``from _service_client import TestClient``.
"""

from fastapi.testclient import TestClient as _StarletteTestClient


class TestClient(_StarletteTestClient):
    """``fastapi.testclient.TestClient`` whose ``base_url`` defaults to ``http://localhost``."""

    __test__ = False  # not a test class, whatever its name

    def __init__(self, app, base_url: str = "http://localhost", **kwargs) -> None:
        super().__init__(app, base_url=base_url, **kwargs)
