"""The HTTP service (SPEC §9): FastAPI routes over one in-process store (extra ``service``).

Run it with ``memlab serve`` (127.0.0.1:8765; the store in ``$MEMLAB_DB`` when set). Every route
but ``/health`` takes an API key when keys are configured (sent as ``X-API-Key`` or
``Authorization: Bearer``); a missing or wrong key is 401. Keys are scoped
(:mod:`memlab.service.auth`): a key names the workspaces it may read and write, and a request for
any other workspace is 403 (the same answer whether or not the workspace exists). Caches and
session ids belong to a workspace. ``/health`` is a liveness ``ok``; ``/health/graph`` (every
workspace, the database path) needs an admin key. A ``ValueError`` from memlab is 400 with its
message (an id holding a NUL character is 400 naming it, in ``/v1/items`` as in each item of
``/v1/items/bulk``); a malformed body is 422; ``/health/graph`` is 503 with the database path and a hint
when the store cannot be read. Maintenance runs after the response is sent, and its failure
never reaches the client (it is kept in the reasoner's ``failures``).

Limits (issue 14): a body larger than ``limits.max_body_bytes``, and any text argument over its
limit (a query over ``max_query_chars``, a content or other free text over ``max_content_chars``,
an id or short name over ``max_id_chars``, metadata or a bulk request over theirs; one table for
HTTP and MCP, :meth:`~memlab.service.limits.Limits.check_args`) is 413 naming the limit and the
value; a read never creates its workspace
(an unknown workspace reads as an empty one); a read made with a key that may only read the
workspace changes nothing in it (review 14: no reinforcement of what it reads, no topic
salience bump or event, no cache use, no journal row, no maintenance scheduled after it; a key
that may write keeps reinforcing its reads); a request whose ``Host`` header is not in
``allowed_hosts`` is 400 (DNS rebinding).
"""


import contextlib
import contextvars
import functools
import inspect
from pathlib import Path
from typing import Any, Iterable, Literal

from memlab.service.auth import OPEN, ApiKey, KeyRing, ScopeError
from memlab.service.limits import LimitExceeded, Limits, check_id_args
from memlab.service.state import ServiceState

__all__ = ["create_app", "LOCAL_HOSTS"]

# Host names a loopback server answers to by default. Starlette's TestClient sends
# "testserver" unless told otherwise: a test passes ``base_url="http://localhost"`` (or adds
# "testserver" to ``allowed_hosts``); production answers only to loopback names.
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


