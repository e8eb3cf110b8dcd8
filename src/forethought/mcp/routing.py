"""The HTTP headers a request of the newest (stateless) MCP revision must carry to a streamable-HTTP upstream.

Under the 2026 revision a request carries its protocol version in ``params._meta``, and over HTTP the same
version, its method, the name it acts on (a tool's, a prompt's, a resource's URI) and the arguments a tool's
schema marks ``x-mcp-header`` must also travel as headers (``MCP-Protocol-Version``, ``Mcp-Method``,
``Mcp-Name``, ``Mcp-Param-*``); a server rejects a request without them (the SDK's HTTP transport, given no
version, sends it as an old-style request of a session it never opened). The ``mcp`` client stamps them on
every request it makes; a relay that forwards JSON-RPC messages must stamp them itself, from the message
and from the tool list it relayed. :class:`RouteHeaders` does that, with the SDK's own helpers; a request
of an older revision (its version came with ``initialize``) gets nothing here, and the transport goes on
sending what it learnt at the handshake.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.shared.inbound import (
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    NAME_BEARING_METHODS,
    encode_header_value,
    mcp_param_headers,
    x_mcp_header_map,
)
from mcp.shared.message import ClientMessageMetadata
from mcp_types import PROTOCOL_VERSION_META_KEY, JSONRPCMessage, JSONRPCRequest
from mcp_types.version import MODERN_PROTOCOL_VERSIONS


class RouteHeaders:
    """Per-request HTTP headers of the newest revision, for requests relayed or made by the proxy."""

    def __init__(self) -> None:
        self._param_maps: dict[str, dict[tuple[str, ...], str]] = {}
        """Tool name -> where its ``x-mcp-header`` arguments sit and the header each goes in."""

    def listed(self, listing: Mapping[str, Mapping[str, Any]]) -> None:
        """Learn the ``x-mcp-header`` arguments of the tools in a complete ``tools/list``."""
        maps: dict[str, dict[tuple[str, ...], str]] = {}
        for name, entry in listing.items():
            schema = entry.get("inputSchema")
            try:
                found = x_mcp_header_map(schema) if isinstance(schema, Mapping) else {}
            except (TypeError, ValueError):  # a malformed annotation: the server will say so itself
                found = {}
            if found:
                maps[name] = found
        self._param_maps = maps

    def metadata(self, message: JSONRPCMessage) -> ClientMessageMetadata | None:
        """What a transport should send with ``message``: ``None`` for anything but a request of the newest
        revision."""
        if not isinstance(message, JSONRPCRequest) or not isinstance(message.params, Mapping):
            return None
        params: Mapping[str, Any] = message.params
        meta = params.get("_meta")
        version = meta.get(PROTOCOL_VERSION_META_KEY) if isinstance(meta, Mapping) else None
        if not isinstance(version, str) or version not in MODERN_PROTOCOL_VERSIONS:
            return None
        headers = {MCP_PROTOCOL_VERSION_HEADER: version, MCP_METHOD_HEADER: message.method}
        name_key = NAME_BEARING_METHODS.get(message.method)
        named = params.get(name_key) if name_key is not None else None
        if isinstance(named, str):
            headers[MCP_NAME_HEADER] = encode_header_value(named)
        if message.method == "tools/call" and isinstance(named, str):
            param_map = self._param_maps.get(named)
            arguments = params.get("arguments")
            if param_map and isinstance(arguments, Mapping):
                headers.update(mcp_param_headers(param_map, arguments))
        return ClientMessageMetadata(headers=headers)
