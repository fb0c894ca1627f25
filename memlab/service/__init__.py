"""Service surfaces over one in-process store: HTTP (FastAPI) and MCP (extra ``service``)."""

from memlab.service.limits import LimitExceeded, Limits
from memlab.service.state import Recorder, ServiceState

__all__ = ["ServiceState", "Recorder", "Limits", "LimitExceeded", "create_app",
           "create_mcp_server"]


def __getattr__(name: str):
    # FastAPI and the MCP SDK are optional: import them only when asked for
    if name == "create_app":
        from memlab.service.http import create_app
        return create_app
    if name == "create_mcp_server":
        from memlab.service.mcp import create_mcp_server
        return create_mcp_server
    raise AttributeError(f"module 'memlab.service' has no attribute {name!r}")
