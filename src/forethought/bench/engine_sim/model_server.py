"""A simulated OpenAI-compatible engine that replays workload trajectories with a timing model.

``POST /v1/chat/completions`` serves the trajectory named by ``metadata.trajectory_id`` in the request
body. Any model name but the speculator's is the main model (advertised as ``main``). The position comes
from the messages: turn = number of user messages - 1, step = number of assistant messages after the last
user message. For a tool step the main model streams ``reasoning_tokens`` tokens of deterministic filler
text, then the step's ground-truth calls as proper streamed ``tool_calls`` (parallel calls get indices
0..n-1; the first fragment carries id, type and name, the arguments follow in fragments of
``fragment_tokens`` tokens) with finish reason ``tool_calls``; after a turn's last step it streams the
turn's answer with finish reason ``stop``. Non-streaming requests get the same content as one object.

Timing (:class:`~.engine.TimingConfig` and :class:`~.engine.EngineModel`, per model): a request waits for one
of ``max_concurrency`` batch slots (0: unlimited; continuations first), its prompt is priced by a
per-conversation prefix cache (per model and ``metadata.conversation_id``, else trajectory id;
``cache_tokens`` capacity with LRU eviction, 0 = unbounded, at most 1024
conversations), the first token comes ``ttft_s + prefill_s_per_token * uncached prompt tokens`` after
admission, then each token takes ``(1 + batch_slowdown * (running - 1)) / decode_tokens_per_s``; every
delay is multiplied by ``time_scale`` (0 = no waiting). Chunks are paced against absolute target times on
the event loop clock, so delays do not drift; ``chunk_tokens`` > 1 packs consecutive deltas of one kind
into fewer chunks. Token counts are an approximation, documented as such: a text of n characters is
ceil(n / 4) tokens; the prompt is the compact JSON of the tools and each message, one per line. Filler
words have at most 3 letters: with its space, one token. ``metadata.continuation`` (set by the gateway
when it resumes a response after a served tool result) marks a server-side continuation: it is admitted
ahead of queued requests and its previous prompt and generated call are still hot in the prefix cache.

The speculator model (default name ``speculator``) is a *stand-in for a small speculator model*
(xLAM-class), not a model: it answers with only the current step's tool calls (no text), at its own
speed. Each call is the true one with probability ``alpha``, drawn from a generator seeded by the config's
seed, trajectory id, turn, step, call index and the sample index (``metadata.sample``, else the ``seed``
field, else 0); otherwise it is a plausible wrong call (:mod:`forethought.bench.engine_sim.wrong_calls`). Where the
turn's answer is due it returns no call (finish reason ``stop``).

Faults for tests, via ``metadata.fault``: ``malformed_arguments`` (call ``metadata.fault_call``, default
0, gets balanced but invalid JSON), ``truncated_arguments`` (its closing brace is never sent),
``drop_stream`` (the connection is closed mid-stream, no finish reason, no ``[DONE]``) and
``stream_ends_early`` (the body ends cleanly at the same point, no finish reason, no ``[DONE]``).
Stream faults apply to streaming requests; a non-streaming request with one gets HTTP 500.

Also: ``GET /v1/models``, ``GET /health``, ``GET /stats`` (requests, prompt, cached, computed,
recomputed and generated tokens, continuations, queue wait, overall and per model with slot occupancy;
rejected requests; the process's CPU seconds) and ``POST /reset`` (clears counters and caches).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from forethought.bench.engine_sim.cache import CHARS_PER_TOKEN, count_tokens
from forethought.bench.engine_sim.engine import EngineCounters, EngineModel, TimingConfig
from forethought.bench.engine_sim.wrong_calls import WrongCalls, named_arguments
from forethought.predictors.trajectory import Trajectory
from forethought.serve.http import EventStream, StreamChunks, StreamCut

__all__ = ["MAIN_MODEL", "SPECULATOR_MODEL", "ModelServer", "SpeculatorConfig", "TimingConfig", "count_tokens",
           "create_model_server"]

MAIN_MODEL = "main"
SPECULATOR_MODEL = "speculator"
FAULTS = frozenset({"malformed_arguments", "truncated_arguments", "drop_stream", "stream_ends_early"})
_STREAM_FAULTS = frozenset({"drop_stream", "stream_ends_early"})
_TRUE = frozenset({"true", "1"})
_FILLER = ("let", "me", "see", "how", "the", "api", "can", "do", "it", "now", "for", "you", "and", "get", "all",
           "we", "ask", "so", "i", "use", "one", "of", "the", "set", "to", "fit")


@dataclass(frozen=True, slots=True)
class SpeculatorConfig:
    """The speculator stand-in: its model name, acceptance probability ``alpha`` and its own timing."""

    model: str = SPECULATOR_MODEL
    alpha: float = 0.7
    seed: int = 0
    timing: TimingConfig = field(default_factory=lambda: TimingConfig(
        ttft_s=0.02, decode_tokens_per_s=400.0, reasoning_tokens=0))

    def __post_init__(self) -> None:
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {self.alpha}")


class _Rejected(Exception):
    """A request the simulated engine cannot answer; becomes a 4xx JSON error."""

    def __init__(self, status: int, message: str, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass(slots=True)
class _Piece:
    """One streamed delta and how many generated tokens it stands for."""

    delta: dict[str, Any]
    tokens: int


@dataclass(slots=True)
class _Plan:
    """Everything one response will contain, decided before the first byte is sent.

    ``prompt_tokens`` and ``cached_tokens`` are filled in when the request is admitted to a slot.
    """

    pieces: list[_Piece]
    finish_reason: str
    prompt: str
    conversation: str
    continuation: bool = False
    tail_chars: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    cut_at: int | None = None
    fault: str | None = None


def _function(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    inner = entry.get("function")
    return inner if isinstance(inner, Mapping) else entry


class _Conversation:
    """A replayed trajectory: tool schemas and the wrong-call generator, built once."""

    def __init__(self, trajectory: Trajectory) -> None:
        self.trajectory = trajectory
        self.schemas = {str(_function(t).get("name")): dict(_function(t).get("parameters") or {})
                        for t in trajectory.tools}
        self.wrong = WrongCalls(trajectory, self.schemas)


def _call_pieces(index: int, call_id: str, name: str, arguments: str, fragment_chars: int) -> list[_Piece]:
    first = {"tool_calls": [{"index": index, "id": call_id, "type": "function",
                             "function": {"name": name, "arguments": ""}}]}
    pieces = [_Piece(first, max(1, count_tokens(name)))]
    for start in range(0, len(arguments), fragment_chars):
        fragment = arguments[start:start + fragment_chars]
        pieces.append(_Piece({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]},
                             count_tokens(fragment)))
    return pieces


def _merge(pieces: Sequence[_Piece], chunk_tokens: int) -> list[_Piece]:
    """Pack consecutive pieces of one kind (text, or tool-call fragments) into pieces of ~``chunk_tokens``."""
    if chunk_tokens <= 1:
        return list(pieces)
    out: list[_Piece] = []
    for piece in pieces:
        last = out[-1] if out else None
        if last is None or last.tokens >= chunk_tokens or ("content" in last.delta) != ("content" in piece.delta):
            out.append(_Piece(json.loads(json.dumps(piece.delta)), piece.tokens))
            continue
        last.tokens += piece.tokens
        if "content" in piece.delta:
            last.delta["content"] += piece.delta["content"]
            continue
        for entry in piece.delta["tool_calls"]:
            calls = last.delta["tool_calls"]
            if calls[-1]["index"] == entry["index"] and "id" not in entry:
                calls[-1]["function"]["arguments"] += entry["function"]["arguments"]
            else:
                calls.append(json.loads(json.dumps(entry)))
    return out


def _line(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _tail_chars(lines: Sequence[str], messages: Sequence[Mapping[str, Any]]) -> int:
    """Characters of the trailing tool messages (what a continuation appends), newline included."""
    tail = 0
    for line, message in zip(reversed(lines), reversed(messages), strict=False):
        if message.get("role") != "tool":
            break
        tail += len(line) + 1
    return tail


class ModelServer:
    """State of the simulated engine (trajectories, engine models, counters) and its Starlette ``app``."""

    def __init__(self, trajectories: Iterable[Trajectory] = (), timing: TimingConfig | None = None,
                 speculator: SpeculatorConfig | None = None, model: str = MAIN_MODEL) -> None:
        self.model = model
        self.timing = timing or TimingConfig()
        self.speculator = speculator or SpeculatorConfig()
        if self.speculator.model == model:
            raise ValueError("the speculator needs a model name of its own")
        self._conversations: dict[str, _Conversation] = {}
        self.add_trajectories(trajectories)
        self._timings = {model: self.timing, self.speculator.model: self.speculator.timing}
        self.engines = {name: EngineModel(t) for name, t in self._timings.items()}
        self._errors = 0
        self._next_id = 0
        self._tools_lines: dict[str, tuple[Any, str]] = {}
        self.app = Starlette(routes=[
            Route("/v1/chat/completions", self._completions, methods=["POST"]),
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/health", self._health, methods=["GET"]),
            Route("/stats", self._stats, methods=["GET"]),
            Route("/reset", self._reset, methods=["POST"]),
        ])

    def add_trajectories(self, trajectories: Iterable[Trajectory]) -> None:
        """Make more trajectories available (an id seen before is replaced)."""
        for trajectory in trajectories:
            self._conversations[trajectory.id] = _Conversation(trajectory)

    def stats(self) -> dict[str, Any]:
        """Counters, overall and per model (per model also the slot meter and cache state)."""
        by_model = {name: engine.stats() for name, engine in self.engines.items()}
        total = {key: sum(s[key] for s in by_model.values()) for key in EngineCounters.__dataclass_fields__}
        return {**total, "errors": self._errors, "by_model": by_model, "process_cpu_s": time.process_time()}

    def reset(self) -> None:
        """Forget all prefix caches, zero the counters and restart the slot meters."""
        for engine in self.engines.values():
            engine.reset()
        self._errors = 0

    # --- planning ---------------------------------------------------------------------------------

    def _plan(self, body: Mapping[str, Any]) -> tuple[str, _Plan]:
        """Decide the full response for a request body; raises :class:`_Rejected` for bad requests."""
        model, conversation, metadata, turn_index, step_index = self._parse(body)
        trajectory_id = conversation.trajectory.id
        messages = body["messages"]
        lines = [self._tools_line(trajectory_id, body.get("tools") or []),
                 *(_line(m) for m in messages)]
        fault = metadata.get("fault")
        flag = metadata.get("continuation")
        continuation = flag is True or (isinstance(flag, str) and flag.lower() in _TRUE)
        plan = _Plan([], "stop", "\n".join(lines), str(metadata.get("conversation_id") or trajectory_id),
                     continuation, _tail_chars(lines, messages) if continuation else 0, fault=fault)
        turn = conversation.trajectory.turns[turn_index]
        is_speculator = model == self.speculator.model
        if step_index == len(turn.steps):
            if not is_speculator:
                plan.pieces = [_Piece({"content": turn.answer[i:i + CHARS_PER_TOKEN]}, 1)
                               for i in range(0, len(turn.answer), CHARS_PER_TOKEN)]
        else:
            if not is_speculator:
                offset = sum(map(ord, f"{trajectory_id}|{turn_index}|{step_index}"))
                plan.pieces = [_Piece({"content": " " + _FILLER[(offset + i) % len(_FILLER)]}, 1)
                               for i in range(self._timings[model].reasoning_tokens)]
            sample = metadata.get("sample", body.get("seed", 0))
            fragment_chars = self._timings[model].fragment_tokens * CHARS_PER_TOKEN
            index = 0
            for call_index, call in enumerate(turn.steps[step_index]):
                name, arguments = call.name, named_arguments(call, conversation.schemas)
                where = f"{trajectory_id}|{turn_index}|{step_index}|{call_index}"
                if is_speculator:
                    rng = random.Random(f"{self.speculator.seed}|{where}|{sample}")
                    if rng.random() >= self.speculator.alpha:
                        wrong = conversation.wrong.make(name, arguments, rng)
                        if wrong is None:
                            continue
                        name, arguments = wrong
                text = json.dumps(arguments, ensure_ascii=False)
                if index == int(metadata.get("fault_call", 0)) and fault == "malformed_arguments":
                    text = text[:-1] + ",}"
                elif index == int(metadata.get("fault_call", 0)) and fault == "truncated_arguments":
                    text = text[:-1]
                digest = hashlib.sha256(f"{model}|{where}|{sample if is_speculator else ''}".encode()).hexdigest()
                call_pieces = _call_pieces(index, f"call_{digest[:16]}", name, text, fragment_chars)
                if fault in _STREAM_FAULTS and index == 0:
                    plan.cut_at = len(plan.pieces) + min(2, len(call_pieces))
                plan.pieces += call_pieces
                index += 1
            plan.finish_reason = "tool_calls" if index else "stop"
        if fault in _STREAM_FAULTS and plan.cut_at is None:
            plan.cut_at = len(plan.pieces) // 2
        return model, plan

    def _tools_line(self, trajectory_id: str, tools: Any) -> str:
        """The prompt line of the tools, rendered once per trajectory while the tools stay the same."""
        cached = self._tools_lines.get(trajectory_id)
        if cached is not None and cached[0] == tools:
            return cached[1]
        line = _line(tools)
        self._tools_lines[trajectory_id] = (tools, line)
        return line

    def _parse(self, body: Mapping[str, Any]) -> tuple[str, _Conversation, Mapping[str, Any], int, int]:
        """Check a request and find its model, conversation, metadata, turn and step."""
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise _Rejected(400, "model is required")
        model = model if model == self.speculator.model else self.model
        if body.get("n", 1) not in (1, None):
            raise _Rejected(400, "n > 1 is not supported: send one request per sample with metadata.sample")
        metadata = body.get("metadata") or {}
        messages = body.get("messages")
        if not isinstance(metadata, Mapping) or not isinstance(messages, list) or not all(
                isinstance(m, Mapping) and "role" in m for m in messages):
            raise _Rejected(400, "messages must be a list of objects with a role; metadata an object")
        trajectory_id = metadata.get("trajectory_id")
        if not trajectory_id:
            raise _Rejected(400, "metadata.trajectory_id is required (send it in the request body)")
        conversation = self._conversations.get(str(trajectory_id))
        if conversation is None:
            raise _Rejected(404, f"unknown trajectory {trajectory_id!r}", "trajectory_not_found")
        fault = metadata.get("fault")
        if fault is not None and fault not in FAULTS:
            raise _Rejected(400, f"unknown fault {fault!r}; known: {sorted(FAULTS)}")
        if not str(metadata.get("fault_call", 0)).isdigit():
            raise _Rejected(400, "metadata.fault_call must be a non-negative integer")
        turn_index, step_index = self._position(messages)
        turns = conversation.trajectory.turns
        if turn_index < 0 or turn_index >= len(turns) or step_index > len(turns[turn_index].steps):
            raise _Rejected(400, f"position past the end of trajectory {trajectory_id!r}: turn {turn_index}, "
                                    f"step {step_index} (it has {len(turns)} turns)", "position_out_of_range")
        return str(model), conversation, metadata, turn_index, step_index

    @staticmethod
    def _position(messages: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        if not users:
            return -1, 0
        return len(users) - 1, sum(1 for m in messages[users[-1]:] if m.get("role") == "assistant")

    # --- HTTP -------------------------------------------------------------------------------------

    async def _completions(self, request: Request) -> Response:
        try:
            try:
                body = await request.json()
            except ValueError as exc:
                raise _Rejected(400, f"request body is not JSON: {exc}") from None
            except ClientDisconnect:
                return Response(status_code=499)  # the client went away before it sent its request
            if not isinstance(body, dict):
                raise _Rejected(400, "request body must be a JSON object")
            model, plan = self._plan(body)
        except _Rejected as exc:
            self._errors += 1
            return JSONResponse({"error": {"message": str(exc), "type": "invalid_request_error",
                                           "code": exc.code}}, status_code=exc.status)
        self._next_id += 1
        response_id = f"chatcmpl-sim-{self._next_id}"
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        chunks = self._generate(model, plan, response_id, include_usage)
        if body.get("stream"):
            return EventStream(chunks)
        return await self._collect(model, plan, response_id, chunks)

    async def _generate(self, model: str, plan: _Plan, response_id: str, include_usage: bool) -> StreamChunks:
        """The SSE byte chunks of one response, paced by the model's timing; a ``StreamCut`` ends it early."""
        engine = self.engines[model]
        admission = await engine.admit(plan.conversation, plan.prompt, continuation=plan.continuation,
                                       tail_chars=plan.tail_chars)
        plan.prompt_tokens = admission.prefill.prompt_tokens
        plan.cached_tokens = admission.prefill.cached_tokens
        generated = 0
        try:
            loop = asyncio.get_running_loop()
            scale = engine.timing.time_scale
            due = loop.time() + engine.first_token_s(admission.prefill)
            created = int(time.time())

            def chunk(delta: dict[str, Any] | None, finish: str | None = None,
                      usage: dict[str, Any] | None = None) -> bytes:
                choices = [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None,
                                                     "finish_reason": finish}]
                data: dict[str, Any] = {"id": response_id, "object": "chat.completion.chunk", "created": created,
                                        "model": model, "choices": choices}
                if usage is not None:
                    data["usage"] = usage
                return b"data: " + json.dumps(data, ensure_ascii=False).encode() + b"\n\n"

            pieces = plan.pieces if plan.cut_at is not None else _merge(plan.pieces, engine.timing.chunk_tokens)
            for number, piece in enumerate(pieces):
                if number == plan.cut_at:
                    yield StreamCut(plan.fault)
                    return
                if scale > 0:
                    for token in range(piece.tokens):
                        if generated or token:
                            due += engine.token_s()
                    delay = due - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                if number == 0:
                    yield chunk({"role": "assistant", "content": ""})
                generated += piece.tokens
                engine.counters.generated_tokens += piece.tokens
                yield chunk(piece.delta)
            if plan.cut_at is not None:
                yield StreamCut(plan.fault)
                return
            if not pieces:
                if scale > 0:
                    await asyncio.sleep(max(0.0, due - loop.time()))
                yield chunk({"role": "assistant", "content": ""})
            yield chunk({}, plan.finish_reason)
            if include_usage:
                yield chunk(None, usage=self._usage(plan, generated))
            yield b"data: [DONE]\n\n"
        finally:
            engine.release(admission, generated * CHARS_PER_TOKEN)

    @staticmethod
    def _usage(plan: _Plan, generated: int) -> dict[str, Any]:
        return {"prompt_tokens": plan.prompt_tokens, "completion_tokens": generated,
                "total_tokens": plan.prompt_tokens + generated,
                "prompt_tokens_details": {"cached_tokens": plan.cached_tokens}}

    async def _collect(self, model: str, plan: _Plan, response_id: str, chunks: StreamChunks) -> Response:
        """A non-streaming response: the same generation, folded into one ``chat.completion`` object."""
        async for _ in chunks:
            pass
        if plan.cut_at is not None:
            return JSONResponse({"error": {"message": f"simulated failure ({plan.fault})", "type": "server_error",
                                           "code": plan.fault}}, status_code=500)
        content = "".join(p.delta.get("content", "") for p in plan.pieces)
        calls: list[dict[str, Any]] = []
        for piece in plan.pieces:
            for delta in piece.delta.get("tool_calls", ()):
                if "id" in delta:
                    calls.append({"id": delta["id"], "type": "function",
                                  "function": {"name": delta["function"]["name"], "arguments": ""}})
                else:
                    calls[delta["index"]]["function"]["arguments"] += delta["function"]["arguments"]
        message: dict[str, Any] = {"role": "assistant", "content": content or None}
        if calls:
            message["tool_calls"] = calls
        generated = sum(p.tokens for p in plan.pieces)
        return JSONResponse({"id": response_id, "object": "chat.completion", "created": int(time.time()),
                             "model": model, "choices": [{"index": 0, "message": message, "logprobs": None,
                                                          "finish_reason": plan.finish_reason}],
                             "usage": self._usage(plan, generated)})

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "forethought"} for name in self._timings]})

    async def _health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "trajectories": len(self._conversations)})

    async def _stats(self, request: Request) -> Response:
        return JSONResponse(self.stats())

    async def _reset(self, request: Request) -> Response:
        self.reset()
        return JSONResponse({"reset": True})


def create_model_server(trajectories: Iterable[Trajectory] = (), timing: TimingConfig | None = None,
                        speculator: SpeculatorConfig | None = None, model: str = MAIN_MODEL) -> Starlette:
    """The Starlette app of a new :class:`ModelServer` (use ``ModelServer`` to reach its state)."""
    return ModelServer(trajectories, timing, speculator, model).app
