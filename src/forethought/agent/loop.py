"""The agent loop: one code path for serial and speculative execution, a flag apart.

Each step streams one model response. In speculative mode the registered predictors run concurrently
with the main model and their guesses become speculations; while the response streams, every tool call
whose arguments close is dispatched at once when that is safe:

* PURE / READ_ONLY calls run authoritatively right away, as long as every earlier call of the message has
  been issued (so calls still take effect in the model's order);
* any other speculable call (ISOLATED_WRITE with a snapshot state, or a read behind a not-yet-issued
  write) is speculated, and the authoritative call at message end claims it;
* everything else waits for the message to end.

Tool results go back to the model in the model's order. Serial mode turns predictors and early dispatch
off and changes nothing else, so both modes produce the same transcript.

Engine-side mode (``engine_side=True``, behind forethought's gateway, docs/gateway.md): every speculation
that finishes is also posted to the gateway's tool cache for the current response, when its result is
certain to be what the authoritative call will get: PURE and READ_ONLY results (no validator), and
ISOLATED_WRITE results marked ``exclusive`` (the gateway serves them only to a message with that single
call, so nothing else of the message can write before the commit). When the gateway serves a message's
calls and continues the response, the agent records the assistant message and the served outputs as a
serial run would, claims each call through the session (so snapshots commit), checks that the claim gives
the served output (a difference raises :class:`~forethought.errors.ForethoughtError`), and reads the
continuation as its next step.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import inspect
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from forethought._core.calls import ToolCall
from forethought._core.entry import SpeculationTicket
from forethought._core.policy import Policy
from forethought._core.runtime import Runtime, Session, SettledSpeculation
from forethought._core.tools import Tool
from forethought.agent.engine_side import POST_MARGIN_S, aclose_stream, postable, until_served
from forethought.agent.feed import GuessFeed
from forethought.agent.pacing import ReturnPacer
from forethought.agent.results import AgentResult, EngineSideStats, StepTiming, ToolRecord
from forethought.agent.stream import AgentStream
from forethought.errors import ForethoughtError, LLMError, UpstreamError
from forethought.llm.chat import LLMClient
from forethought.llm.dispatch import STREAM_SOURCE, EarlyDispatch, PendingCall, render_error, render_output
from forethought.llm.events import (
    ClientItem,
    LLMEvent,
    MessageDone,
    ResponseStarted,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallClosed,
    ToolCallStarted,
    ToolResultServed,
)
from forethought.llm.sdk import as_llm_client
from forethought.llm.tool_cache import CacheTarget, HttpToolCachePoster, ToolCachePoster
from forethought.predictors.base import (
    ObservedCall,
    PredictionContext,
    Predictor,
    reports_failure,
)

DEFAULT_MAX_STEPS = 32
_log = logging.getLogger(__name__)


def unknown_policy_tools(policy: Policy, tools: Iterable[str]) -> dict[str, str | None]:
    """Tool names the policy configures that none of ``tools`` has, each with the closest known name (or None).

    A misspelt name in a policy file configures nothing; the CLI and the Agent report these.
    """
    known = sorted(set(tools))
    return {name: next(iter(difflib.get_close_matches(name, known, n=1)), None)
            for name in sorted(policy.tools) if name not in known}


def describe_unknown(unknown: Mapping[str, str | None]) -> str:
    """One line naming the unknown policy tools (with suggestions)."""
    parts = [f"{name!r}" + (f" (did you mean {hint!r}?)" if hint else "") for name, hint in unknown.items()]
    return "the policy configures tools that are not registered: " + ", ".join(parts)


TextCallback = Callable[[str], object]
"""Called with each piece of the model's text as it streams (may return an awaitable, which is awaited)."""


