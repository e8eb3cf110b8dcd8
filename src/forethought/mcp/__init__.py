"""forethought in front of any MCP server: ``forethought mcp-proxy``.

The proxy relays every message between an MCP client and an upstream MCP server unchanged, except
``tools/call``: after each result it guesses the client's next calls with the pattern predictor and runs
the read-only ones early, so the next matching call is answered at once. Modules, one idea each:
``effects`` (which tools may run early), ``relay`` (the message pump), ``upstream`` (requests to the
upstream server), ``speculation`` (the runtime session and the predictor of one client session),
``stats`` (counters persisted beside the patterns), ``metrics`` (Prometheus), ``transports`` (stdio and
streamable HTTP, through the ``mcp`` SDK), ``config`` (client set-up snippets) and ``cli``.
"""
