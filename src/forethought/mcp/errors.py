"""Errors of the MCP proxy, in forethought's one family (:class:`~forethought.errors.ForethoughtError`).

They are mapped at the proxy's boundary: a client never sees a Python exception, only the JSON-RPC error
it would get from an MCP server that is gone (:func:`upstream_gone_error`).
"""

from __future__ import annotations

from typing import Any

from forethought.errors import ForethoughtError, PolicyError

UPSTREAM_GONE_CODE = -32000
"""JSON-RPC code of the error a client gets once the upstream server has exited (the SDK's CONNECTION_CLOSED)."""


class McpProxyError(ForethoughtError):
    """The MCP proxy cannot do what was asked (bad command line, upstream unreachable)."""


class UpstreamClosedError(McpProxyError):
    """The upstream MCP server exited or closed its connection; no request to it can be answered."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"the upstream MCP server is gone ({detail})")
        self.detail = detail


class McpPolicyError(PolicyError):
    """An MCP proxy policy file is invalid; the message names the offending key."""


def upstream_gone_error(detail: str) -> dict[str, Any]:
    """The JSON-RPC ``error`` member answered for a request the gone upstream cannot serve."""
    return {"code": UPSTREAM_GONE_CODE,
            "message": f"forethought mcp-proxy: the upstream MCP server is gone ({detail})"}