def create_app(state: ServiceState | None = None, *, api_key: str | None = None,
               keys: KeyRing | str | Path | None = None,
               allowed_hosts: Iterable[str] | None = None):
    """The FastAPI application serving ``state`` (a fresh in-memory one when omitted).

    Parameters
    ----------
    state : ServiceState, optional
        The shared state; its ``limits`` bound every request (a fresh in-memory state when
        omitted).
    api_key : str, optional
        One admin key for every workspace (the single key of earlier versions).
    keys : KeyRing or path, optional
        Scoped keys, or the path of a keys file (JSON or TOML, see
        :mod:`memlab.service.auth`). With neither ``api_key`` nor ``keys`` the server is open.
    allowed_hosts : iterable of str, optional
        Host names (without port) accepted in the ``Host`` header; ``"*"`` accepts any.
        Default: :data:`LOCAL_HOSTS`. ``memlab serve`` adds the host it binds.

    Raises
    ------
    ValueError
        A bad ``api_key`` or keys file.
    """
    try:
        from fastapi import BackgroundTasks, Depends, FastAPI, Header, Request
        from fastapi.responses import JSONResponse
        from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt
    except ImportError:  # pragma: no cover - depends on the install
        raise ImportError("the HTTP service needs the service extra: "
                          "pip install 'memlab[service]'") from None

    from memlab.session import (get_memory_status, promote_to_long_term, resolve_context,
                                search_graph, upsert_node)
    from memlab.topics import ingest, query
    from fastapi.exception_handlers import (http_exception_handler,
                                            request_validation_exception_handler)
    from starlette.exceptions import HTTPException as StarletteHTTPException
    from fastapi.exceptions import RequestValidationError
    from memlab.model import check_text

    state = state or ServiceState()
    limits: Limits = state.limits
    hosts = frozenset(h.lower() for h in (LOCAL_HOSTS if allowed_hosts is None
                                          else allowed_hosts))
    Text = Field(min_length=1)  # non-empty strings, documented in the schema
    if keys is None:
        ring = KeyRing()
    elif isinstance(keys, KeyRing):
        ring = keys
    elif isinstance(keys, (str, Path)):
        ring = KeyRing.from_file(keys)
    else:
        raise ValueError(f"keys must be a KeyRing or the path of a keys file, got {keys!r:.80}")
    ring = ring.with_admin_secret(api_key)

    class Body(BaseModel):
        model_config = ConfigDict(extra="forbid")
        workspace_id: str = Field("default", min_length=1)

    class ItemIn(Body):
        content: str
        memory_type: str = "semantic"
        metadata: dict[str, Any] | None = None
        item_id: str | None = None

    class ItemsIn(Body):
        items: list[dict[str, Any]]

    class SearchIn(Body):
        query: str = Text
        top_k: StrictInt = Field(10, ge=1, le=1000)

    class ContextIn(Body):
        session_id: str = Text
        query: str = Text
        k: StrictInt = Field(20, ge=1, le=100)
        max_tokens: StrictInt | None = Field(None, ge=1)
        strategy: str | None = None

    class EdgeIn(Body):
        src: str = Text
        dst: str = Text
        edge_type: str = "RELATED"
        weight: float = 1.0

    class PinIn(Body):
        session_id: str = Text
        item_id: str = Text
        weight: float = 1.0

    class IngestIn(Body):
        placement: str
        topic_id: str | None = None
        title: str | None = None
        fields: dict[str, Any] | None = None
        field: str | None = None
        value: Any = None
        ref: str | None = None
        why_changed: str | None = None
        provenance: str | None = None
        valid_from: str | None = None

    class QueryIn(Body):
        q: str = Text
        stages: list[Literal["semantic", "structural", "temporal"]] = ["semantic", "structural",
                                                                      "temporal"]
        explain: StrictBool = False
        top_k: StrictInt = Field(8, ge=1, le=100)

    class ResolveIn(Body):
        session_id: str = Text
        key: str = Text
        cache: str = "default"

    class PromoteIn(Body):
        session_id: str = Text
        key: str = Text
        value: str = Text
        node_type: str = "concept"

    class CacheSetIn(Body):
        key: str
        value: str
        cache: str = "default"

    class CacheKeyIn(Body):
        key: str
        cache: str = "default"

    class NodeIn(Body):
        session_id: str = Text
        node_type: str = Text
        label: str = Text
        content: str = Text
        metadata: dict[str, Any] | None = None

    class GraphSearchIn(Body):
        session_id: str = Text
        query: str = Text
        max_depth: StrictInt = 1
        top_k: StrictInt = Field(5, ge=1, le=100)

    class MaintenanceIn(Body):
        dry_run: StrictBool = True  # only JSON true/false: "no", 0, "off" are 422
        passes: list[str] | None = None

    def authenticate(x_api_key: str | None, authorization: str | None) -> ApiKey:
        """The caller's key (every workspace on an open server); 401 when missing or wrong."""
        if ring.open:
            return OPEN
        given = x_api_key
        if given is None and authorization and authorization.lower().startswith("bearer "):
            given = authorization[7:]
        key = ring.authenticate(given)
        if key is None:
            from fastapi import HTTPException
            raise HTTPException(status_code=401, detail="missing or wrong API key")
        return key

    # every workspace a route touches goes through the caller's key first (403 outside it),
    # so an out-of-scope request neither reads nor creates anything
    def read(key: ApiKey, workspace_id: str):
        return state.reader(key.check(workspace_id, "read"))  # never creates the workspace

    def write(key: ApiKey, workspace_id: str):
        return state.memory(key.check(workspace_id, "write"))

    # A read reinforces what it reads (activation, topic salience, cache use) and schedules
    # maintenance only when the key may also write the workspace: a key that may only read
    # changes nothing in it, so one tenant's reads never move the salience another sees.
    def reinforces(key: ApiKey, workspace_id: str) -> bool:
        # HEAD is safe (RFC 9110 §9.2.1): answered as the GET, it reinforces nothing
        return key.can_write(workspace_id) and not _HEAD_REQUEST.get()

    def write_existing(key: ApiKey, workspace_id: str):
        """A write that needs existing items: an unknown workspace is not created."""
        return state.reader(key.check(workspace_id, "write"))

    def cache_of(key: ApiKey, name: str, workspace_id: str, access: str):
        workspace_id = key.check(workspace_id, access)
        if access == "read":
            return state.cache_reader(name, workspace_id)  # never creates the cache
        return state.cache(name, workspace_id)

    session = state.session_key  # session ids are namespaced per workspace

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        yield
        state.store.flush()  # buffered read reinforcements reach the disk on a clean shutdown

    app = FastAPI(title="memlab", version=_version(), lifespan=lifespan,
                  description="Memory surfacing for LLM agents: one store, several surfaces.")
    app.router.route_class = _route_class()  # each route's parameters inspected once
    app.state.memlab = state
    async def check_limits(request: Request) -> None:
        """Every text argument (JSON body, query and path parameters) against its limit by
        name (:meth:`Limits.check_args`, shared with the MCP tools): 413 naming it, before the
        body is validated or anything is read or written."""
        limits.check_args(request.path_params)
        limits.check_args(request.query_params)
        check_id_args(request.path_params)  # a NUL in an id is 400 before any scope's 403
        route = getattr(request.scope.get("route"), "dependant", None)  # the route's own
        taken = {field.alias for field in getattr(route, "query_params", ())}  # parameters
        check_id_args({k: v for k, v in request.query_params.items() if k in taken})
        raw = await request.body()
        if raw and _is_json(request.headers.get("content-type")):  # else FastAPI's 422
            try:  # FastAPI has parsed a JSON body already: Request.json() keeps the result
                body = await request.json()
            except (ValueError, RecursionError):
                return  # not JSON: FastAPI's own 422 names the problem
            limits.check_args(body)
            if isinstance(body, dict):  # a NUL in an id is 400 here as in a bulk item
                check_id_args(body)

    # One dependency per route, on the event loop (async: no worker thread): the key first
    # (401), then the limits (413, a NUL in an id 400), before the body is validated (422).
    async def caller(request: Request, x_api_key: str | None = Header(None),
                     authorization: str | None = Header(None)) -> ApiKey:
        """The caller's key, once the request is within the limits."""
        key = authenticate(x_api_key, authorization)
        await check_limits(request)
        return key
    # it reads and raises, changes nothing: a route's plan may run it again (memlab.service._plan)
    caller.__memlab_pure__ = True

    app.add_middleware(_Guard, max_body_bytes=limits.max_body_bytes, hosts=hosts)
    _document_errors(app)

    @app.exception_handler(ValueError)
    async def value_error(request: Request, exc: ValueError):
        return JSONResponse(status_code=400, content={"detail": str(exc)})

    @app.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, exc: RequestValidationError):
        # A lone surrogate fails pydantic's str check, and FastAPI's own 422 then fails to
        # encode the input it echoes: answer as every other surface does (check_text's 400),
        # and never echo a body that cannot be encoded.
        for error in exc.errors():
            if error.get("type") == "string_unicode" and isinstance(error.get("input"), str):
                name = ".".join(str(part) for part in error["loc"][1:]) or "body"
                try:
                    check_text(error["input"], name)
                except ValueError as bad:
                    return JSONResponse(status_code=400, content={"detail": str(bad)})
        if not _is_json(request.headers.get("content-type")) and await request.body() \
                and any(tuple(error.get("loc", ())) == ("body",) for error in exc.errors()):
            # the body was not read as JSON at all: say why, and do not echo it (it may be
            # megabytes of anything)
            return JSONResponse(status_code=422, content={"detail": [{
                "type": "content_type", "loc": ["header", "content-type"],
                "msg": f"Content-Type must be application/json, got "
                       f"{request.headers.get('content-type')!r:.80}: the body was not read "
                       f"as JSON"}]})
        errors = _bounded(exc.errors())
        if errors is None:  # small, plain inputs: FastAPI's own answer, byte for byte
            try:
                return await request_validation_exception_handler(request, exc)
            except (UnicodeEncodeError, ValueError):  # a NaN or a surrogate in an input
                errors = _bounded(exc.errors(), force=True)
        return JSONResponse(status_code=422, content={"detail": errors})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        # FastAPI answers a body that json cannot decode for another reason than its syntax
        # (not UTF-8, nested too deeply, an integer of over 4,300 digits)
        # with a bare 400: answer as for any malformed body, a 422 saying what was wrong
        if exc.status_code == 400 and exc.detail == _FASTAPI_BODY_ERROR \
                and isinstance(exc.__cause__, (ValueError, RecursionError)):
            return JSONResponse(status_code=422, content={"detail": [{
                "type": "json_invalid", "loc": ["body"],
                "msg": f"the body could not be read as JSON: "
                       f"{_why_not_json(exc.__cause__)}"}]})
        return await http_exception_handler(request, exc)

    @app.exception_handler(LimitExceeded)
    async def limit_exceeded(request: Request, exc: LimitExceeded):
        return JSONResponse(status_code=413, content={
            "detail": str(exc), "limit": exc.limit, "allowed": exc.allowed, "got": exc.got})

    @app.exception_handler(ScopeError)
    async def scope_error(request: Request, exc: ScopeError):
        return JSONResponse(status_code=403, content={"detail": str(exc)})

    @app.get("/health")
    async def health() -> dict[str, Any]:  # no worker thread
        return {"status": "ok"}

    @app.get("/health/graph")
    def health_graph(key: ApiKey = Depends(caller)):
        if not key.admin:
            raise ScopeError("the store-wide health report needs an admin key")
        try:
            return state.graph_health()
        except Exception as exc:  # noqa: BLE001 - any failure to read is a 503
            return JSONResponse(status_code=503, content={
                "detail": f"the memory store cannot be read: {exc}",
                "path": state.db_path,
                "hint": "check that the database file exists, is readable and is not "
                        "corrupted (sqlite3 <path> 'PRAGMA integrity_check'); restart with "
                        "MEMLAB_DB pointing at a good copy"})

    @app.post("/v1/items")
    @encoded
    def add_item(body: ItemIn, key: ApiKey = Depends(caller)) -> dict[str, Any]:
        item_id = write(key, body.workspace_id).add(body.content, body.memory_type,
                                                      body.metadata, body.item_id)
        state.record("add", body.workspace_id, content=body.content, item_id=item_id,
                     memory_type=body.memory_type, metadata=body.metadata)
        return {"item_id": item_id}

    @app.post("/v1/items/bulk")
    @encoded
    def add_items(body: ItemsIn, key: ApiKey = Depends(caller)) -> dict[str, Any]:
        ids = state.add_many(key.check(body.workspace_id, "write"), body.items)  # chunk-atomic
        for item_id, item in zip(ids, body.items):
            state.record("add", body.workspace_id, content=item.get("content"), item_id=item_id,
                         memory_type=item.get("memory_type"), metadata=item.get("metadata"))
        return {"item_ids": ids}

    @app.get("/v1/items/{item_id:path}")  # an id may hold "/"
    @encoded
    def get_item(item_id: str, workspace_id: str = "default",
                 key: ApiKey = Depends(caller)) -> dict[str, Any]:
        return read(key, workspace_id).get(item_id, reinforce=reinforces(key, workspace_id))

    @app.post("/v1/search")
    @encoded
    def search(body: SearchIn, key: ApiKey = Depends(caller)) -> list[dict[str, Any]]:
        return read(key, body.workspace_id).search(
            body.query, top_k=body.top_k, reinforce=reinforces(key, body.workspace_id))

    @app.post("/v1/context")
    @encoded
    def context(body: ContextIn, key: ApiKey = Depends(caller)) -> dict[str, Any]:
        response = read(key, body.workspace_id).get_working_context(
            session(body.workspace_id, body.session_id), body.query, k=body.k,
            max_tokens=body.max_tokens, strategy=body.strategy)
        state.record("query", body.workspace_id, session_id=body.session_id, query=body.query,
                     k=body.k, max_tokens=body.max_tokens, strategy=body.strategy)
        return response

    @app.post("/v1/edges")
    @encoded
    def add_edge(body: EdgeIn, key: ApiKey = Depends(caller)) -> dict[str, Any]:
        # both items must exist, so must the workspace: an unknown one is not created
        write_existing(key, body.workspace_id).add_edge(body.src, body.dst, body.edge_type,
                                                        body.weight)
        state.record("add_edge", body.workspace_id, src=body.src, dst=body.dst,
                     edge_type=body.edge_type, weight=body.weight)
        return {"src": body.src, "dst": body.dst, "edge_type": body.edge_type,
                "weight": body.weight}

    @app.get("/v1/edges")
    @encoded
    def edges(workspace_id: str = "default", item_id: str | None = None,
              key: ApiKey = Depends(caller)) -> list[dict]:
        return read(key, workspace_id).get_edges(item_id)

    @app.post("/v1/pins")
    @encoded
    def pin(body: PinIn, key: ApiKey = Depends(caller)) -> dict[str, Any]:
        mem = write_existing(key, body.workspace_id)  # the item must exist, so must the workspace
        sid = session(body.workspace_id, body.session_id)
        mem.pin_item(sid, body.item_id, body.weight)
        state.record("pin", body.workspace_id, session_id=body.session_id,
                     item_id=body.item_id, weight=body.weight)
        return {"pins": mem.get_pins(sid)}

    def unpin_item(key: ApiKey, session_id: str, item_id: str, workspace_id: str):
        mem = write_existing(key, workspace_id)  # nothing is pinned in an unknown workspace
        sid = session(workspace_id, session_id)
        mem.unpin_item(sid, item_id)
        state.record("unpin", workspace_id, session_id=session_id, item_id=item_id)
        return {"pins": mem.get_pins(sid)}

    @app.delete("/v1/pins/{session_id}/{item_id:path}")
    @encoded
    def unpin(session_id: str, item_id: str, workspace_id: str = "default",
              key: ApiKey = Depends(caller)) -> dict[str, Any]:
        return unpin_item(key, session_id, item_id, workspace_id)

    @app.delete("/v1/pins")
    @encoded
    def unpin_by_query(session_id: str, item_id: str, workspace_id: str = "default",
                       key: ApiKey = Depends(caller)) -> dict[str, Any]:
        """The same as ``DELETE /v1/pins/{session_id}/{item_id}``, for any session id (one
        holding "/" is not a path segment)."""
        return unpin_item(key, session_id, item_id, workspace_id)

    @app.get("/v1/pins/{session_id:path}")
    @encoded
    def pins(session_id: str, workspace_id: str = "default",
             key: ApiKey = Depends(caller)) -> dict[str, Any]:
        mem = read(key, workspace_id)
        return {"pins": mem.get_pins(session(workspace_id, session_id))}

    @app.post("/v1/ingest")
    @encoded
    def ingest_route(body: IngestIn, background: BackgroundTasks,
                     key: ApiKey = Depends(caller)) -> dict[str, Any]:
        fields = body.model_dump(exclude={"workspace_id", "placement"}, exclude_none=True)
        out = ingest(body.placement, memory=write(key, body.workspace_id), **fields)
        state.record("ingest", body.workspace_id, placement=body.placement, **fields)
        background.add_task(state.after, body.workspace_id, "ingest")
        return out

    @app.post("/v1/query")
    @encoded
    def query_route(body: QueryIn, background: BackgroundTasks,
                    key: ApiKey = Depends(caller)) -> dict[str, Any]:
        reinforce = reinforces(key, body.workspace_id)
        out = query(body.q, stages=list(body.stages), explain=body.explain, top_k=body.top_k,
                    memory=read(key, body.workspace_id), reinforce=reinforce)
        if reinforce:  # a key that may only read schedules no maintenance
            background.add_task(state.after, body.workspace_id, "query")
        return out

    @app.post("/v1/resolve")
    @encoded
    def resolve(body: ResolveIn, key: ApiKey = Depends(caller)) -> dict[str, Any]:
        out = resolve_context(body.session_id, body.key,
                              cache_of(key, body.cache, body.workspace_id, "read"),
                              memory=read(key, body.workspace_id),
                              reinforce=reinforces(key, body.workspace_id))
        state.record("resolve", body.workspace_id, session_id=body.session_id, key=body.key,
                     cache=body.cache)
        return out

    @app.post("/v1/promote")
    @encoded
    def promote(body: PromoteIn, key: ApiKey = Depends(caller)) -> dict[str, Any]:
        out = promote_to_long_term(body.session_id, body.key, body.value, body.node_type,
                                   memory=write(key, body.workspace_id))
        state.record("promote", body.workspace_id, session_id=body.session_id, key=body.key,
                     value=body.value, node_type=body.node_type)
        return out

    @app.get("/v1/status")
    @encoded
    def status(session_id: str, workspace_id: str = "default", cache: str = "default",
               key: ApiKey = Depends(caller)) -> dict[str, Any]:
        return get_memory_status(session_id, cache_of(key, cache, workspace_id, "read"),
                                 memory=read(key, workspace_id))

    @app.post("/v1/cache/set")
    @encoded
    def cache_set(body: CacheSetIn, key: ApiKey = Depends(caller)) -> dict[str, Any]:
        index = cache_of(key, body.cache, body.workspace_id, "write").set(body.key, body.value)
        state.record("cache_set", body.workspace_id, key=body.key, value=body.value,
                     cache=body.cache)
        return {"index": index}

    @app.post("/v1/cache/peek")
    @encoded
    def cache_peek(body: CacheKeyIn, key: ApiKey = Depends(caller)) -> dict[str, Any]:
        hit, value, index = cache_of(key, body.cache, body.workspace_id, "read").peek(
            body.key, reinforce=reinforces(key, body.workspace_id))
        state.record("cache_peek", body.workspace_id, key=body.key, cache=body.cache)
        return {"hit": hit, "value": value, "index": index}

    @app.post("/v1/cache/flush")
    @encoded
    def cache_flush(cache: str = "default", workspace_id: str = "default",
                    key: ApiKey = Depends(caller)) -> dict[str, Any]:
        return {"flushed": cache_of(key, cache, workspace_id, "write").flush()}

    @app.post("/v1/graph/nodes")
    @encoded
    def graph_node(body: NodeIn, key: ApiKey = Depends(caller)) -> dict[str, Any]:
        node_id = upsert_node(body.session_id, body.node_type, body.label, body.content,
                              body.metadata, memory=write(key, body.workspace_id))
        return {"node_id": node_id}

    @app.post("/v1/graph/search")
    @encoded
    def graph_search(body: GraphSearchIn, key: ApiKey = Depends(caller)) -> list[dict[str, Any]]:
        return search_graph(body.session_id, body.query, body.max_depth, body.top_k,
                            memory=read(key, body.workspace_id),
                            reinforce=reinforces(key, body.workspace_id))

    @app.post("/v1/maintenance", status_code=200, responses={
        202: {"description": "accepted: `dry_run: false` runs after the response"}})
    def maintenance(body: MaintenanceIn, background: BackgroundTasks,
                    key: ApiKey = Depends(caller)):
        key.check(body.workspace_id, "read" if body.dry_run else "write")
        passes = tuple(body.passes) if body.passes is not None else None
        if not state.exists(body.workspace_id):  # a workspace that does not exist has no work
            state.reader(body.workspace_id)  # validates the id
            if passes is not None:
                from memlab.maintenance import PASSES
                unknown = sorted(set(passes) - set(PASSES))
                if unknown:
                    raise ValueError(f"passes must be among {list(PASSES)}, got {unknown}")
            if body.dry_run:
                return {"dry_run": True, "actions": [], "counts": {}}
            return JSONResponse(status_code=202, content={"dry_run": False, "accepted": True})
        reasoner = state.reasoner(body.workspace_id)
        if body.dry_run:
            report = reasoner.run("api", dry_run=True, passes=passes)
            return {"dry_run": True, "actions": report.actions, "counts": report.counts()}
        if passes is not None:
            from memlab.maintenance import PASSES
            unknown = sorted(set(passes) - set(PASSES))
            if unknown:
                raise ValueError(f"passes must be among {list(PASSES)}, got {unknown}")

        def run() -> None:
            try:
                reasoner.run("api", passes=passes)
            except Exception as exc:  # noqa: BLE001 - after the response: record, never raise
                reasoner.failures.append({"event": "api", "error": f"{type(exc).__name__}: "
                                                                   f"{exc}"})

        background.add_task(run)
        state.record("maintenance", body.workspace_id, dry_run=False,
                     passes=list(passes) if passes else None)
        return JSONResponse(status_code=202, content={"dry_run": False, "accepted": True})

    return app


