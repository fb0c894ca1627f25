"""The MCP server (SPEC §9): memlab's tools over the official ``mcp`` SDK (extra ``service``).

``memlab mcp`` serves them over stdio (the store in ``$MEMLAB_DB`` when set). Every tool has a
JSON schema from its signature (``additionalProperties: false``: an unknown argument is a tool
error naming it); every error becomes an MCP tool error carrying its message, and an id holding
a NUL character is refused. Reads never create a workspace; every tool's arguments obey the
service's :class:`~memlab.service.limits.Limits` by name, exactly as over HTTP
(:meth:`~memlab.service.limits.Limits.check_args`: queries ``max_query_chars``, contents and
values ``max_content_chars``, ids, keys and short names ``max_id_chars``, metadata its own).
The server takes the same :class:`~memlab.service.state.ServiceState` as the HTTP app, so in one
process both surfaces share one store.

Scoping: an MCP server over stdio serves one client, the process that started it, so it has no
keys; whoever can start it can read its database file anyway. What it has is an optional list of
allowed workspaces (glob patterns, ``memlab mcp --workspaces 'team-a-*,shared'`` or
``$MEMLAB_MCP_WORKSPACES``): a tool call naming any other workspace is a tool error, and nothing
is read or created. As over HTTP, caches belong to a workspace (the cache tools take
``workspace_id``) and session ids are namespaced per workspace.

Lone surrogates over stdio: ``{"content": "deploy \\udc00 checklist"}`` is valid JSON text,
but the SDK's parser refuses it, and its stdio transport then drops the whole line without an
answer (it cannot tell which request it was). :func:`serve_stdio` (what ``memlab mcp`` runs)
reads the transport's stream instead of handing it to the SDK directly: such a request is
re-read with Python's ``json``, which accepts the escape, and goes on to the SDK with the
surrogates blanked out and memlab's refusal attached (``content contains a lone surrogate at
7``, exactly the library's ValueError and HTTP's 400), so a tool call gets it as a tool error
and any other request as a JSON-RPC ``invalid params`` error. A request whose JSON-RPC ``id``
holds a lone surrogate or NUL is refused before the SDK sees it, with a JSON-RPC ``invalid
request`` error (``Invalid request: id contains a lone surrogate at 0``; ``id must not contain
NUL (at 1)``): its answer repeats an id holding NUL and has ``"id": null`` for one holding a
surrogate, which no UTF-8 answer can repeat.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from memlab.model import check_text, validate_json
from memlab.service.auth import ScopeError, check_allowed, parse_patterns
from memlab.service.limits import check_id_args
from memlab.service.state import ServiceState

__all__ = ["create_mcp_server", "serve_stdio", "TOOLS"]

TOOLS = ("get_working_context", "resolve_context", "promote_to_long_term", "memory_status",
         "peek", "set", "flush", "search_memory_graph", "upsert_memory_node", "pin_item",
         "unpin_item", "add_memory")


def create_mcp_server(state: ServiceState | None = None, *,
                      workspaces: list[str] | str | None = None):
    """An ``MCPServer`` whose tools act on ``state`` (a fresh in-memory one when omitted).

    Parameters
    ----------
    state : ServiceState, optional
        The store and its caches (a fresh in-memory state when omitted).
    workspaces : list of str or str, optional
        Glob patterns of the workspaces the tools may touch (a list, or one comma-separated
        string); None allows every workspace.

    Raises
    ------
    ValueError
        ``workspaces`` is empty or holds an empty pattern.
    """
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError:  # pragma: no cover - depends on the install
        raise ImportError("the MCP server needs the service extra: "
                          "pip install 'memlab[service]'") from None
    from memlab.session import (get_memory_status, promote_to_long_term, resolve_context,
                                search_graph, upsert_node)

    allowed = parse_patterns(workspaces, "workspaces")
    state = state or ServiceState()

    def memory(workspace_id: str):
        return state.memory(check_allowed(allowed, workspace_id))

    def reader(workspace_id: str):
        return state.reader(check_allowed(allowed, workspace_id))  # never creates it

    def cache_of(name: str, workspace_id: str):
        return state.cache(name, check_allowed(allowed, workspace_id))

    def cache_reader(name: str, workspace_id: str):
        return state.cache_reader(name, check_allowed(allowed, workspace_id))  # never creates

    session = state.session_key  # session ids are namespaced per workspace

    def errors_as_tool_errors(fn):
        """Every error becomes an MCP tool error that carries its message (a ValueError's as
        is, any other prefixed by its type); ids holding NUL are refused first."""
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                check_id_args(kwargs)
                state.limits.check_args(kwargs)  # the HTTP app's limits, by argument name
                return fn(*args, **kwargs)
            except (ValueError, ScopeError) as exc:
                raise ToolError(str(exc)) from exc
            except Exception as exc:  # noqa: BLE001 - the client gets every error's message
                raise ToolError(f"{type(exc).__name__}: {exc}") from exc
        return wrapper

    server = MCPServer(name="memlab", instructions=(
        "memlab memory: store memories, surface a working context for the current turn, keep a "
        "short-term cache and promote what matters to the long-term graph."))

    @server.tool()
    @errors_as_tool_errors
    def get_working_context(session_id: str, query: str, k: int = 20,
                            max_tokens: int | None = None, strategy: str | None = None,
                            workspace_id: str = "default") -> dict[str, Any]:
        """The memories to put in front of the model for this turn, with score breakdowns."""
        return reader(workspace_id).get_working_context(
            session(workspace_id, session_id), query, k=k, max_tokens=max_tokens,
            strategy=strategy)

    @server.tool()
    @errors_as_tool_errors
    def add_memory(content: str, memory_type: str = "semantic",
                   metadata: dict[str, Any] | None = None, item_id: str | None = None,
                   workspace_id: str = "default") -> dict[str, Any]:
        """Store one memory; returns its id."""
        return {"item_id": memory(workspace_id).add(content, memory_type, metadata,
                                                          item_id)}

    @server.tool(name="resolve_context")
    @errors_as_tool_errors
    def resolve_context_tool(session_id: str, key: str, cache: str = "default",
                             workspace_id: str = "default") -> dict[str, Any]:
        """Short-term cache first, then the long-term graph, else a miss (scores in [0, 1])."""
        return resolve_context(session_id, key, cache_reader(cache, workspace_id),
                               memory=reader(workspace_id))

    @server.tool(name="promote_to_long_term")
    @errors_as_tool_errors
    def promote_to_long_term_tool(session_id: str, key: str, value: str,
                                  node_type: str = "concept",
                                  workspace_id: str = "default") -> dict[str, Any]:
        """Write key -> value to the long-term graph (an explicit promotion)."""
        return promote_to_long_term(session_id, key, value, node_type,
                                    memory=memory(workspace_id))

    @server.tool()
    @errors_as_tool_errors
    def memory_status(session_id: str, cache: str = "default",
                      workspace_id: str = "default") -> dict[str, Any]:
        """Short-term slots and long-term nodes and edges (observational)."""
        return get_memory_status(session_id, cache_reader(cache, workspace_id),
                                 memory=reader(workspace_id))

    @server.tool()
    @errors_as_tool_errors
    def peek(key: str, cache: str = "default", workspace_id: str = "default") -> dict[str, Any]:
        """Read the workspace's short-term cache: {hit, value, index}."""
        hit, value, index = cache_reader(cache, workspace_id).peek(key)
        return {"hit": hit, "value": value, "index": index}

    @server.tool(name="set")
    @errors_as_tool_errors
    def set_(key: str, value: str, cache: str = "default",
             workspace_id: str = "default") -> dict[str, Any]:
        """Write the workspace's short-term cache; returns the slot index."""
        return {"index": cache_of(cache, workspace_id).set(key, value)}

    @server.tool()
    @errors_as_tool_errors
    def flush(cache: str = "default", workspace_id: str = "default") -> dict[str, Any]:
        """Empty the workspace's short-term cache."""
        return {"flushed": cache_of(cache, workspace_id).flush()}

    @server.tool()
    @errors_as_tool_errors
    def search_memory_graph(session_id: str, query: str, max_depth: int = 1, top_k: int = 5,
                            workspace_id: str = "default") -> list[dict[str, Any]]:
        """Long-term nodes matching the query and their neighbours, scores in [0, 1]."""
        return search_graph(session_id, query, max_depth, top_k,
                            memory=reader(workspace_id))

    @server.tool()
    @errors_as_tool_errors
    def upsert_memory_node(session_id: str, node_type: str, label: str, content: str,
                           metadata: dict[str, Any] | None = None,
                           workspace_id: str = "default") -> dict[str, Any]:
        """Create or update the long-term node with this type and label."""
        return {"node_id": upsert_node(session_id, node_type, label, content, metadata,
                                       memory=memory(workspace_id))}

    @server.tool()
    @errors_as_tool_errors
    def pin_item(session_id: str, item_id: str, weight: float = 1.0,
                 workspace_id: str = "default") -> dict[str, Any]:
        """Force an item into the session's contexts (24 h, refreshed by pin writes)."""
        mem = reader(workspace_id)  # the item must exist, so must the workspace
        sid = session(workspace_id, session_id)
        mem.pin_item(sid, item_id, weight)
        return {"pins": mem.get_pins(sid)}

    @server.tool()
    @errors_as_tool_errors
    def unpin_item(session_id: str, item_id: str,
                   workspace_id: str = "default") -> dict[str, Any]:
        """Remove a pin."""
        mem = reader(workspace_id)  # nothing is pinned in an unknown workspace
        sid = session(workspace_id, session_id)
        mem.unpin_item(sid, item_id)
        return {"pins": mem.get_pins(sid)}

    _refuse_unknown_arguments(server, ToolError)
    server.middleware.append(_refuse_marked_requests)
    return server


