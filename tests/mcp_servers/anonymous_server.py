"""An MCP server that never says its name, written on raw JSON-RPC over stdio, for the proxy's naming tests.

Run as ``python anonymous_server.py LOG_PATH``. It speaks both handshakes: ``initialize`` (answered with an
empty ``serverInfo.name``) and the 2026-07-28 revision (``server/discover`` answered with no
``io.modelcontextprotocol/serverInfo`` stamp, requests carrying their protocol version in ``_meta``). One tool,
``lookup(key)``, annotated read-only. Every ``tools/call`` is appended to LOG_PATH as one JSON line (``{"id",
"tool", "key"}``), so a test counts what reached it, guesses included.
"""

from __future__ import annotations

import json
import sys
from typing import Any

LOG = sys.argv[1]
MODERN = "2026-07-28"
MODERN_EXTRA = {"resultType": "complete", "cacheScope": "private", "ttlMs": 0}


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def modern(params: dict[str, Any]) -> bool:
    meta = params.get("_meta")
    return isinstance(meta, dict) and meta.get("io.modelcontextprotocol/protocolVersion") == MODERN


def main() -> None:
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        method, request_id = message.get("method"), message.get("id")
        params = message.get("params") or {}
        if request_id is None:
            continue  # a notification
        extra = MODERN_EXTRA if modern(params) else {}
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        if method == "initialize":
            send(reply | {"result": {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
                                     "capabilities": {"tools": {}}, "serverInfo": {"name": "", "version": "0"}}})
        elif method == "server/discover":
            send(reply | {"result": {"supportedVersions": [MODERN], "capabilities": {"tools": {"listChanged": False}},
                                     **MODERN_EXTRA}})
        elif method == "tools/list":
            tool = {"name": "lookup", "description": "Read one value.", "annotations": {"readOnlyHint": True},
                    "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}
            send(reply | {"result": {"tools": [tool], **extra}})
        elif method == "tools/call":
            key = str((params.get("arguments") or {}).get("key"))
            with open(LOG, "a", encoding="utf-8") as f:
                f.write(json.dumps({"id": request_id, "tool": params.get("name"), "key": key}) + "\n")
            send(reply | {"result": {"content": [{"type": "text", "text": f"value-of-{key}"}], "isError": False,
                                     **extra}})
        elif method == "ping":
            send(reply | {"result": {}})
        else:
            send(reply | {"error": {"code": -32601, "message": "no such method"}})


if __name__ == "__main__":
    main()
