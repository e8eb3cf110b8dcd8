"""A low-level MCP server for the proxy tests: a tool list in pages, and a tool that adds a tool.

``add_tool`` appends a tool to the list and sends ``notifications/tools/list_changed``; every tool named
``echo_*`` answers its own name and argument, and is annotated read-only.
"""

from __future__ import annotations

import asyncio
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server

PAGE = 2
names = ["echo_a", "echo_b", "echo_c"]


def _tool(name: str) -> types.Tool:
    return types.Tool(name=name, description=f"answers {name}",
                      input_schema={"type": "object", "properties": {"x": {"type": "string"}}},
                      annotations=types.ToolAnnotations(read_only_hint=True))


async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    start = int(params.cursor) if params is not None and params.cursor else 0
    page = [_tool(n) for n in names[start:start + PAGE]]
    more = start + PAGE < len(names)
    return types.ListToolsResult(tools=page, next_cursor=str(start + PAGE) if more else None)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    if params.name == "add_tool":
        names.append(f"echo_{len(names)}")
        await ctx.session.send_tool_list_changed()
        return types.CallToolResult(content=[types.TextContent(type="text", text=names[-1])])
    if params.name not in names:
        return types.CallToolResult(content=[types.TextContent(type="text", text="no such tool")], is_error=True)
    x = (params.arguments or {}).get("x", "")
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"{params.name}:{x}")])


server: Server[Any] = Server("paged", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        try:
            await server.run(read, write, server.create_initialization_options(NotificationOptions(tools_changed=True)))
        finally:
            write.close()


if __name__ == "__main__":
    asyncio.run(main())
