"""The HTTP service (SPEC §9): FastAPI routes over one in-process store (extra ``service``).

Run it with ``memlab serve`` (127.0.0.1:8765; the store in ``$MEMLAB_DB`` when set). Every route
but ``/health`` takes an optional API key (``$MEMLAB_API_KEY``, sent as ``X-API-Key`` or
``Authorization: Bearer``); a missing or wrong key is 401. A ``ValueError`` from memlab is 400
with its message; a malformed body is 422; ``/health/graph`` is 503 with the database path and a
hint when the store cannot be read. Maintenance runs after the response is sent, and its failure
never reaches the client (it is kept in the reasoner's ``failures``).
"""



import hmac
from typing import Any, Literal

from memlab.service.state import ServiceState

__all__ = ["create_app"]


def create_app(state: ServiceState | None = None, *, api_key: str | None = None):
    """The FastAPI application serving ``state`` (a fresh in-memory one when omitted)."""
    try:
        from fastapi import BackgroundTasks, Depends, FastAPI, Header, Request
        from fastapi.responses import JSONResponse
        from pydantic import BaseModel, ConfigDict, Field
    except ImportError:  # pragma: no cover - depends on the install
        raise ImportError("the HTTP service needs the service extra: "
                          "pip install 'memlab[service]'") from None

    from memlab.session import (get_memory_status, promote_to_long_term, resolve_context,
                                search_graph, upsert_node)
    from memlab.topics import ingest, query

    state = state or ServiceState()

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
        query: str
        top_k: int = 10

    class ContextIn(Body):
        session_id: str
        query: str
        k: int = 20
        max_tokens: int | None = None
        strategy: str | None = None

    class EdgeIn(Body):
        src: str
        dst: str
        edge_type: str = "RELATED"
        weight: float = 1.0

    class PinIn(Body):
        session_id: str
        item_id: str
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
        q: str
        stages: list[Literal["semantic", "structural", "temporal"]] = ["semantic", "structural",
                                                                      "temporal"]
        explain: bool = False
        top_k: int = 8

    class ResolveIn(Body):
        session_id: str
        key: str
        cache: str = "default"

    class PromoteIn(Body):
        session_id: str
        key: str
        value: str
        node_type: str = "concept"

    class CacheSetIn(BaseModel):
        model_config = ConfigDict(extra="forbid")
        key: str
        value: str
        cache: str = "default"

    class CacheKeyIn(BaseModel):
        model_config = ConfigDict(extra="forbid")
        key: str
        cache: str = "default"

    class NodeIn(Body):
        session_id: str
        node_type: str
        label: str
        content: str
        metadata: dict[str, Any] | None = None

    class GraphSearchIn(Body):
        session_id: str
        query: str
        max_depth: int = 1
        top_k: int = 5

    class MaintenanceIn(Body):
        dry_run: bool = True
        passes: list[str] | None = None

    def check_key(x_api_key: str | None = Header(None),
                  authorization: str | None = Header(None)) -> None:
        if api_key is None:
            return
        given = x_api_key
        if given is None and authorization and authorization.lower().startswith("bearer "):
            given = authorization[7:]
        if given is None or not hmac.compare_digest(given.encode(), api_key.encode()):
            from fastapi import HTTPException
            raise HTTPException(status_code=401, detail="missing or wrong API key")

    app = FastAPI(title="memlab", version=_version(),
                  description="Memory surfacing for LLM agents: one store, several surfaces.")
    app.state.memlab = state
    secured = [Depends(check_key)]

    @app.exception_handler(ValueError)
    async def value_error(request: Request, exc: ValueError):
        return JSONResponse(status_code=400, content={"detail": str(exc)})

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok"}

    @app.get("/health/graph", dependencies=secured)
    def health_graph():
        try:
            return state.graph_health()
        except Exception as exc:  # noqa: BLE001 - any failure to read is a 503
            return JSONResponse(status_code=503, content={
                "detail": f"the memory store cannot be read: {exc}",
                "path": state.db_path,
                "hint": "check that the database file exists, is readable and is not "
                        "corrupted (sqlite3 <path> 'PRAGMA integrity_check'); restart with "
                        "MEMLAB_DB pointing at a good copy"})

    @app.post("/v1/items", dependencies=secured)
    def add_item(body: ItemIn) -> dict[str, Any]:
        item_id = state.memory(body.workspace_id).add(body.content, body.memory_type,
                                                      body.metadata, body.item_id)
        state.record("add", body.workspace_id, content=body.content, item_id=item_id,
                     memory_type=body.memory_type, metadata=body.metadata)
        return {"item_id": item_id}

    @app.post("/v1/items/bulk", dependencies=secured)
    def add_items(body: ItemsIn) -> dict[str, Any]:
        ids = state.memory(body.workspace_id).add_many(body.items)
        for item_id, item in zip(ids, body.items):
            state.record("add", body.workspace_id, content=item.get("content"), item_id=item_id,
                         memory_type=item.get("memory_type"), metadata=item.get("metadata"))
        return {"item_ids": ids}

    @app.get("/v1/items/{item_id}", dependencies=secured)
    def get_item(item_id: str, workspace_id: str = "default") -> dict[str, Any]:
        return state.memory(workspace_id).get(item_id)

    @app.post("/v1/search", dependencies=secured)
    def search(body: SearchIn) -> list[dict[str, Any]]:
        return state.memory(body.workspace_id).search(body.query, top_k=body.top_k)

    @app.post("/v1/context", dependencies=secured)
    def context(body: ContextIn) -> dict[str, Any]:
        response = state.memory(body.workspace_id).get_working_context(
            body.session_id, body.query, k=body.k, max_tokens=body.max_tokens,
            strategy=body.strategy)
        state.record("query", body.workspace_id, session_id=body.session_id, query=body.query,
                     k=body.k, max_tokens=body.max_tokens, strategy=body.strategy)
        return response

    @app.post("/v1/edges", dependencies=secured)
    def add_edge(body: EdgeIn) -> dict[str, Any]:
        state.memory(body.workspace_id).add_edge(body.src, body.dst, body.edge_type, body.weight)
        state.record("add_edge", body.workspace_id, src=body.src, dst=body.dst,
                     edge_type=body.edge_type, weight=body.weight)
        return {"src": body.src, "dst": body.dst, "edge_type": body.edge_type,
                "weight": body.weight}

    @app.get("/v1/edges", dependencies=secured)
    def edges(workspace_id: str = "default", item_id: str | None = None) -> list[dict]:
        return state.memory(workspace_id).get_edges(item_id)

    @app.post("/v1/pins", dependencies=secured)
    def pin(body: PinIn) -> dict[str, Any]:
        mem = state.memory(body.workspace_id)
        mem.pin_item(body.session_id, body.item_id, body.weight)
        state.record("pin", body.workspace_id, session_id=body.session_id,
                     item_id=body.item_id, weight=body.weight)
        return {"pins": mem.get_pins(body.session_id)}

    @app.delete("/v1/pins/{session_id}/{item_id}", dependencies=secured)
    def unpin(session_id: str, item_id: str, workspace_id: str = "default") -> dict[str, Any]:
        mem = state.memory(workspace_id)
        mem.unpin_item(session_id, item_id)
        state.record("unpin", workspace_id, session_id=session_id, item_id=item_id)
        return {"pins": mem.get_pins(session_id)}

    @app.get("/v1/pins/{session_id}", dependencies=secured)
    def pins(session_id: str, workspace_id: str = "default") -> dict[str, Any]:
        return {"pins": state.memory(workspace_id).get_pins(session_id)}

    @app.post("/v1/ingest", dependencies=secured)
    def ingest_route(body: IngestIn, background: BackgroundTasks) -> dict[str, Any]:
        fields = body.model_dump(exclude={"workspace_id", "placement"}, exclude_none=True)
        out = ingest(body.placement, memory=state.memory(body.workspace_id), **fields)
        state.record("ingest", body.workspace_id, placement=body.placement, **fields)
        background.add_task(state.after, body.workspace_id, "ingest")
        return out

    @app.post("/v1/query", dependencies=secured)
    def query_route(body: QueryIn, background: BackgroundTasks) -> dict[str, Any]:
        out = query(body.q, stages=list(body.stages), explain=body.explain, top_k=body.top_k,
                    memory=state.memory(body.workspace_id))
        background.add_task(state.after, body.workspace_id, "query")
        return out

    @app.post("/v1/resolve", dependencies=secured)
    def resolve(body: ResolveIn) -> dict[str, Any]:
        out = resolve_context(body.session_id, body.key, state.cache(body.cache),
                              memory=state.memory(body.workspace_id))
        state.record("resolve", body.workspace_id, session_id=body.session_id, key=body.key)
        return out

    @app.post("/v1/promote", dependencies=secured)
    def promote(body: PromoteIn) -> dict[str, Any]:
        out = promote_to_long_term(body.session_id, body.key, body.value, body.node_type,
                                   memory=state.memory(body.workspace_id))
        state.record("promote", body.workspace_id, session_id=body.session_id, key=body.key,
                     value=body.value, node_type=body.node_type)
        return out

    @app.get("/v1/status", dependencies=secured)
    def status(session_id: str, workspace_id: str = "default",
               cache: str = "default") -> dict[str, Any]:
        return get_memory_status(session_id, state.cache(cache),
                                 memory=state.memory(workspace_id))

    @app.post("/v1/cache/set", dependencies=secured)
    def cache_set(body: CacheSetIn) -> dict[str, Any]:
        index = state.cache(body.cache).set(body.key, body.value)
        state.record("cache_set", "default", key=body.key, value=body.value)
        return {"index": index}

    @app.post("/v1/cache/peek", dependencies=secured)
    def cache_peek(body: CacheKeyIn) -> dict[str, Any]:
        hit, value, index = state.cache(body.cache).peek(body.key)
        state.record("cache_peek", "default", key=body.key)
        return {"hit": hit, "value": value, "index": index}

    @app.post("/v1/cache/flush", dependencies=secured)
    def cache_flush(cache: str = "default") -> dict[str, Any]:
        return {"flushed": state.cache(cache).flush()}

    @app.post("/v1/graph/nodes", dependencies=secured)
    def graph_node(body: NodeIn) -> dict[str, Any]:
        node_id = upsert_node(body.session_id, body.node_type, body.label, body.content,
                              body.metadata, memory=state.memory(body.workspace_id))
        return {"node_id": node_id}

    @app.post("/v1/graph/search", dependencies=secured)
    def graph_search(body: GraphSearchIn) -> list[dict[str, Any]]:
        return search_graph(body.session_id, body.query, body.max_depth, body.top_k,
                            memory=state.memory(body.workspace_id))

    @app.post("/v1/maintenance", dependencies=secured)
    def maintenance(body: MaintenanceIn, background: BackgroundTasks):
        reasoner = state.reasoner(body.workspace_id)
        passes = tuple(body.passes) if body.passes is not None else None
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


def _version() -> str:
    import memlab
    return memlab.__version__
