"""A deliberately faulty MCP server for the proxy's fault tests, written on raw JSON-RPC over stdio.

Run as ``python faulty_server.py LOG_PATH``. Every tool is annotated read-only (the tests trust the server
so the proxy guesses them). Tools, each taking ``key``:

- ``lookup``: answers ``value-of-KEY``;
- ``hang``: never answers;
- ``guess_hangs``: never answers a request of the proxy's own (id ``forethought-spec-...``), answers the
  client's at once;
- ``guess_fails``: a JSON-RPC error for the proxy's own requests, ``value-of-KEY`` for the client's;
- ``rpc_error``: always a JSON-RPC error;
- ``bad_json``: writes a line that is not JSON, and nothing else;
- ``bad_shape``: a result whose ``content`` is not a list;
- ``not_object``: a result that is a number.

Every request is appended to LOG_PATH as one JSON line (``{"id", "tool"}``), so a test counts what reached it.
"""

from __future__ import annotations

import json
import sys
from typing import Any

LOG = sys.argv[1]
TOOLS = ("lookup", "hang", "guess_hangs", "guess_fails", "rpc_error", "bad_json", "bad_shape", "not_object")
OWN_PREFIX = "forethought-spec-"


def send(message: dict[str, Any] | str) -> None:
    sys.stdout.write((message if isinstance(message, str) else json.dumps(message)) + "\n")
    sys.stdout.flush()


def tool_list() -> list[dict[str, Any]]:
    schema = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}
    return [{"name": n, "description": n, "inputSchema": schema, "annotations": {"readOnlyHint": True}}
            for n in TOOLS]


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}], "isError": False}


def call(request_id: Any, name: str, key: str) -> None:
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps({"id": request_id, "tool": name}) + "\n")
    own = isinstance(request_id, str) and request_id.startswith(OWN_PREFIX)
    reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
    if name == "lookup" or (name == "guess_fails" and not own) or (name == "guess_hangs" and not own):
        send(reply | {"result": text(f"value-of-{key}")})
    elif name in ("hang", "guess_hangs"):
        return
    elif name in ("rpc_error", "guess_fails"):
        send(reply | {"error": {"code": -32603, "message": f"{name} failed for {key}"}})
    elif name == "bad_json":
        send('{"jsonrpc": "2.0", "id": ' + json.dumps(request_id) + ', "result": {oops')
    elif name == "bad_shape":
        send(reply | {"result": {"content": "not a list"}})
    elif name == "not_object":
        send(reply | {"result": 42})
    else:
        send(reply | {"error": {"code": -32602, "message": f"unknown tool {name}"}})


def main() -> None:
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:
            continue  # a notification
        if method == "initialize":
            version = (message.get("params") or {}).get("protocolVersion", "2025-06-18")
            send({"jsonrpc": "2.0", "id": request_id, "result": {
                "protocolVersion": version, "capabilities": {"tools": {}},
                "serverInfo": {"name": "faulty", "version": "0"}}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": tool_list()}})
        elif method == "tools/call":
            params = message.get("params") or {}
            call(request_id, str(params.get("name")), str((params.get("arguments") or {}).get("key")))
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": request_id, "result": {}})
        else:
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "no such method"}})


if __name__ == "__main__":
    main()
