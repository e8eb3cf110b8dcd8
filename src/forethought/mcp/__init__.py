"""forethought in front of any MCP server: ``forethought mcp-proxy``, a thin edge over the core.

The proxy relays every message between an MCP client and an upstream MCP server unchanged, except
``tools/call``: after each result it guesses the client's next calls with the pattern predictor and runs
the read-only ones early, so the next matching call is answered at once. Keys, the write clock and the
policy are the core's; the proxy translates MCP into core calls and back. Modules, one idea each:

- ``effects``: the proxy's policy value (the core's policy and the ``[mcp]`` settings);
- ``naming``: the upstream's name, learnt under every handshake (what the policy's tables match);
- ``tooling``: an upstream's tool list as core tools (JSON keys, the shared clock read or written);
- ``sharedclock``: the write clock proxies share through their store, as a core ``Version``;
- ``freshness``: a validator the policy names for a tool;
- ``upstream``: requests to the upstream server, tracked until they really end;
- ``race``: a client's call racing its still-running guess;
- ``speculation``: one client session's runtime session and calls;
- ``guessing``: what is guessed after each answer, and what the predictor learns;
- ``calibration``: whether a guess pays where it runs (the core's price less a guess's overhead and the delay
  a wrong one causes at a one-at-a-time server), carried across sessions in the store;
- ``concurrency``: whether a server handles one call at a time, learnt from the order of its answers;
- ``firstcalls``: how sessions begin, so that a session's first call can be guessed;
- ``transactions``: one ``BEGIN IMMEDIATE`` transaction on a store shared by proxy processes;
- ``patterns``: the pattern predictor in a worker process, on the pattern store;
- ``relay``: the message pump; ``proxy``: the assembly (transports, store, one relay per client session);
- ``warmup``: the upstream started first and the first lines relayed while the proxy loads; ``pipes``:
  JSON-RPC over the pipes the proxy takes over from it;
- ``http`` (clients over streamable HTTP), ``stats`` (counters persisted beside the patterns), ``metrics``
  (Prometheus), ``config`` (client set-up snippets), ``errors`` and ``cli``.
"""
