"""forethought's tool-output cache inside vLLM's API server, as a ``vllm.endpoint_plugins`` entry.

Loaded by vLLM (``VLLM_PLUGINS=forethought``; ``make vllm-venv`` registers the entry point), in vLLM's
own API-server process. :class:`ToolCachePlugin` runs forethought's gateway (:mod:`forethought.gateway.app`:
the same cache, protocol, tokens, limits and 4xx answers, imported, not copied) on vLLM's FastAPI app:

* ``POST /cache-tool-output/{response_id}`` — the cache route, at the root as the gateway has it, so the
  ``x-forethought-cache-path`` header resolves against vLLM's address;
* ``POST /forethought/v1/chat/completions`` — the relaying chat endpoint: a streamed response gets its
  response id and token headers, and when a message's calls close and every one has a posted result, the
  response continues with the results appended;
* ``POST /forethought/engine/v1/chat/completions`` — the plugin's own chat endpoint (:mod:`.chat`): the same
  cache, and a matching call continues the response inside vLLM's engine, on the same request (its KV cache
  kept); ``GET /forethought/engine/stats``, ``POST /forethought/engine/reset`` — its counters;
* ``GET /forethought/gateway/stats``, ``POST /forethought/gateway/reset`` — its counters;
* ``POST /forethought/engine/session`` (only with ``FORETHOUGHT_SESSION_PROBE=1``) — a multi-turn request on
  vLLM's engine client, as one streaming-input session (:mod:`.session`: the KV cache kept between turns) or as
  a fresh request per turn, token ids in and out: the measurement of docs/engine-vllm.md section 4.

The relay's continuation is a new request to vLLM's OpenAI handler (over loopback, from inside the same
process), which finds the conversation's prefix in vLLM's prefix cache if it is still there. vLLM 0.32's
OpenAI chat handler calls ``generate`` once per response, with no hook to append a turn; the engine chat
endpoint is the plugin's own handler around vLLM's pieces, which keeps the request alive across the call.

Configuration is the server's environment (this is vLLM's process): ``FORETHOUGHT_UPSTREAM`` (the OpenAI
base URL the relay sends to, default this server's own ``/v1``; the replay bench points it at its replay
proxy), ``FORETHOUGHT_POST_WAIT_S`` (the gateway's ``post_wait_s``), ``FORETHOUGHT_REPLAY_URL`` (the replay
proxy that pins the engine chat endpoint's segments; unset: the client's body is used as it is),
``FORETHOUGHT_ADMIN_TOKEN`` (the gateway's admin token, which ``.../gateway/reset`` requires; unset: no reset).
"""

from __future__ import annotations

import os
from argparse import Namespace
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from forethought.engines.vllm.chat import EngineChat, ReplayPinner
from forethought.engines.vllm.session import Chunk, run_fresh, run_session, scripted
from forethought.errors import WorkloadError
from forethought.gateway.app import CACHE_ROUTE, Gateway, GatewayConfig

PLUGIN_NAME = "forethought"
PREFIX = "/forethought"
UPSTREAM_ENV = "FORETHOUGHT_UPSTREAM"
POST_WAIT_ENV = "FORETHOUGHT_POST_WAIT_S"
ADMIN_TOKEN_ENV = "FORETHOUGHT_ADMIN_TOKEN"
"""The gateway's admin token (``POST .../gateway/reset`` needs it); unset: resetting is off."""
UNSET_UPSTREAM = "http://127.0.0.1:0/v1"
SESSION_PROBE_ENV = "FORETHOUGHT_SESSION_PROBE"
SESSION_ROUTE = PREFIX + "/engine/session"
ENGINE_PREFIX = PREFIX + "/engine"
ENGINE_CHAT_ROUTE = ENGINE_PREFIX + "/v1/chat/completions"
REPLAY_ENV = "FORETHOUGHT_REPLAY_URL"
MAX_SESSION_CHUNKS = 16
MAX_PAUSE_S = 60.0


