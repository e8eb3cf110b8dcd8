"""forethought's tool-output cache inside vLLM's API server, as a ``vllm.endpoint_plugins`` entry.

Loaded by vLLM (``VLLM_PLUGINS=forethought``; ``make vllm-venv`` registers the entry point), in vLLM's
own API-server process. :class:`ToolCachePlugin` runs forethought's gateway (:mod:`forethought.serve.gateway`:
the same cache, protocol, tokens, limits and 4xx answers, imported, not copied) on vLLM's FastAPI app:

* ``POST /cache-tool-output/{response_id}`` — the cache route, at the root as the gateway has it, so the
  ``x-forethought-cache-path`` header resolves against vLLM's address;
* ``POST /forethought/v1/chat/completions`` — the relaying chat endpoint: a streamed response gets its
  response id and token headers, and when a message's calls close and every one has a posted result, the
  response continues with the results appended;
* ``GET /forethought/gateway/stats``, ``POST /forethought/gateway/reset`` — its counters.

What it does not do is keep the request's KV cache across the tool call: the continuation is a new request
to vLLM's OpenAI handler (over loopback, from inside the same process), which finds the conversation's
prefix in vLLM's prefix cache if it is still there. Doing it inside the engine needs an interface vLLM 0.32
does not have; docs/engine-vllm.md names it.

Configuration is the server's environment (this is vLLM's process): ``FORETHOUGHT_UPSTREAM`` (the OpenAI
base URL the relay sends to, default this server's own ``/v1``; the replay bench points it at its replay
proxy), ``FORETHOUGHT_POST_WAIT_S`` (the gateway's ``post_wait_s``).
"""

from __future__ import annotations

import os
from argparse import Namespace
from typing import Any

from starlette.routing import Mount, Route

from forethought.serve.gateway import CACHE_ROUTE, Gateway, GatewayConfig

PLUGIN_NAME = "forethought"
PREFIX = "/forethought"
UPSTREAM_ENV = "FORETHOUGHT_UPSTREAM"
POST_WAIT_ENV = "FORETHOUGHT_POST_WAIT_S"
UNSET_UPSTREAM = "http://127.0.0.1:0/v1"


class ToolCachePlugin:
    """The endpoint plugin: one :class:`~forethought.serve.gateway.Gateway` mounted on vLLM's app."""

    name = PLUGIN_NAME
    required_tasks: tuple[str, ...] | None = ("generate",)

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = dict(os.environ if environ is None else environ)
        self.explicit_upstream = env.get(UPSTREAM_ENV)
        config = GatewayConfig(post_wait_s=float(env.get(POST_WAIT_ENV, GatewayConfig().post_wait_s)),
                               mark_continuations=self.explicit_upstream is not None)
        self.gateway = Gateway(self.explicit_upstream or UNSET_UPSTREAM, config)

    def attach_router(self, app: Any) -> None:
        """Add the cache route at the root and the relaying gateway under ``/forethought``."""
        app.router.routes.append(Route(CACHE_ROUTE, self.gateway.app, methods=["POST"]))
        app.router.routes.append(Mount(PREFIX, app=self.gateway.app))

    async def init_state(self, engine_client: Any, state: Any, args: Namespace) -> None:
        """Point the relay at this server's own OpenAI API unless ``FORETHOUGHT_UPSTREAM`` says otherwise."""
        if self.explicit_upstream is None:
            host = getattr(args, "host", None) or "127.0.0.1"
            self.gateway.upstream = f"http://{host}:{getattr(args, 'port', 8000)}/v1"
        state.forethought_gateway = self.gateway


__all__ = ["PLUGIN_NAME", "ToolCachePlugin"]
