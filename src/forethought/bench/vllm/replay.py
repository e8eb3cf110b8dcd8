"""The replay proxy: an OpenAI-compatible front of vLLM that makes its random model replay trajectories.

``POST /v1/chat/completions`` (streaming) takes the agent's request as it is, finds the trajectory named by
``metadata.trajectory_id`` and the position from the messages (:func:`.pin.position`), rewrites the body
so vLLM must emit the recorded next step (:func:`.pin.pin_body`), and relays vLLM's stream chunk by chunk.
Two things change on the way: a pinned call's ``finish_reason`` ``stop`` (what vLLM, like OpenAI, answers
to a named tool choice) becomes ``tool_calls``, since the recorded model chose to call; and before the
finish chunk is passed on, the emitted call is compared with the recorded one (:func:`.pin.check_call`).
A difference is never passed on as a result: the stream ends with an ``error`` chunk naming both calls (the
agent's client raises), and ``GET /replay/stats`` counts it under ``mismatches`` with the message.

With ``forced_eos_id`` (the model's end-of-message token) calls are pinned by forced tokens (:mod:`.forced`,
:func:`.pin.pin_forced_body`) in place of a grammar: the canonical tokens of the call as the chat template
renders it, read back by vLLM's hermes parser. ``POST /replay/pin`` and ``POST /replay/check`` offer the
same pinning and check to the plugin's own chat endpoint (:mod:`.chat`), which talks to vLLM's engine
directly and so cannot be pinned by a proxy in front of it; the counters are shared.

Everything else of the engine is real: tokenization and the chat template, prefill, batching, the prefix
cache, decoding under the grammar. ``GET /health``, ``GET /v1/models`` and ``GET /metrics`` are passed to
vLLM. One proxy serves every arm of a benchmark, so the hop it adds is paid alike.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from forethought.bench.vllm.forced import call_text
from forethought.bench.vllm.pin import (
    PinnedStep,
    check_call,
    next_step,
    pin_body,
    pin_forced_body,
    single_call_steps,
)
from forethought.errors import ForethoughtError, WorkloadError
from forethought.llm.sse import aiter_json
from forethought.predictors.trajectory import Trajectory
from forethought.serve.http import EventStream, StreamChunks

UPSTREAM_TIMEOUT_S = 600.0


@dataclass(slots=True)
class ReplayStats:
    """What the proxy did: requests pinned to calls and answers, calls verified, and every mismatch."""

    requests: int = 0
    call_steps: int = 0
    answer_steps: int = 0
    verified: int = 0
    rejected: int = 0
    mismatches: list[str] = field(default_factory=list)


def _sse(payload: Mapping[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"


class ReplayProxy:
    """State of one proxy (the trajectories, vLLM's address, counters) and its Starlette ``app``."""

    def __init__(self, upstream_url: str, trajectories: Sequence[Trajectory], whitespace_ids: Sequence[int],
                 model: str = "tiny", forced_eos_id: int | None = None) -> None:
        self.upstream = upstream_url.rstrip("/")
        self.forced_eos_id = forced_eos_id
        self._forced: dict[str, tuple[int, ...]] = {}
        self.trajectories = {t.id: single_call_steps(t) for t in trajectories}
        self.whitespace_ids = tuple(whitespace_ids)
        self.model = model
        self.stats = ReplayStats()
        self._answer_tokens: dict[str, int] = {}
        self._http = httpx2.AsyncClient(timeout=httpx2.Timeout(UPSTREAM_TIMEOUT_S, connect=10.0),
                                        limits=httpx2.Limits(max_connections=None, max_keepalive_connections=256))
        self.app = Starlette(routes=[
            Route("/v1/chat/completions", self._completions, methods=["POST"]),
            Route("/v1/models", self._get, methods=["GET"]),
            Route("/health", self._get, methods=["GET"]),
            Route("/metrics", self._get, methods=["GET"]),
            Route("/replay/stats", self._stats, methods=["GET"]),
            Route("/replay/pin", self._pin_route, methods=["POST"]),
            Route("/replay/check", self._check_route, methods=["POST"]),
            Route("/replay/reset", self._reset, methods=["POST"]),
        ])

    async def aclose(self) -> None:
        await self._http.aclose()

    async def answer_tokens(self, text: str) -> int:
        """The length of ``text`` in the engine's own tokens (vLLM's ``/tokenize``), at least 1."""
        cached = self._answer_tokens.get(text)
        if cached is None:
            response = await self._http.post(self.upstream + "/tokenize", json={
                "model": self.model, "prompt": text, "add_special_tokens": False})
            response.raise_for_status()
            cached = self._answer_tokens[text] = max(1, int(response.json()["count"]))
        return cached

    async def forced_tokens(self, step: PinnedStep) -> tuple[int, ...]:
        """The canonical tokens of ``step``'s call as the chat template renders it, and the end of the message."""
        assert step.name is not None and self.forced_eos_id is not None
        text = call_text(step.name, step.arguments or {})
        cached = self._forced.get(text)
        if cached is None:
            response = await self._http.post(self.upstream + "/tokenize", json={
                "model": self.model, "prompt": text, "add_special_tokens": False})
            response.raise_for_status()
            cached = self._forced[text] = (*(int(t) for t in response.json()["tokens"]), self.forced_eos_id)
        return cached

    async def pin(self, body: Mapping[str, Any]) -> tuple[Trajectory, PinnedStep, dict[str, Any]]:
        """The trajectory, the step due and the request that makes vLLM emit it (forced tokens when this proxy
        was made with ``forced_eos_id``, else a grammar); counts the request."""
        trajectory, step = self._step(body)
        answer = await self.answer_tokens(step.answer) if step.name is None else None
        if self.forced_eos_id is not None and step.name is not None:
            pinned = pin_forced_body(body, step, self.model, self.whitespace_ids, await self.forced_tokens(step))
        else:
            pinned = pin_body(body, step, self.model, self.whitespace_ids, answer)
        self.stats.requests += 1
        if step.name is None:
            self.stats.answer_steps += 1
        else:
            self.stats.call_steps += 1
        return trajectory, step, pinned

    def check(self, trajectory: Trajectory, step: PinnedStep, calls: Sequence[tuple[str, str]]) -> str | None:
        """``None`` (and one more verified call) when ``calls`` is the recorded step, else the mismatch (counted)."""
        try:
            check_call(step, calls, f"{trajectory.id} turn {step.position.turn} step {step.position.step}")
        except WorkloadError as exc:
            self.stats.mismatches.append(str(exc))
            return str(exc)
        self.stats.verified += step.name is not None
        return None

    async def _pin_route(self, request: Request) -> Response:
        """``POST /replay/pin`` with the agent's request body -> ``{"body": the request to send vLLM}``."""
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise WorkloadError("the body must be a JSON object")
            _, _, pinned = await self.pin(body)
        except (ValueError, ForethoughtError) as exc:
            self.stats.rejected += 1
            return JSONResponse({"error": {"message": str(exc), "type": "invalid_request_error"}}, status_code=400)
        return JSONResponse({"body": pinned})

    async def _check_route(self, request: Request) -> Response:
        """``POST /replay/check`` with ``{"body": the agent's request, "calls": [[name, arguments], ...]}``."""
        try:
            payload = await request.json()
            body, raw_calls = payload["body"], payload["calls"]
            calls = [(str(name), str(text)) for name, text in raw_calls]
            trajectory, step = self._step(body)
        except (ValueError, KeyError, TypeError, ForethoughtError) as exc:
            return JSONResponse({"error": {"message": str(exc), "type": "invalid_request_error"}}, status_code=400)
        wrong = self.check(trajectory, step, calls)
        return JSONResponse({"ok": wrong is None, "message": wrong})

    def _step(self, body: Mapping[str, Any]) -> tuple[Trajectory, PinnedStep]:
        metadata = body.get("metadata") or {}
        trajectory = self.trajectories.get(str(metadata.get("trajectory_id") if isinstance(metadata, Mapping)
                                               else None))
        if trajectory is None:
            raise WorkloadError("metadata.trajectory_id must name a trajectory this proxy replays")
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, Mapping) for m in messages):
            raise WorkloadError("messages must be a list of objects")
        return trajectory, next_step(trajectory, messages)

    async def _completions(self, request: Request) -> Response:
        try:
            body = await request.json()
            if not isinstance(body, dict) or not body.get("stream"):
                raise WorkloadError("the replay proxy serves streaming chat completions only")
            trajectory, step, pinned = await self.pin(body)
        except (ValueError, ForethoughtError) as exc:
            self.stats.rejected += 1
            return JSONResponse({"error": {"message": str(exc), "type": "invalid_request_error"}}, status_code=400)
        except httpx2.HTTPError as exc:
            return JSONResponse({"error": {"message": f"vLLM unreachable: {exc!r}", "type": "upstream_error"}},
                                status_code=502)
        upstream = self._http.build_request("POST", self.upstream + "/v1/chat/completions", json=pinned)
        try:
            response = await self._http.send(upstream, stream=True)
        except httpx2.HTTPError as exc:
            return JSONResponse({"error": {"message": f"vLLM unreachable: {exc!r}", "type": "upstream_error"}},
                                status_code=502)
        if response.status_code != 200:
            content = await response.aread()
            await response.aclose()
            return Response(content, status_code=response.status_code, media_type="application/json")
        return EventStream(self._relay(response, trajectory, step))

    async def _relay(self, response: httpx2.Response, trajectory: Trajectory, step: PinnedStep) -> StreamChunks:
        names: dict[int, str] = {}
        texts: dict[int, list[str]] = {}
        try:
            async for chunk, _ in aiter_json(response):
                for choice in chunk.get("choices") or ():
                    for call in (choice.get("delta") or {}).get("tool_calls") or ():
                        index = int(call.get("index", 0))
                        function = call.get("function") or {}
                        if function.get("name"):
                            names[index] = function["name"]
                        texts.setdefault(index, []).append(function.get("arguments") or "")
                    if choice.get("finish_reason") is not None:
                        calls = [(names.get(i, ""), "".join(texts[i])) for i in sorted(texts)]
                        wrong = self.check(trajectory, step, calls)
                        if wrong is not None:
                            yield _sse({"error": {"message": f"replay mismatch: {wrong}", "type": "replay_mismatch"}})
                            return
                        if step.name is not None and choice["finish_reason"] == "stop":
                            choice["finish_reason"] = "tool_calls"
                yield _sse(chunk)
            yield b"data: [DONE]\n\n"
        finally:
            await response.aclose()

    async def _get(self, request: Request) -> Response:
        path = request.url.path
        try:
            response = await self._http.get(self.upstream + path)
        except httpx2.HTTPError as exc:
            return JSONResponse({"error": {"message": f"vLLM unreachable: {exc!r}"}}, status_code=502)
        return Response(response.content, status_code=response.status_code,
                        media_type=response.headers.get("content-type", "application/json"))

    async def _stats(self, request: Request) -> Response:
        return JSONResponse(asdict(self.stats))

    async def _reset(self, request: Request) -> Response:
        self.stats = ReplayStats()
        return JSONResponse({"reset": True})


def create_replay_proxy(upstream_url: str, trajectories: Sequence[Trajectory], whitespace_ids: Sequence[int],
                        model: str = "tiny", forced_eos_id: int | None = None) -> Starlette:
    """The app of a new :class:`ReplayProxy` (a picklable factory for a child process)."""
    return ReplayProxy(upstream_url, trajectories, whitespace_ids, model, forced_eos_id).app


__all__ = ["ReplayProxy", "ReplayStats", "create_replay_proxy"]
