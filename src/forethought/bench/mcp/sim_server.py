"""The seeded ticket service (:mod:`~forethought.bench.mcp.service`) as an MCP server, with read latencies.

``python -m forethought.bench.mcp.sim_server --read-ms 300 --write-ms 120 [--serial] [--seed S]`` serves one
fresh :class:`~forethought.bench.mcp.service.Service` over stdio with the ``mcp`` SDK's low-level server. Each
call waits a seeded delay first (:class:`~forethought.bench.workloads.latency.LatencyModel`, keyed on the
call's tool and arguments only, so every arm waits the same for the same call); the read tools carry
``readOnlyHint``. With ``--serial`` it handles one call at a time, in arrival order (a single worker, as
many real servers are: a call that arrives while another runs waits for it). ``--read-ms 0`` makes a fast
server (the overhead bench's). The resource ``sim://state`` is the state's fingerprint, so a bench can check
that every arm ends in the same state.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from typing import Any

from forethought.bench.mcp.service import READS, TOOLS, Service, ServiceShape
from forethought.bench.workloads.latency import LatencyModel, call_key_text

STATE_URI = "sim://state"
NAME = "tickets"


def tool_entries() -> list[dict[str, Any]]:
    """The ``tools/list`` entries (read tools hinted read-only)."""
    out = []
    for spec in TOOLS:
        schema: dict[str, Any] = {"type": "object", "properties": spec["properties"]}
        if "required" in spec:
            schema["required"] = spec["required"]
        entry: dict[str, Any] = {"name": spec["name"], "description": spec["description"], "inputSchema": schema}
        if spec["name"] in READS:
            entry["annotations"] = {"readOnlyHint": True}
        out.append(entry)
    return out


def serve(shape: ServiceShape, reads: LatencyModel, writes: LatencyModel, serial: bool) -> None:
    """Serve a fresh service on stdin/stdout until the client disconnects."""
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    service = Service(shape)
    tools = [types.Tool.model_validate(t) for t in tool_entries()]
    one_at_a_time = asyncio.Lock()

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def run(name: str, arguments: dict[str, Any]) -> str:
        model = reads if name in READS else writes
        seconds = model.delay(name, call_key_text(arguments))
        if seconds > 0:
            await asyncio.sleep(seconds)
        return service.call(name, arguments)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = dict(params.arguments or {})
        if serial:
            async with one_at_a_time:
                text = await run(params.name, arguments)
        else:
            text = await run(params.name, arguments)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                    is_error=text.startswith("error:"))

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[types.Resource(uri=STATE_URI, name="state")])

    async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=STATE_URI, text=service.fingerprint(), mime_type="text/plain")])

    server: Server[Any] = Server(NAME, on_list_tools=list_tools, on_call_tool=call_tool,
                                 on_list_resources=list_resources, on_read_resource=read_resource)

    async def main() -> None:
        async with stdio_server() as (read, write):
            try:
                await server.run(read, write, server.create_initialization_options())
            finally:
                write.close()

    asyncio.run(main())


def server_command(python: str, read_ms: float, write_ms: float, serial: bool, shape: ServiceShape,
                   latency_seed: int = 0) -> list[str]:
    """The command line that serves the service (for a stdio client or the proxy)."""
    return [python, "-m", "forethought.bench.mcp.sim_server", "--read-ms", str(read_ms), "--write-ms", str(write_ms),
            "--seed", str(shape.seed), "--projects", str(shape.projects), "--tickets", str(shape.tickets),
            "--latency-seed", str(latency_seed), *(["--serial"] if serial else [])]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve the seeded ticket service as an MCP server (stdio).")
    parser.add_argument("--read-ms", type=float, default=300.0, help="Mean read latency (ms).")
    parser.add_argument("--write-ms", type=float, default=120.0, help="Mean write latency (ms).")
    parser.add_argument("--jitter", type=float, default=0.3, help="Relative standard deviation of latencies.")
    parser.add_argument("--serial", action="store_true", help="Handle one call at a time.")
    parser.add_argument("--seed", type=int, default=0, help="The service's data.")
    parser.add_argument("--latency-seed", type=int, default=0)
    parser.add_argument("--projects", type=int, default=ServiceShape().projects)
    parser.add_argument("--tickets", type=int, default=ServiceShape().tickets)
    args = parser.parse_args(argv)
    shape = ServiceShape(projects=args.projects, tickets=args.tickets, seed=args.seed)
    serve(shape, LatencyModel(mean_s=args.read_ms / 1000, jitter=args.jitter, seed=args.latency_seed),
          LatencyModel(mean_s=args.write_ms / 1000, jitter=args.jitter, seed=args.latency_seed), args.serial)


if __name__ == "__main__":
    main()
