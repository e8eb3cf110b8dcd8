"""Turns: where, in a session's list of calls, each user turn starts.

The control-flow model marks turn starts in its call contexts, and argument rules distinguish "used in
this turn" and "the previous user message". :class:`TurnTracker` works this out from the chat messages of
the context when it has them (each user message starts a turn; each assistant tool call is one call),
and otherwise from the sequence of contexts it is shown per session: a new user message, or a new count
of user messages, starts a turn. A session first seen without messages is taken to be in its first turn.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from forethought.predictors.base import PredictionContext

MAX_TRACKED_SESSIONS = 4096


@dataclass(frozen=True, slots=True)
class Turns:
    """Turn starts (indices into the history, ascending, the current turn last) and the previous message."""

    starts: tuple[int, ...]
    previous_message: str = ""

    @property
    def current(self) -> int:
        return self.starts[-1]


def turns_from_messages(messages: Sequence[Mapping[str, Any]], history: int) -> Turns | None:
    """Turns read from OpenAI-style chat messages; None when they hold no user message."""
    starts: list[int] = []
    texts: list[str] = []
    calls = 0
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        if message.get("role") == "user":
            start = min(calls, history)
            if starts and starts[-1] == start:
                texts[-1] = str(message.get("content") or "")
            else:
                starts.append(start)
                texts.append(str(message.get("content") or ""))
        elif message.get("role") == "assistant":
            calls += len(message.get("tool_calls") or ())
    if not starts:
        return None
    return Turns(tuple(starts), texts[-2] if len(texts) > 1 else "")


@dataclass(slots=True)
class _Seen:
    user_message: str
    user_count: int
    turns: Turns


class TurnTracker:
    """Turns of each session, from messages or from the contexts seen so far (bounded memory)."""

    def __init__(self, max_sessions: int = MAX_TRACKED_SESSIONS) -> None:
        self._max = max_sessions
        self._seen: OrderedDict[str, _Seen] = OrderedDict()

    def turns(self, context: PredictionContext) -> Turns:
        """The turns of ``context``'s session as of ``context``."""
        here = len(context.history)
        from_messages = turns_from_messages(context.messages, here)
        if from_messages is not None:
            return from_messages
        seen = self._seen.get(context.session_id)
        if seen is None or here < seen.turns.current:
            seen = _Seen(context.user_message, 0, Turns((0,)))
        elif context.user_message != seen.user_message:
            seen = _Seen(context.user_message, 0, Turns((*seen.turns.starts, here), seen.user_message))
        self._seen[context.session_id] = seen
        self._seen.move_to_end(context.session_id)
        while len(self._seen) > self._max:
            self._seen.popitem(last=False)
        return seen.turns
