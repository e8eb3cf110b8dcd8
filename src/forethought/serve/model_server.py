"""A simulated OpenAI-compatible engine that replays workload trajectories with a timing model.

``POST /v1/chat/completions`` serves the trajectory named by ``metadata.trajectory_id`` in the request
body. Any model name but the speculator's is the main model (advertised as ``main``). The position comes
from the messages: turn = number of user messages - 1, step = number of assistant messages after the last
user message. For a tool step the main model streams ``reasoning_tokens`` tokens of deterministic filler
text, then the step's ground-truth calls as proper streamed ``tool_calls`` (parallel calls get indices
0..n-1; the first fragment carries id, type and name, the arguments follow in fragments of
``fragment_tokens`` tokens) with finish reason ``tool_calls``; after a turn's last step it streams the
turn's answer with finish reason ``stop``. Non-streaming requests get the same content as one object.

Timing (:class:`TimingConfig`, per model): the first token comes ``ttft_s + prefill_s_per_token *
uncached prompt tokens`` after the request (after a free batch slot when ``max_concurrency`` is set), then
``decode_tokens_per_s``; every delay is multiplied by ``time_scale`` (0 = no waiting). Chunks are paced
against absolute target times on the event loop clock, so delays do not drift. Token counts are an
approximation, documented as such: a text of n characters is ceil(n / 4) tokens; the prompt is the
compact JSON of the tools and each message, one per line; a per-conversation prefix cache (per model and
``metadata.conversation_id``, else trajectory id; the 1024 most recent conversations) counts the
characters the prompt shares with that conversation's previous prompt as cached. Filler words have at
most 3 letters: with its space, one token.

The speculator model (default name ``speculator``) is a *stand-in for a small speculator model*
(xLAM-class), not a model: it answers with only the current step's tool calls (no text), at its own
speed. Each call is the true one with probability ``alpha``, drawn from a generator seeded by the config's
seed, trajectory id, turn, step, call index and the sample index (``metadata.sample``, else the ``seed``
field, else 0); otherwise it is a plausible wrong call: another tool of the trajectory with arguments
built from its schema, or the same tool with one argument value changed. Where the turn's answer is due
it returns no call (finish reason ``stop``).

Faults for tests, via ``metadata.fault``: ``malformed_arguments`` (call ``metadata.fault_call``, default
0, gets balanced but invalid JSON), ``truncated_arguments`` (its closing brace is never sent),
``drop_stream`` (the connection is closed mid-stream, no finish reason, no ``[DONE]``) and
``stream_ends_early`` (the body ends cleanly at the same point, no finish reason, no ``[DONE]``).
Stream faults apply to streaming requests; a non-streaming request with one gets HTTP 500.

Also: ``GET /v1/models``, ``GET /health``, ``GET /stats`` (requests, prompt, cached and generated
tokens, overall and per model; rejected requests) and ``POST /reset`` (clears counters and caches).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import math
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from forethought.calls import ToolCall
from forethought.errors import WorkloadError
from forethought.serve.http import EventStream, StreamChunks, StreamCut
from forethought.workloads.trajectory import Trajectory

MAIN_MODEL = "main"
SPECULATOR_MODEL = "speculator"
CHARS_PER_TOKEN = 4
PREFIX_CACHE_CONVERSATIONS = 1024
FAULTS = frozenset({"malformed_arguments", "truncated_arguments", "drop_stream", "stream_ends_early"})
_STREAM_FAULTS = frozenset({"drop_stream", "stream_ends_early"})
_FILLER = ("let", "me", "see", "how", "the", "api", "can", "do", "it", "now", "for", "you", "and", "get", "all",
           "we", "ask", "so", "i", "use", "one", "of", "the", "set", "to", "fit")


@dataclass(frozen=True, slots=True)
class TimingConfig:
    """Timing of one simulated model; all delays are multiplied by ``time_scale``."""

    ttft_s: float = 0.05
    prefill_s_per_token: float = 0.0
    decode_tokens_per_s: float = 100.0
    reasoning_tokens: int = 32
    fragment_tokens: int = 3
    max_concurrency: int = 0
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        if min(self.ttft_s, self.prefill_s_per_token, self.time_scale) < 0 or self.decode_tokens_per_s <= 0:
            raise ValueError("timing values must be >= 0 and decode_tokens_per_s > 0")
        if self.reasoning_tokens < 0 or self.fragment_tokens < 1 or self.max_concurrency < 0:
            raise ValueError("reasoning_tokens, max_concurrency must be >= 0 and fragment_tokens >= 1")


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


def count_tokens(text: str) -> int:
    """The documented approximation: ceil(len(text) / 4)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


@dataclass(slots=True)
class _Piece:
    """One streamed delta and how many generated tokens it stands for."""

    delta: dict[str, Any]
    tokens: int


