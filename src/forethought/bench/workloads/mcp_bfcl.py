"""BFCL's executable backends as an MCP server, for the ``--workload mcp`` bench.

``python -m forethought.bench.workloads.mcp_bfcl ENTRY_ID --latency S --read-only a,b`` serves one BFCL
multi-turn entry's backends (fresh state from its ``initial_config``) over stdio with the ``mcp`` SDK's
low-level server: one MCP tool per offered function (its BFCL schema), each call sleeping a seeded delay
(:class:`~forethought.bench.workloads.latency.LatencyModel`) before running. Tools named in ``--read-only`` carry
``readOnlyHint: true``; :func:`measured_read_only` picks them by running the ground truth and keeping the
functions that never changed the backend state (random generators included). ``--every-tool`` offers one
fixed tool set (every BFCL function, every backend class), as a real server would, instead of the entry's
own tools, so that learning keyed on the tool set carries from one trajectory to the next. The resource
``bfcl://state`` returns the state fingerprint, so a bench can check that every arm ends in the same state.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from forethought._core.calls import ToolCall
from forethought.bench.workloads.bfcl import (
    BACKENDS,
    BfclEntry,
    BfclState,
    function_docs,
    new_backend,
    render_bfcl_output,
    state_fingerprint,
)
from forethought.bench.workloads.latency import LatencyModel, call_key_text

STATE_URI = "bfcl://state"


def fresh_state(entry: BfclEntry, every_class: bool = False) -> BfclState:
    """The entry's backends from its initial state (``every_class``: the other classes too, from defaults)."""
    from forethought.sandbox.objects import ObjectState

    classes = BACKENDS if every_class else entry.involved_classes
    return BfclState({c: ObjectState(new_backend(c, entry.initial_config.get(c, {}), entry.long_context))
                      for c in classes})


def every_tool(entries: Iterable[BfclEntry]) -> tuple[Mapping[str, Any], ...]:
    """One fixed tool set, as one real MCP server would offer: every function any entry offers."""
    found: dict[str, Mapping[str, Any]] = {}
    for entry in entries:
        for schema in entry.tools:
            found.setdefault(schema["function"]["name"], schema)
    return tuple(found[name] for name in sorted(found))


def run_call(state: BfclState, call: ToolCall) -> str:
    """Run one call against the live backends; its output as BFCL renders it (exceptions as ``Error: ...``)."""
    class_name = function_docs()[call.name][0]
    try:
        return render_bfcl_output(getattr(state.instance(class_name), call.name)(**dict(call.arguments)))
    except Exception as exc:  # BFCL backends report misuse by raising
        return f"Error during execution: {exc}"


def measured_read_only(entries: Iterable[BfclEntry]) -> frozenset[str]:
    """Functions that were called in the ground truth of ``entries`` and never changed backend state."""
    called: set[str] = set()
    writers: set[str] = set()
    for entry in entries:
        state = fresh_state(entry)
        before = state_fingerprint(state)
        for calls in entry.ground_truth:
            for call in calls:
                run_call(state, call)
                after = state_fingerprint(state)
                called.add(call.name)
                if after != before:
                    writers.add(call.name)
                before = after
    return frozenset(called - writers)


def tool_entries(schemas: Iterable[Mapping[str, Any]], read_only: frozenset[str]) -> list[dict[str, Any]]:
    """MCP ``tools/list`` entries for BFCL schemas (OpenAI ``tools`` entries), read-only ones hinted."""
    tools = []
    for schema in schemas:
        function = schema["function"]
        tool: dict[str, Any] = {"name": function["name"], "description": function.get("description", ""),
                                "inputSchema": function["parameters"]}
        if function["name"] in read_only:
            tool["annotations"] = {"readOnlyHint": True}
        tools.append(tool)
    return tools


def serve(entry: BfclEntry, latency: LatencyModel, read_only: frozenset[str],
          schemas: Sequence[Mapping[str, Any]] | None = None) -> None:
    """Serve ``entry`` on stdin/stdout until the client disconnects (``schemas``: a fixed tool set, backed
    by every class, instead of the entry's own tools)."""
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    state = fresh_state(entry, every_class=schemas is not None)
    tools = [types.Tool.model_validate(t) for t in tool_entries(schemas or entry.tools, read_only)]
    names = {t.name for t in tools}
    occurrences: dict[str, int] = {}

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = dict(params.arguments or {})
        if params.name not in names:
            return types.CallToolResult(content=[types.TextContent(type="text", text=f"unknown tool {params.name}")],
                                        is_error=True)
        key = call_key_text(arguments)
        n = occurrences[params.name + key] = occurrences.get(params.name + key, -1) + 1
        seconds = latency.delay(params.name, key, n)
        if seconds > 0:
            await asyncio.sleep(seconds)
        text = run_call(state, ToolCall(params.name, arguments))
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                    is_error=text.startswith("Error during execution"))

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[types.Resource(uri=STATE_URI, name="state")])

    async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=STATE_URI, text=state_fingerprint(state), mime_type="application/json")])

    server: Server[Any] = Server("bfcl", on_list_tools=list_tools, on_call_tool=call_tool,
                                 on_list_resources=list_resources, on_read_resource=read_resource)

    async def main() -> None:
        async with stdio_server() as (read, write):
            try:
                await server.run(read, write, server.create_initialization_options())
            finally:
                write.close()

    asyncio.run(main())


def server_command(python: str, entry: BfclEntry, latency_s: float, seed: int,
                   read_only: Sequence[str], every: bool = True) -> list[str]:
    """The command line that serves ``entry`` (for a stdio client or the proxy)."""
    return [python, "-m", "forethought.bench.workloads.mcp_bfcl", entry.id, "--latency", str(latency_s),
            "--seed", str(seed), "--read-only", ",".join(sorted(read_only)), *(["--every-tool"] if every else [])]


def _entry(entry_id: str) -> BfclEntry:
    from forethought.bench.workloads.bfcl import load_bfcl

    for entry in load_bfcl():
        if entry.id == entry_id:
            return entry
    raise SystemExit(f"no BFCL entry {entry_id!r}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve one BFCL entry's backends as an MCP server (stdio).")
    parser.add_argument("entry")
    parser.add_argument("--latency", type=float, default=0.0, help="Mean tool latency (s).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--read-only", default="", help="Comma-separated tools annotated readOnlyHint.")
    parser.add_argument("--every-tool", action="store_true",
                        help="Offer every BFCL function (one fixed tool set), not only the entry's.")
    args = parser.parse_args(argv)
    read_only = frozenset(n for n in args.read_only.split(",") if n)
    from forethought.bench.workloads.bfcl import load_bfcl

    schemas = every_tool(load_bfcl()) if args.every_tool else None
    serve(_entry(args.entry), LatencyModel(mean_s=args.latency, seed=args.seed), read_only, schemas)


if __name__ == "__main__":
    main()
