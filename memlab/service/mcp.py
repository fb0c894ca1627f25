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
"""

from __future__ import annotations

import functools
from typing import Any

from memlab.service.auth import ScopeError, check_allowed, parse_patterns
from memlab.service.limits import check_id_text
from memlab.service.state import ServiceState

__all__ = ["create_mcp_server", "TOOLS"]

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
                for name, value in kwargs.items():
                    if name.endswith("_id") or name == "cache":
                        check_id_text(value, name)
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
    return server


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
        known = allowed.get(name)
        if known is not None and isinstance(arguments, dict):
            unknown = sorted(set(arguments) - known)
            if unknown:
                raise tool_error(f"Error executing tool {name}: unknown arguments {unknown}; "
                                 f"allowed: {sorted(known)}")
        return await call_tool(name, arguments, *args, **kwargs)

    server.call_tool = checked_call_tool