class Agent:
    """A tool-calling agent over a forethought :class:`Session`.

    ``client`` is an :class:`~forethought.llm.chat.LLMClient` (``OpenAIChatClient``,
    ``OpenAIResponsesClient``, ``AnthropicMessagesClient``, a fake), or an SDK client you already have: an
    ``openai.AsyncOpenAI`` (Chat Completions, or the Responses API with ``api="responses"``) or an
    ``anthropic.AsyncAnthropic``. The model's text streams to ``on_text`` (a callback) or through
    :meth:`stream` (an async iterator).
    """

    def __init__(self, client: LLMClient | Any, model: str, tools: Sequence[Tool], runtime: Runtime, *,
                 speculate: bool = True, predictors: Sequence[Predictor] = (), early_dispatch: bool | None = None,
                 request_extra: Mapping[str, Any] | None = None, max_steps: int = DEFAULT_MAX_STEPS,
                 session_id: str | None = None, engine_side: bool = False,
                 cache_poster: ToolCachePoster | None = None,
                 api: Literal["chat", "responses"] = "chat",
                 on_tool_event: Callable[[ToolCallStarted | ToolCallArgumentsDelta], object] | None = None,
                 chain_depth: int = 1, pacer: ReturnPacer | None = None) -> None:
        self.client: LLMClient = as_llm_client(client, api)
        self.model = model
        self.runtime = runtime
        self.speculate = speculate
        self.predictors = list(predictors) if speculate else []
        self.early_dispatch = speculate if early_dispatch is None else (early_dispatch and speculate)
        self.request_extra = dict(request_extra or {})
        self.max_steps = max_steps
        self.session: Session = runtime.session(session_id, tools=tools)
        self.openai_tools = [t.openai_schema() for t in tools]
        self.parameter_schemas = {t.name: dict(t.parameters) for t in tools}
        self.history: list[ObservedCall] = []
        self.engine_side = engine_side
        self.engine_stats = EngineSideStats()
        self._poster: ToolCachePoster | None = cache_poster or (HttpToolCachePoster() if engine_side else None)
        self._own_poster = cache_poster is None
        self._target: CacheTarget | None = None
        self._target_ready = asyncio.Event()
        self._carry: AsyncIterator[LLMEvent] | None = None
        self._step_number = 0
        self._watched: set[str] = set()
        self._watchers: set[asyncio.Task[None]] = set()
        self.on_tool_event = on_tool_event
        """Sees each tool call's start and argument deltas as they stream (e.g. ``PythonTool.on_tool_event``:
        code speculation of a ``python`` tool's code)."""
        self.pacer = pacer
        """Shared by agents on one model server: admits returning requests by the server's load."""
        self.feed = GuessFeed(self.session, self.predictors, chain_depth=chain_depth,
                              on_ticket=self._on_ticket if engine_side else None)
        """Runs the predictors each step (priced by when the call is due, thinned under load, chained)."""

    # --- public -----------------------------------------------------------------------------------

    async def run(self, messages: Sequence[Mapping[str, Any]], on_text: TextCallback | None = None) -> AgentResult:
        """Run the model until it answers without tool calls; ``messages`` ends with the user's turn.

        ``on_text`` is called with each piece of text as the model streams it (every step's text, in order).
        """
        transcript = [dict(m) for m in messages]
        start_len = len(transcript)
        records: list[ToolRecord] = []
        steps: list[StepTiming] = []
        tokens = 0
        for _ in range(self.max_steps):
            try:
                step, done, text, used = await self._step(transcript, records, on_text)
            except BaseException:
                await self._drop_carry()  # a continued response is not read on after a failed step
                raise
            steps.append(step)
            tokens += used
            if done:
                return AgentResult(transcript[start_len:], records, steps, text, tokens)
        await self._drop_carry()
        raise ForethoughtError(f"the model did not finish within {self.max_steps} steps")

    def stream(self, messages: Sequence[Mapping[str, Any]]) -> AgentStream:
        """Run like :meth:`run`, yielding the model's text as it streams; the result is ``.result`` after."""
        return AgentStream(self, messages)

    async def close(self) -> None:
        await self._drop_carry()
        await self._stop_watchers()
        await self.session.close()
        if self._poster is not None and self._own_poster:
            await self._poster.aclose()

    # --- one step ---------------------------------------------------------------------------------

    def _context(self, transcript: list[dict[str, Any]]) -> PredictionContext:
        user = next((str(m.get("content") or "") for m in reversed(transcript) if m.get("role") == "user"), "")
        return PredictionContext(session_id=self.session.id, messages=list(transcript), user_message=user,
                                 history=tuple(self.history), tools=self.parameter_schemas,
                                 openai_tools=self.openai_tools, request_extra=self.request_extra)

    async def _step(self, transcript: list[dict[str, Any]], records: list[ToolRecord],
                    on_text: TextCallback | None = None) -> tuple[StepTiming, bool, str, int]:
        self._step_number += 1
        stream, self._carry = self._carry, None
        if stream is None:  # a new response (not the continuation of a served one)
            self._target = None
            self._target_ready = asyncio.Event()
            stream = self.client.stream(self.model, transcript, self.openai_tools or None, **self.request_extra)
            if self.pacer is not None and any(m.get("role") == "tool" for m in transcript[-1:]):
                stream = self.pacer.paced(stream)  # a return with tool results: admitted by the server's load
        context = self._context(transcript)
        self.feed.start(context)
        started = self.runtime.clock.monotonic()
        first_at: float | None = None
        state = EarlyDispatch(self.session, enabled=self.early_dispatch, started=started,
                              on_speculated=self._on_ticket if self.engine_side else None)
        text_parts: list[str] = []
        finish = ""
        usage = 0
        completion = 0
        served: list[ToolResultServed] = []
        try:
            async for event in until_served(stream, served, state):
                if first_at is None and isinstance(event, TextDelta | ToolCallStarted):
                    first_at = self.runtime.clock.monotonic()  # the first token: the rest of the step is decode time
                if isinstance(event, ToolCallStarted | ToolCallArgumentsDelta):
                    self.feed.streamed(event)  # guesses that fit the streamed call may run now
                    if self.on_tool_event is not None:
                        self.on_tool_event(event)
                if isinstance(event, TextDelta):
                    text_parts.append(event.text)
                    if on_text is not None:
                        shown = on_text(event.text)
                        if inspect.isawaitable(shown):
                            await shown
                elif isinstance(event, ToolCallStarted | ToolCallClosed | ClientItem):
                    launched = state.speculated + state.early
                    state.feed(event)
                    if state.speculated + state.early != launched:
                        await asyncio.sleep(0)  # let the new runs start: a buffered stream never suspends
                elif isinstance(event, MessageDone):
                    finish = event.finish_reason or ""
                    usage = event.usage.total_tokens if event.usage is not None else 0
                    completion = event.usage.completion_tokens if event.usage is not None else 0
                elif isinstance(event, ResponseStarted):
                    self._on_response(event)
                if self.engine_side and self._target is None:
                    raise ForethoughtError(
                        "engine_side=True needs forethought's gateway: the response carried no "
                        "x-forethought-response-id/token headers (use OpenAIChatClient.for_gateway(url) "
                        "against `forethought gateway`, or engine_side=False)")
        except BaseException:
            await self._abandon(state)
            with contextlib.suppress(Exception):
                await aclose_stream(stream)
            raise
        if served:
            self._carry = stream
            finish = "tool_calls"
        generated = self.runtime.clock.monotonic()
        self.feed.stop(generated - started, completion, None if first_at is None else first_at - started)
        text = "".join(text_parts)
        ordered = state.ordered()
        assistant: dict[str, Any] = {"role": "assistant", "content": text or None}
        if ordered:
            assistant["tool_calls"] = [
                {"id": p.id, "type": "function",
                 "function": {"name": p.name, "arguments": _arguments_text(p)}} for p in ordered]
        transcript.append(assistant)
        tool_s = 0.0
        hits = 0
        if served:
            self._check_served(ordered, served)
        for position, pending in enumerate(ordered):
            output, ok, outcome, source, seconds, saved = await self._result(state, pending)
            if served and output != served[position].output:
                raise ForethoughtError(
                    f"engine-side result mismatch for {pending.name} (call {pending.id}): the gateway served "
                    f"{served[position].output[:120]!r} but the authoritative call gave {output[:120]!r}")
            tool_s += seconds
            hits += outcome in ("hit", "partial_hit")
            transcript.append({"role": "tool", "tool_call_id": pending.id, "content": output})
            record = ToolRecord(pending.call or ToolCall(pending.name), output, ok, outcome, source, seconds,
                                pending.closed_at, pending.task is not None, saved)
            records.append(record)
            if pending.call is not None:
                observed = ObservedCall(pending.call, output, ok)
                self.history.append(observed)
                self.feed.learn(context, observed)
        finished = self.runtime.clock.monotonic()
        await self._stop_watchers()
        self.session.end_turn()
        if served:
            self.engine_stats.served_calls += len(served)
            if self._target is not None:
                self._target = self._target.next_segment(served[-1].segment)
                self._target_ready.set()
        done = not ordered
        wait = finished - generated
        timing = StepTiming(generation_s=generated - started, tool_wait_s=wait, tool_s=tool_s,
                            overlap_s=max(0.0, tool_s - wait), calls=len(ordered), hits=hits,
                            early_dispatched=state.early, finish_reason=finish)
        return timing, done, text, usage

    def _on_ticket(self, ticket: SpeculationTicket) -> None:
        """A call of the stream was speculated: in engine-side mode, post it once it has finished."""
        if ticket.key is not None and ticket.status != "rejected":
            self._watch(ticket.key)

    async def _result(self, state: EarlyDispatch,
                      pending: PendingCall) -> tuple[str, bool, str, str, float, float]:
        """Await (or start) one call: output, ok, outcome kind, source, tool seconds needed, seconds saved."""
        if pending.error is not None:
            return render_error(pending.error), False, "error", "", 0.0, 0.0
        try:
            outcome = await state.result(pending)
        except ForethoughtError as exc:
            return render_error(exc), False, "error", "", 0.0, 0.0
        return (render_output(outcome.value), not reports_failure(outcome.value), outcome.kind, outcome.source,
                outcome.waited_s + outcome.saved_s, outcome.saved_s)

    # --- engine side ------------------------------------------------------------------------------

    def _on_response(self, event: ResponseStarted) -> None:
        """A new response started: learn where (and with which token) to post speculated results."""
        target = CacheTarget.from_response(event)
        if target is not None:
            self._target = target
            self._target_ready.set()

    def _watch(self, key: str) -> None:
        """Post the speculation under ``key`` to the gateway once it has finished (engine-side mode)."""
        if key in self._watched:
            return
        settled: asyncio.Future[SettledSpeculation] = asyncio.get_running_loop().create_future()

        def done(result: SettledSpeculation) -> None:
            if not settled.done():
                settled.set_result(result)

        if not self.session.on_settled(key, done):
            return
        self._watched.add(key)
        task = asyncio.create_task(self._post_when_done(settled, self._step_number))
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)

    async def _post_when_done(self, settled: asyncio.Future[SettledSpeculation], step: int) -> None:
        result = await settled
        await self._target_ready.wait()
        cached = (postable(result, self.runtime.clock.monotonic())
                  if self.session.has_speculation(result.key) else None)
        target = self._target
        if cached is None or target is None or step != self._step_number or self._poster is None:
            return
        self.engine_stats.posts += 1
        try:
            self.engine_stats.entries_cached += await self._poster.post(target, [cached])
        except Exception:  # refused, unreachable, unserialisable: the call just misses, nothing surfaces
            self.engine_stats.post_errors += 1

    async def _stop_watchers(self) -> None:
        """End this step's posting (a post still waiting is moot once the step is over)."""
        self._watched.clear()
        watchers = list(self._watchers)
        for task in watchers:
            task.cancel()
        if watchers:
            await asyncio.gather(*watchers, return_exceptions=True)

    async def _drop_carry(self) -> None:
        stream, self._carry = self._carry, None
        if stream is not None:
            with contextlib.suppress(Exception):
                await aclose_stream(stream)

    @staticmethod
    def _check_served(ordered: Sequence[PendingCall], served: Sequence[ToolResultServed]) -> None:
        if [p.id for p in ordered] != [s.tool_call_id for s in served]:
            raise UpstreamError(f"the gateway served results for calls {[s.tool_call_id for s in served]}, "
                                f"but the message has calls {[p.id for p in ordered]}")

    async def _abandon(self, state: EarlyDispatch) -> None:
        """The stream failed: stop guessing, let issued reads finish, drop every speculation."""
        await self.feed.cancel()
        await state.abandon()


def _arguments_text(pending: PendingCall) -> str:
    return pending.raw


__all__ = ["POST_MARGIN_S", "STREAM_SOURCE", "Agent", "AgentResult", "AgentStream", "EngineSideStats", "LLMError",
           "StepTiming", "ToolRecord", "render_error", "render_output"]
