"""The speculator model: a cheaper model of the user's own provider, sampled on the very request the client sent.

``--speculator-model NAME`` (off by default) adds a :class:`~forethought.predictors.model.ModelSpeculator`
to every conversation's guesses. Its samples must reach the same provider with the same credentials and the
same conversation, so its client is :class:`ReplayClient`: an :class:`~forethought.llm.chat.LLMClient` that
ignores the Chat-shaped messages a predictor passes and re-sends the step's own request (:class:`Replay`,
bound to the step by an id in the context's ``request_extra``) with only the model replaced and streaming
on, to the same upstream URL with the client's headers, and decodes the answer with the API's own decoder.
The request and its headers live only as long as the step (:meth:`ReplayClient.release`); nothing is
written anywhere.

Tokens are counted per conversation (:class:`TokenBudget`): every sample's reported usage is added to the
conversation it was drawn for, and a conversation that has spent its budget draws no more samples (checked
at each step's start: the samples of the step that crosses the budget may pass it by what they cost).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx2

from forethought.daemon.wire import Wire, decoder_for, stream_ended
from forethought.errors import StreamDroppedError, UpstreamError
from forethought.llm.events import LLMEvent, MessageDone
from forethought.llm.sse import DONE, aiter_events, parse_json_data

__all__ = ["REPLAY_KEY", "Replay", "ReplayClient", "TokenBudget"]

REPLAY_KEY = "forethought_replay"
"""The ``request_extra`` field that names the step a sample is drawn for."""
DEFAULT_SAMPLE_MAX_TOKENS = 1024


@dataclass(frozen=True, slots=True)
class Replay:
    """One step's request as the client sent it: where it went, with which headers, what it said."""

    wire: Wire
    url: str
    headers: Sequence[tuple[str, str]]
    body: Mapping[str, Any]
    conversation: str

    def __repr__(self) -> str:  # the headers hold credentials, the body the conversation: never shown
        return f"Replay(wire={self.wire!s}, conversation={self.conversation!r})"


@dataclass
class TokenBudget:
    """Speculator tokens per conversation, against a budget (``None``: no budget)."""

    limit: int | None = None
    spent: dict[str, int] = field(default_factory=dict)
    samples: dict[str, int] = field(default_factory=dict)

    def add(self, conversation: str, tokens: int) -> None:
        self.spent[conversation] = self.spent.get(conversation, 0) + max(0, tokens)
        self.samples[conversation] = self.samples.get(conversation, 0) + 1

    def allows(self, conversation: str) -> bool:
        return self.limit is None or self.spent.get(conversation, 0) < self.limit

    def forget(self, conversation: str) -> None:
        self.spent.pop(conversation, None)
        self.samples.pop(conversation, None)

    @property
    def total(self) -> int:
        return sum(self.spent.values())


class ReplayClient:
    """:class:`~forethought.llm.chat.LLMClient` re-sending a bound step's own request to another model."""

    def __init__(self, http: httpx2.AsyncClient, budget: TokenBudget,
                 max_tokens: int = DEFAULT_SAMPLE_MAX_TOKENS) -> None:
        self._http = http
        self.budget = budget
        self.max_tokens = max_tokens
        self._steps: dict[str, Replay] = {}
        self._ids = itertools.count(1)
        self.errors = 0

    def bind(self, replay: Replay) -> str:
        """Make ``replay`` available to samples; returns the id to put in ``request_extra``."""
        handle = f"r{next(self._ids)}"
        self._steps[handle] = replay
        return handle

    def release(self, handle: str) -> None:
        """The step is over: its request and headers are dropped."""
        self._steps.pop(handle, None)

    async def stream(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                     **extra: Any) -> AsyncIterator[LLMEvent]:
        handle = extra.get(REPLAY_KEY)
        replay = self._steps.get(handle) if isinstance(handle, str) else None
        if replay is None:
            raise UpstreamError("the step this sample was drawn for has ended")
        body = _sample_body(replay, model, self.max_tokens)
        tokens = 0
        try:
            async with self._http.stream("POST", replay.url, content=json.dumps(body).encode(),
                                         headers=list(replay.headers)) as response:
                if response.status_code != 200:
                    raise UpstreamError(f"the speculator model's request answered HTTP {response.status_code}")
                decoder = decoder_for(replay.wire)
                async for event in aiter_events(response):
                    if event.data == DONE:
                        break
                    for out in decoder.feed(parse_json_data(event.data)):
                        tokens = _tokens(out, tokens)
                        yield out
                    if decoder.done:
                        break
                for out in stream_ended(decoder):
                    tokens = _tokens(out, tokens)
                    yield out
                if not decoder.done:
                    raise StreamDroppedError("the speculator model's stream ended early")
        except httpx2.HTTPError as exc:
            self.errors += 1
            raise UpstreamError(f"the speculator model's request failed: {type(exc).__name__}") from None
        finally:
            self.budget.add(replay.conversation, tokens)


def _tokens(event: LLMEvent, so_far: int) -> int:
    """The tokens a sample reports (its message's usage), else what was known."""
    if isinstance(event, MessageDone) and event.usage is not None:
        return event.usage.total_tokens
    return so_far


def _sample_body(replay: Replay, model: str, max_tokens: int) -> dict[str, Any]:
    """The step's request for one sample: the speculator's model, streamed, its length capped."""
    body = dict(replay.body)
    body["model"] = model
    body["stream"] = True
    if replay.wire is Wire.CHAT:
        body["stream_options"] = {"include_usage": True}
        body.pop("max_tokens", None)
        body["max_completion_tokens"] = min(int(body.get("max_completion_tokens") or max_tokens), max_tokens)
    elif replay.wire is Wire.RESPONSES:
        body["max_output_tokens"] = min(int(body.get("max_output_tokens") or max_tokens), max_tokens)
        body["store"] = False
    else:
        body["max_tokens"] = min(int(body.get("max_tokens") or max_tokens), max_tokens)
        body.pop("thinking", None)  # a sample only has to name the next call
    return body