@dataclass(frozen=True)
class _Refused:
    """Attached by :func:`serve_stdio` to a request it could only pass on with its lone
    surrogates blanked out: the request must be refused with ``message``, never served."""

    message: str


def _refusal(context: Any) -> _Refused | None:
    """The :class:`_Refused` mark of the request a tool call runs in, if any (none in process,
    where there is no request, and none over HTTP, where it is the HTTP request)."""
    try:
        request = context.request_context.request
    except (AttributeError, ValueError):  # no context, or not inside a request
        return None
    return request if isinstance(request, _Refused) else None


async def _refuse_marked_requests(ctx, call_next):
    """SDK middleware: a marked request other than a tool call is an ``invalid params`` error
    carrying memlab's message (a tool call is refused as a tool error by the tool layer)."""
    refused = getattr(ctx, "request", None)
    if isinstance(refused, _Refused) and ctx.method != "tools/call":
        from mcp import MCPError
        from mcp_types import INVALID_PARAMS
        raise MCPError(code=INVALID_PARAMS, message=refused.message)
    return await call_next(ctx)


def _lone_surrogate_error(message: dict) -> str | None:
    """memlab's error for the first lone surrogate in a request's method or params (a tool
    call's arguments by their names, e.g. ``content contains a lone surrogate at 7`` or
    ``metadata['tags'][1] contains a lone surrogate at 0``), or None when it holds none."""
    no_depth_limit = 1 << 62  # the walk is iterative; only surrogates may raise
    method, params = message.get("method"), message.get("params")
    try:
        validate_json(method, "method", max_depth=no_depth_limit)
        if isinstance(params, dict):
            arguments = params.get("arguments")
            if method == "tools/call" and isinstance(arguments, dict):
                for name, value in arguments.items():
                    check_text(name, "argument name")
                    validate_json(value, name, max_depth=no_depth_limit)
            for name, value in params.items():
                check_text(name, "params key")
                validate_json(value, name, max_depth=no_depth_limit)
        else:
            validate_json(params, "params", max_depth=no_depth_limit)
    except ValueError as exc:
        return str(exc)
    return None


