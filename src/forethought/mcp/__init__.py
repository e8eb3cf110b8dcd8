"""forethought in front of any MCP server: ``forethought mcp-proxy``.

The proxy relays every message between an MCP client and an upstream MCP server unchanged, except
``tools/call``: after each result it guesses the client's next calls with the pattern predictor and runs
the read-only ones early, so the next matching call is answered at once. Modules, one idea each:
``effects`` (which tools may run early), ``relay`` (the message pump), ``upstream`` (requests to the
upstream server), ``speculation`` (the runtime session and the predictor of one client session), ``patterns`` (that
predictor in a worker process, on the pattern store),
``freshness`` (when a guess may still be served: the write clock and policy-named validators),
``writeclock`` (the write clock proxies share through their store), ``race`` (a client's call racing its
still-running guess), ``proxy`` (the assembly: upstream transports, store, one relay per client session),
``http`` (clients over streamable HTTP), ``stats`` (counters persisted beside the patterns), ``metrics``
(Prometheus), ``config`` (client set-up snippets), ``errors`` and ``cli``.
"""