def encoded(endpoint):
    """``endpoint`` (a sync route) answering with its JSON already encoded, in its own thread.

    FastAPI runs a sync route in a worker thread, then validates its return value against the
    return annotation in a second trip to the thread pool, and encodes it on the event loop.
    This does the same work (a pydantic ``TypeAdapter`` of the same annotation: validated with
    ``from_attributes``, dumped to JSON ``by_alias``, as FastAPI's response field does) in the
    worker thread that computed the value, and returns the encoded
    ``Response(media_type="application/json")``, which FastAPI passes through as it is (with
    the route's background tasks). The answer's bytes and headers are unchanged; so is the
    OpenAPI schema, which still comes from the annotation. A value that does not validate or
    encode is returned unchanged, so FastAPI answers it exactly as before (a 500, or the 400
    of a ``ValueError``); a route's own ``Response`` passes through.

    Examples
    --------
    >>> from typing import Any
    >>> @encoded
    ... def answer() -> dict[str, Any]:
    ...     return {"n": 1}
    >>> answer().body
    b'{"n":1}'
    """
    from pydantic import TypeAdapter
    from starlette.responses import Response

    annotation = inspect.signature(endpoint).return_annotation
    if annotation is inspect.Signature.empty:
        raise ValueError(f"endpoint must have a return annotation, got {endpoint!r:.80}")
    adapter = TypeAdapter(annotation)

    @functools.wraps(endpoint)
    def run(*args: Any, **kwargs: Any) -> Any:
        out = endpoint(*args, **kwargs)
        if isinstance(out, Response):
            return out
        try:
            body = adapter.dump_json(adapter.validate_python(out, from_attributes=True),
                                     by_alias=True)
        except Exception:  # noqa: BLE001 - FastAPI checks it again and answers as before
            return out
        return Response(content=body, media_type="application/json")

    run.__memlab_encoded__ = True  # a route's plan may run it (memlab.service._plan)
    return run


