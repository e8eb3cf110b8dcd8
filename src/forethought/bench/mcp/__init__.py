"""The MCP bench, direct and through ``forethought mcp-proxy``: BFCL traces against BFCL's backends served
over MCP (``runner``), and generated agent tasks on a generated repository against the real filesystem and
git servers (``repo``, ``repo_bench``)."""