def _answerable(item: Any) -> Any:
    """Turn the SDK's parse failure of a request holding lone surrogates back into that
    request, surrogates blanked out and marked :class:`_Refused`; return anything else as is.

    The SDK's stdio transport yields a parse failure as an exception, which its dispatcher only
    logs: the request it came from would never be answered. Notifications and responses stay
    unanswered (JSON-RPC answers neither); a request whose id itself holds a lone surrogate is
    answered before this stage (:func:`_refused_id`)."""
    if not isinstance(item, Exception) or not callable(getattr(item, "errors", None)):
        return item
    try:
        line = next(error["input"] for error in item.errors()
                    if error.get("type") == "json_invalid" and isinstance(error.get("input"), str))
        message = json.loads(line)  # Python's parser accepts a lone surrogate escape
    except Exception:  # noqa: BLE001 - not a parse failure memlab can answer: the SDK's own
        return item
    if not isinstance(message, dict) or not isinstance(message.get("method"), str):
        return item
    request_id = message.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, (int, str)):
        return item
    error = _lone_surrogate_error(message)
    if error is None:
        return item
    from mcp.shared.message import ServerMessageMetadata, SessionMessage
    from mcp_types import jsonrpc_message_adapter
    # Blank the surrogates out (each becomes U+FFFD): the SDK parses the request, routes it and
    # answers it in its own wire shape, but refuses it before any handler sees the text.
    blanked = (json.dumps(message, ensure_ascii=False).encode("utf-8", "surrogatepass")
               .decode("utf-8", "replace"))
    try:
        request = jsonrpc_message_adapter.validate_json(blanked, by_name=False)
    except Exception:  # noqa: BLE001 - not a valid JSON-RPC message either: as before
        return item
    if getattr(request, "id", None) != request_id:  # the id held a surrogate: no answer
        return item
    return SessionMessage(request, metadata=ServerMessageMetadata(request_context=_Refused(error)))