def _route_class():
    """The route class of the app's routes: :class:`memlab.service._plan.PlannedRoute`."""
    from memlab.service._plan import PlannedRoute
    return PlannedRoute


#: True while a HEAD request is answered as its GET (read by ``reinforces``).
_HEAD_REQUEST: contextvars.ContextVar[bool] = contextvars.ContextVar("memlab_head_request",
                                                                     default=False)


class _Guard:
    """ASGI middleware: the ``Host`` allow-list (400) and the body-size limit (413); and
    ``HEAD`` on every ``GET`` route, answered as the ``GET`` (status and headers, keys and
    limits checked alike) without its body (RFC 9110 §9.3.2; FastAPI routes take GET only).

    A declared ``Content-Length`` over the limit is refused before anything is read; a body
    without one (chunked) is read up to the limit and refused as soon as it passes it.
    """

    def __init__(self, app, *, max_body_bytes: int, hosts: frozenset[str]) -> None:
        self.app, self.max_body_bytes, self.hosts = app, max_body_bytes, hosts

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] == "HEAD":
            scope, send = {**scope, "method": "GET"}, _without_body(send)
            token = _HEAD_REQUEST.set(True)  # read by the routes' workers (context copied)
            try:
                await self._guarded(scope, receive, send)
            finally:
                _HEAD_REQUEST.reset(token)
            return
        await self._guarded(scope, receive, send)

    async def _guarded(self, scope, receive, send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        if "*" not in self.hosts:
            host = _host_name(headers.get("host", ""))
            if host not in self.hosts:
                await _reply(scope, receive, send, 400, {
                    "detail": f"Host header {headers.get('host', '')!r:.100} is not allowed; "
                              f"allowed: {sorted(self.hosts)}"})
                return
        codings = ",".join(v.decode("latin-1") for k, v in scope.get("headers", [])
                           if k.lower() == b"content-encoding")  # every line of it
        if codings and _has_body(headers) and any(
                c.strip().lower() not in ("", "identity") for c in codings.split(",")):
            # RFC 9110 §15.5.16: a body in a coding the server does not read is 415
            await _reply(scope, receive, send, 415, {
                "detail": f"Content-Encoding {codings!r:.40} is not supported; send the "
                          f"body uncompressed"}, headers={"Accept-Encoding": "identity"})
            return
        declared = headers.get("content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                await _reply(scope, receive, send, 400, {
                    "detail": f"Content-Length must be an integer, got {declared!r:.40}"})
                return
            if size > self.max_body_bytes:
                await self._too_large(scope, receive, send, size)
                return
            await self.app(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > self.max_body_bytes:
                await self._too_large(scope, receive, send, len(body), at_least=True)
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, scope, receive, send, size: int, at_least: bool = False) -> None:
        got = f"more than {self.max_body_bytes}" if at_least else str(size)
        await _reply(scope, receive, send, 413, {
            "detail": f"the request body is {got} bytes; the limit max_body_bytes is "
                      f"{self.max_body_bytes} bytes",
            "limit": "max_body_bytes", "allowed": self.max_body_bytes, "got": size})


