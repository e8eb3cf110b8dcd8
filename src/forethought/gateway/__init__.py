"""The engine-side tool-cache gateway (``forethought gateway``): an OpenAI-compatible streaming proxy that
serves speculated tool results posted by clients.

* :mod:`.app` — the Starlette app, its routes and configuration;
* :mod:`.cache` — per-response scopes, validated posts, all-or-nothing matching (keys from the core);
* :mod:`.state` — where scopes and entries live (:class:`~forethought.gateway.state.ScopeStore`);
* :mod:`.relay` and :mod:`.responses` — the Chat Completions and Responses relays, continuing server-side;
* :mod:`.replicas` — scopes in Redis, so several gateway processes share them.
"""