def _id_problem(request_id: Any) -> str | None:
    """Why a JSON-RPC request id is refused (None: it is not): memlab refuses a string id
    holding a lone surrogate (no UTF-8 answer can repeat it) or a NUL character, exactly as it
    refuses them in its own ids (:func:`memlab.model.validate_id`)."""
    if not isinstance(request_id, str):
        return None
    try:
        check_text(request_id, "id")
    except ValueError as exc:
        return str(exc)
    nul = request_id.find("\x00")
    return None if nul < 0 else f"id must not contain NUL (at {nul})"


def _refused_id(item: Any) -> Any:
    """The JSON-RPC ``invalid request`` error answering ``item`` when it is a request whose id
    :func:`_id_problem` refuses, else None (``item`` goes on to the SDK).

    An id holding a lone surrogate reaches this stage as the SDK's parse failure (its parser
    refuses the escape); the answer then has ``"id": null``, as JSON-RPC 2.0 prescribes when the
    id cannot be given back (no UTF-8 text can hold that id, and the SDK's writer would fail on
    it). An id holding NUL parses, and its answer repeats it (``"a\\u0000b"`` is valid JSON).
    Notifications have no id and are never answered."""
    if isinstance(item, Exception):
        if not callable(getattr(item, "errors", None)):
            return None
        try:
            line = next(error["input"] for error in item.errors()
                        if error.get("type") == "json_invalid"
                        and isinstance(error.get("input"), str))
            message = json.loads(line)  # Python's parser accepts a lone surrogate escape
        except Exception:  # noqa: BLE001 - not a failure memlab can answer: the SDK's own
            return None
    else:
        request = getattr(item, "message", None)
        if type(request).__name__ != "JSONRPCRequest":
            return None
        message = {"id": request.id, "method": request.method}
    if not isinstance(message, dict) or "method" not in message:
        return None
    request_id = message.get("id")
    problem = _id_problem(request_id)
    if problem is None:
        return None
    try:  # given back unless no UTF-8 text can hold it
        answer_id = check_text(request_id, "id")
    except ValueError:
        answer_id = None
    from mcp.shared.message import SessionMessage
    from mcp_types import INVALID_REQUEST, ErrorData, JSONRPCError
    return SessionMessage(JSONRPCError(jsonrpc="2.0", id=answer_id, error=ErrorData(
        code=INVALID_REQUEST, message=f"Invalid request: {problem}")))


async def serve_stdio(server) -> None:
    """Serve ``server`` (from :func:`create_mcp_server`) over this process's stdin and stdout,
    answering requests that hold lone surrogates (see the module notes) -- ``memlab mcp``.

    This is ``MCPServer.run_stdio_async`` with one stage between the SDK's stdio transport and
    its server loop: the transport and the loop are the SDK's own, used as documented
    (``stdio_server()`` and ``Server.run``); only the parse failures of such requests are
    turned back into requests, marked for refusal."""
    import anyio
    from mcp.server.stdio import stdio_server

    lowlevel = server._lowlevel_server  # noqa: SLF001 - run_stdio_async's own loop, unwrapped
    async with stdio_server() as (read_stream, write_stream):
        send, receive = anyio.create_memory_object_stream(0)

        async def pump() -> None:
            async with send:
                try:
                    async for item in read_stream:
                        refusal = _refused_id(item)
                        if refusal is not None:  # answered here: the SDK never sees it
                            await write_stream.send(refusal)
                            continue
                        await send.send(_answerable(item))
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    pass  # the server loop has ended

        async with anyio.create_task_group() as tg:
            tg.start_soon(pump)
            await lowlevel.run(receive, write_stream, lowlevel.create_initialization_options())
            tg.cancel_scope.cancel()


def _refuse_unknown_arguments(server, tool_error: type) -> None:
    """Make every tool refuse arguments its schema does not name (the SDK drops them)."""
    manager = server._tool_manager  # noqa: SLF001 - the SDK offers no public switch for this
    allowed: dict[str, frozenset[str]] = {}
    for tool in manager.list_tools():
        tool.parameters["additionalProperties"] = False
        allowed[tool.name] = frozenset(tool.parameters.get("properties", {}))
    call_tool = server.call_tool

    @functools.wraps(call_tool)
    async def checked_call_tool(name: str, arguments: dict[str, Any], *args, **kwargs):
        refused = _refusal(args[0] if args else kwargs.get("context"))
        if refused is not None:  # serve_stdio's mark: the arguments held a lone surrogate
            raise tool_error(f"Error executing tool {name}: {refused.message}")
        known = allowed.get(name)
        if known is not None and isinstance(arguments, dict):
            unknown = sorted(set(arguments) - known)
            if unknown:
                raise tool_error(f"Error executing tool {name}: unknown arguments {unknown}; "
                                 f"allowed: {sorted(known)}")
        return await call_tool(name, arguments, *args, **kwargs)

    server.call_tool = checked_call_tool