@dataclass(slots=True)
class _Plan:
    """Everything one response will contain, decided before the first byte is sent."""

    pieces: list[_Piece]
    finish_reason: str
    prompt_tokens: int
    cached_tokens: int
    cut_at: int | None = None
    fault: str | None = None


@dataclass(slots=True)
class _Counters:
    """What one model has done since the last reset."""

    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    generated_tokens: int = 0


def _function(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    inner = entry.get("function")
    return inner if isinstance(inner, Mapping) else entry


def _named_arguments(call: ToolCall, schemas: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    arguments = dict(call.arguments)
    if call.positional:
        order = list((schemas.get(call.name) or {}).get("properties") or {})
        if len(order) < len(call.positional):
            raise WorkloadError(f"trajectory call {call.describe()} has positional arguments that the "
                                f"schema of {call.name!r} cannot name")
        arguments = {**dict(zip(order, call.positional, strict=False)), **arguments}
    return arguments


def _common_prefix(a: str, b: str) -> int:
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _strings(value: Any, out: set[str]) -> None:
    if isinstance(value, str):
        out.add(value)
    for item in value.values() if isinstance(value, Mapping) else value if isinstance(value, list) else ():
        _strings(item, out)


class _WrongCalls:
    """Plausible wrong calls for one trajectory: other tools, or one argument value changed."""

    def __init__(self, trajectory: Trajectory, schemas: Mapping[str, Mapping[str, Any]]) -> None:
        self.schemas = schemas
        pool: set[str] = set()
        for call in trajectory.calls:
            _strings(_named_arguments(call, schemas), pool)
        self.pool = sorted(pool)

    def make(self, true_name: str, true_args: dict[str, Any], rng: random.Random) -> tuple[str, dict[str, Any]] | None:
        others = sorted(name for name in self.schemas if name != true_name)
        changeable = [key for key in sorted(true_args)
                      if _changeable(true_args[key], self._property(true_name, key))]
        if changeable and (not others or rng.random() < 0.5):
            key = rng.choice(changeable)
            value = self._changed(true_args[key], self._property(true_name, key), rng)
            return true_name, {**true_args, key: value}
        if others:
            name = rng.choice(others)
            schema = self.schemas[name]
            required = [k for k in (schema.get("properties") or {}) if k in set(schema.get("required") or ())]
            return name, {k: self._value(schema["properties"][k], rng) for k in required}
        return None

    def _property(self, tool: str, key: str) -> Mapping[str, Any]:
        prop = ((self.schemas.get(tool) or {}).get("properties") or {}).get(key)
        return prop if isinstance(prop, Mapping) else {}

    def _value(self, schema: Mapping[str, Any], rng: random.Random) -> Any:
        if schema.get("enum"):
            return rng.choice(list(schema["enum"]))
        kind = schema.get("type")
        if kind in ("integer", "int"):
            return rng.randint(0, 10)
        if kind in ("number", "float"):
            return rng.randint(0, 100) / 10
        if kind in ("boolean", "bool"):
            return rng.random() < 0.5
        if kind in ("array", "list", "tuple"):
            return []
        if kind in ("object", "dict"):
            return {}
        return rng.choice(self.pool) if self.pool else "example"

    def _changed(self, value: Any, schema: Mapping[str, Any], rng: random.Random) -> Any:
        """A different value of the same kind, or ``None`` when there is none to give."""
        enum_values = schema.get("enum")
        if enum_values:
            options = [v for v in enum_values if v != value]
            return rng.choice(options) if options else None
        if isinstance(value, bool):
            return not value
        if isinstance(value, int):
            return value + rng.randint(1, 5)
        if isinstance(value, float):
            return value + rng.randint(1, 5) / 2
        if isinstance(value, str):
            options = [s for s in self.pool if s != value]
            if options and rng.random() < 0.5:
                return rng.choice(options)
            return f"{value}_{rng.choice(('alt', 'old', 'tmp', 'copy'))}"
        if isinstance(value, list):
            return value[:-1] if value else [self._value(schema.get("items") or {}, rng)]
        if isinstance(value, dict):
            return {k: v for k, v in list(value.items())[:-1]} if value else {"extra": True}
        if value is None:
            return "none"
        return None


def _changeable(value: Any, schema: Mapping[str, Any]) -> bool:
    enum_values = schema.get("enum")
    if enum_values:
        return any(v != value for v in enum_values)
    return value is None or isinstance(value, bool | int | float | str | list | dict)


class _Conversation:
    """A replayed trajectory: tool schemas and the wrong-call generator, built once."""

    def __init__(self, trajectory: Trajectory) -> None:
        self.trajectory = trajectory
        self.schemas = {str(_function(t).get("name")): dict(_function(t).get("parameters") or {})
                        for t in trajectory.tools}
        self.wrong = _WrongCalls(trajectory, self.schemas)


def _call_pieces(index: int, call_id: str, name: str, arguments: str, fragment_chars: int) -> list[_Piece]:
    first = {"tool_calls": [{"index": index, "id": call_id, "type": "function",
                             "function": {"name": name, "arguments": ""}}]}
    pieces = [_Piece(first, max(1, count_tokens(name)))]
    for start in range(0, len(arguments), fragment_chars):
        fragment = arguments[start:start + fragment_chars]
        pieces.append(_Piece({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]},
                             count_tokens(fragment)))
    return pieces


class ModelServer:
    """State of the simulated engine (trajectories, prefix caches, counters) and its Starlette ``app``."""

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
        self._slots = {name: asyncio.Semaphore(t.max_concurrency) for name, t in self._timings.items()
                       if t.max_concurrency > 0}
        self._prefix: dict[tuple[str, str], str] = {}
        self._counters = {name: _Counters() for name in self._timings}
        self._errors = 0
        self._next_id = 0
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
        """Counters, overall and per model."""
        by_model = {name: dataclasses.asdict(c) for name, c in self._counters.items()}
        total = {key: sum(c[key] for c in by_model.values()) for key in dataclasses.asdict(_Counters())}
        return {**total, "errors": self._errors, "by_model": by_model}

    def reset(self) -> None:
        """Forget all prefix caches and zero the counters."""
        self._prefix.clear()
        self._counters = {name: _Counters() for name in self._timings}
        self._errors = 0

    # --- planning ---------------------------------------------------------------------------------

    def _plan(self, body: Mapping[str, Any]) -> tuple[str, _Plan]:
        """Decide the full response for a request body; raises :class:`_Rejected` for bad requests."""
        model, conversation, metadata, turn_index, step_index = self._parse(body)
        trajectory_id = conversation.trajectory.id
        prompt = "\n".join(json.dumps(x, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
                           for x in [body.get("tools") or [], *body["messages"]])
        cache_key = (model, str(metadata.get("conversation_id") or trajectory_id))
        cached_chars = _common_prefix(self._prefix.pop(cache_key, ""), prompt)
        self._prefix[cache_key] = prompt  # most recent last; the least recently used conversation goes first
        if len(self._prefix) > PREFIX_CACHE_CONVERSATIONS:
            del self._prefix[next(iter(self._prefix))]
        prompt_tokens = count_tokens(prompt)
        fault = metadata.get("fault")
        plan = _Plan([], "stop", prompt_tokens, min(prompt_tokens, cached_chars // CHARS_PER_TOKEN), fault=fault)
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
                name, arguments = call.name, _named_arguments(call, conversation.schemas)
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
            if not isinstance(body, dict):
                raise _Rejected(400, "request body must be a JSON object")
            model, plan = self._plan(body)
        except _Rejected as exc:
            self._errors += 1
            return JSONResponse({"error": {"message": str(exc), "type": "invalid_request_error",
                                           "code": exc.code}}, status_code=exc.status)
        counters = self._counters[model]
        counters.requests += 1
        counters.prompt_tokens += plan.prompt_tokens
        counters.cached_tokens += plan.cached_tokens
        self._next_id += 1
        response_id = f"chatcmpl-sim-{self._next_id}"
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        chunks = self._generate(model, plan, response_id, include_usage)
        if body.get("stream"):
            return EventStream(chunks)
        return await self._collect(model, plan, response_id, chunks)

    async def _generate(self, model: str, plan: _Plan, response_id: str, include_usage: bool) -> StreamChunks:
        """The SSE byte chunks of one response, paced by the model's timing; a ``StreamCut`` ends it early."""
        timing = self._timings[model]
        slot = self._slots.get(model)
        if slot is not None:
            await slot.acquire()
        try:
            loop = asyncio.get_running_loop()
            start = loop.time()
            scale = timing.time_scale
            first = (timing.ttft_s + timing.prefill_s_per_token * (plan.prompt_tokens - plan.cached_tokens)) * scale
            per_token = scale / timing.decode_tokens_per_s
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

            generated = 0
            for number, piece in enumerate(plan.pieces):
                if number == plan.cut_at:
                    yield StreamCut(plan.fault)
                    return
                generated += piece.tokens
                if scale > 0:
                    delay = start + first + (generated - 1) * per_token - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                if number == 0:
                    yield chunk({"role": "assistant", "content": ""})
                self._counters[model].generated_tokens += piece.tokens
                yield chunk(piece.delta)
            if plan.cut_at is not None:
                yield StreamCut(plan.fault)
                return
            if not plan.pieces:
                if scale > 0:
                    await asyncio.sleep(max(0.0, start + first - loop.time()))
                yield chunk({"role": "assistant", "content": ""})
            yield chunk({}, plan.finish_reason)
            if include_usage:
                yield chunk(None, usage=self._usage(plan, generated))
            yield b"data: [DONE]\n\n"
        finally:
            if slot is not None:
                slot.release()

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