def _without_body(send):
    """``send`` with every response body chunk emptied (the headers, Content-Length included,
    stay those of the GET)."""
    async def send_headers_only(message) -> None:
        if message["type"] == "http.response.body":
            message = {**message, "body": b""}
        await send(message)
    return send_headers_only


async def _reply(scope, receive, send, status: int, content: dict,
                 headers: dict | None = None) -> None:
    from starlette.responses import JSONResponse
    await JSONResponse(status_code=status, content=content, headers=headers)(scope, receive,
                                                                              send)


def _has_body(headers: dict[str, str]) -> bool:
    """Whether a request declares a body: a Content-Length above 0, or chunked."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return True
    length = headers.get("content-length", "").strip()
    if not length:
        return False
    return not length.isdigit() or int(length) > 0  # (a malformed length: the guard's 400)


#: How much of a request's input a 422 echoes (FastAPI echoes each invalid value whole).
_ECHO_CHARS, _ECHO_ERRORS = 200, 20


def _bounded(errors: list[dict], force: bool = False) -> list[dict] | None:
    """``errors`` (pydantic's, as FastAPI answers them) with every ``input`` that is large,
    or not plain JSON (NaN, infinities, a lone surrogate), replaced by a short description,
    and at most ``_ECHO_ERRORS`` of them; None when nothing needed it (and not ``force``).
    A 30 KB body of 10,000 wrong items would otherwise be answered by a megabyte."""
    from fastapi.encoders import jsonable_encoder
    changed = force or len(errors) > _ECHO_ERRORS
    out = []
    for error in errors[:_ECHO_ERRORS]:
        error = dict(error)
        loc = error.get("loc", ())
        if any(isinstance(part, str) and len(part) > _ECHO_CHARS for part in loc):
            error["loc"] = [f"{part[:_ECHO_CHARS]}… ({len(part)} characters)"
                            if isinstance(part, str) and len(part) > _ECHO_CHARS else part
                            for part in loc]  # an unknown key of 100,000 characters
            changed = True
        if "input" in error and (force or not _small_plain(error["input"], [_ECHO_CHARS])):
            value = error["input"]
            size = f" of {len(value)}" if hasattr(value, "__len__") else ""
            error["input"] = f"<{type(value).__name__}{size}, not echoed>"
            changed = True
        out.append(error)
    if not changed:
        return None
    if len(errors) > _ECHO_ERRORS:
        out.append({"type": "too_many_errors", "loc": ["body"],
                    "msg": f"{len(errors) - _ECHO_ERRORS} more errors not shown"})
    return jsonable_encoder(out)


def _small_plain(value, budget: list[int]) -> bool:
    """Whether ``value`` is JSON-plain (finite numbers, encodable strings) and its strings and
    containers stay within ``budget[0]`` characters and entries in all (spent as it goes)."""
    if value is None or isinstance(value, bool):
        budget[0] -= 1
        return budget[0] >= 0
    if isinstance(value, int):  # its digits (at most 4,300: json's own limit)
        budget[0] -= len(str(abs(value))) if abs(value) >= 10 ** 6 else 1
        return budget[0] >= 0
    if isinstance(value, float):
        budget[0] -= 1
        return budget[0] >= 0 and value == value and value not in (float("inf"),
                                                                      float("-inf"))
    if isinstance(value, str):
        budget[0] -= len(value)
        if budget[0] < 0:
            return False
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, (list, tuple)):
        budget[0] -= 1
        return budget[0] >= 0 and all(_small_plain(v, budget) for v in value)
    if isinstance(value, dict):
        budget[0] -= 1
        return budget[0] >= 0 and all(_small_plain(k, budget) and _small_plain(v, budget)
                                      for k, v in value.items())
    return False


#: The detail of FastAPI's 400 for a body it could not parse (other than a JSON syntax error).
_FASTAPI_BODY_ERROR = "There was an error parsing the body"


def _is_json(content_type: str | None) -> bool:
    """Whether FastAPI reads a body of this ``Content-Type`` as JSON (``application/json`` or
    ``application/*+json``, parameters ignored)."""
    if not content_type:
        return False
    kind = content_type.split(";", 1)[0].strip().lower()
    main, _, sub = kind.partition("/")
    return main == "application" and (sub == "json" or sub.endswith("+json"))


def _why_not_json(cause: BaseException) -> str:
    """What kept a body from being read as JSON, in a few words (never the body itself)."""
    if isinstance(cause, UnicodeDecodeError):
        return f"it is not UTF-8 ({cause.reason} at byte {cause.start})"
    if isinstance(cause, RecursionError):
        return "it nests too deeply"
    return f"{cause}"[:200]


def _host_name(header: str) -> str:
    """The host of a ``Host`` header, lower case, without port or IPv6 brackets."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


_ERRORS = {
    "400": "Bad request: a value memlab rejects, or a Host header not in the allow-list; "
           "`detail` names the argument and the value.",
    "401": "Missing or wrong API key (when the server has one).",
    "403": "The key's scope does not reach this workspace (read or write), or the route needs "
           "an admin key.",
    "413": "Over a limit (body size, content length, items per bulk request, metadata size or "
           "depth); `detail` names it, `limit`, `allowed` and `got` give the numbers.",
    "415": "A `Content-Encoding` other than identity (send the body uncompressed).",
    "503": "The memory store cannot be read; `detail`, `path` and `hint` say why.",
}


def _document_errors(app) -> None:
    """Add the service's error answers to every operation of the OpenAPI schema."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = build()
        for path, operations in schema.get("paths", {}).items():
            for operation in operations.values():
                answers = operation.setdefault("responses", {})
                codes = ["400"]
                if path != "/health":
                    codes += ["401", "403"]
                if "requestBody" in operation:
                    codes += ["413", "415"]
                if path == "/health/graph":
                    codes.append("503")
                for code in codes:
                    answers.setdefault(code, {"description": _ERRORS[code]})
        return schema

    app.openapi = openapi


def _version() -> str:
    import memlab
    return memlab.__version__