class ToolCachePlugin:
    """The endpoint plugin: one :class:`~forethought.gateway.app.Gateway` mounted on vLLM's app."""

    name = PLUGIN_NAME
    required_tasks: tuple[str, ...] | None = ("generate",)

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = dict(os.environ if environ is None else environ)
        self.explicit_upstream = env.get(UPSTREAM_ENV)
        config = GatewayConfig(post_wait_s=float(env.get(POST_WAIT_ENV, GatewayConfig().post_wait_s)),
                               mark_continuations=self.explicit_upstream is not None,
                               admin_token=env.get(ADMIN_TOKEN_ENV) or None)
        self.gateway = Gateway(self.explicit_upstream or UNSET_UPSTREAM, config)
        self.session_probe = env.get(SESSION_PROBE_ENV) == "1"
        replay = env.get(REPLAY_ENV)
        self.chat = EngineChat(self.gateway, ReplayPinner(replay) if replay else None)
        self.engine: Any = None

    def attach_router(self, app: Any) -> None:
        """Add the cache route at the root, the engine's own chat endpoint and its counters, the session route
        (if enabled) and the gateway under ``/forethought``."""
        app.router.routes.append(Route(CACHE_ROUTE, self.gateway.app, methods=["POST"]))
        app.router.routes.append(Route(ENGINE_CHAT_ROUTE, self.chat.completions, methods=["POST"]))
        app.router.routes.append(Route(ENGINE_PREFIX + "/stats", self.chat.stats_route, methods=["GET"]))
        app.router.routes.append(Route(ENGINE_PREFIX + "/reset", self.chat.reset_route, methods=["POST"]))
        if self.session_probe:  # before the mounts, which take every path under their prefix
            app.router.routes.append(Route(SESSION_ROUTE, self.session, methods=["POST"]))
        # the gateway's other routes (/health, /gateway/stats, ...) under the engine endpoint's prefix too
        app.router.routes.append(Mount(ENGINE_PREFIX, app=self.gateway.app))
        app.router.routes.append(Mount(PREFIX, app=self.gateway.app))

    async def session(self, request: Request) -> JSONResponse:
        """``{"mode": "session"|"fresh", "chunks": [{"token_ids": [...], "max_tokens": n}, ...], "cache_salt": s,
        "pause_s": t}`` -> ``{"mode", "chunks": [{"token_ids", "finish_reason", "num_cached_tokens"}]}``."""
        try:
            mode, chunks, salt, pause = parse_session_body(await request.json())
        except (ValueError, WorkloadError) as exc:
            return JSONResponse({"error": {"message": str(exc), "type": "invalid_request_error",
                                           "code": "http_400"}}, status_code=400)
        if self.engine is None:
            return JSONResponse({"error": {"message": "the engine client is not ready", "type": "upstream_error",
                                           "code": "http_503"}}, status_code=503)
        if mode == "session":
            outputs = await run_session(self.engine, chunks[0], scripted(chunks), cache_salt=salt, pause_s=pause)
        else:
            outputs = await run_fresh(self.engine, chunks, cache_salt=salt)
        return JSONResponse({"mode": mode, "chunks": [
            {"token_ids": list(o.token_ids), "finish_reason": o.finish_reason,
             "num_cached_tokens": o.num_cached_tokens} for o in outputs]})

    async def init_state(self, engine_client: Any, state: Any, args: Namespace) -> None:
        """Point the relay at this server's own OpenAI API unless ``FORETHOUGHT_UPSTREAM`` says otherwise."""
        if self.explicit_upstream is None:
            host = getattr(args, "host", None) or "127.0.0.1"
            self.gateway.upstream = f"http://{host}:{getattr(args, 'port', 8000)}/v1"
        state.forethought_gateway = self.gateway
        self.engine = self.chat.engine = engine_client


def parse_session_body(body: Any) -> tuple[str, list[Chunk], str | None, float]:
    """The session route's mode, chunks, cache salt and pause before each later chunk (session mode;
    0 to ``MAX_PAUSE_S`` seconds); :class:`ValueError` for a body it refuses."""
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    mode = body.get("mode")
    if mode not in ("session", "fresh"):
        raise ValueError("mode must be 'session' or 'fresh'")
    raw = body.get("chunks")
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_SESSION_CHUNKS:
        raise ValueError(f"chunks must be a list of 1 to {MAX_SESSION_CHUNKS} objects")
    chunks = []
    for item in raw:
        ids, limit = (item.get("token_ids"), item.get("max_tokens")) if isinstance(item, dict) else (None, None)
        if not isinstance(ids, list) or not all(type(i) is int and i >= 0 for i in ids) or type(limit) is not int:
            raise ValueError("each chunk needs token_ids (non-negative integers) and an integer max_tokens")
        chunks.append(Chunk(tuple(ids), limit))
    salt = body.get("cache_salt")
    if salt is not None and (not isinstance(salt, str) or not salt):
        raise ValueError("cache_salt must be a non-empty string")
    pause = body.get("pause_s", 0)
    if type(pause) not in (int, float) or not 0 <= pause <= MAX_PAUSE_S:
        raise ValueError(f"pause_s must be a number from 0 to {MAX_PAUSE_S}")
    return mode, chunks, salt, float(pause)


__all__ = ["ENGINE_CHAT_ROUTE", "ENGINE_PREFIX", "PLUGIN_NAME", "REPLAY_ENV",
           "SESSION_PROBE_ENV", "SESSION_ROUTE", "ToolCachePlugin", "parse_session_body"]
