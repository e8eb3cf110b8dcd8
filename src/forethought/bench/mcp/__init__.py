"""The MCP bench: BFCL traces replayed by an MCP client, direct and through ``forethought mcp-proxy``."""
