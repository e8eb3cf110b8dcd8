"""Predicting at step start for the adapters and the tap: the pattern predictor (and a speculator model, if
configured) fed through the agent loop's own :class:`~forethought.agent.feed.GuessFeed`.

The framework adapters and the tap see each model step begin (a request is sent) and end (its stream
ends), and the conversation the step was asked with. :class:`Foresight` turns that into what the agent loop
does: at :meth:`Foresight.begin` it learns every tool call of the conversation it has not learned yet (the
call with the output text the model was shown, in the context it was made in) and starts the step's
guesses (``GuessFeed.start``: cheap predictors first, a speculator model after, each guess priced by when
the model's call is due, thinned under load); at :meth:`Foresight.end` the step's guessing stops
(``GuessFeed.stop``, which also times the step). Guesses go to ``session.speculate``, so whatever the model
really calls is served through the core as before: a right guess is claimed by the authoritative call, a
wrong one is never served (it ends by its TTL, at the session's turn end or when it closes).

Only calls of tools the session holds, and holds as public, are learned: a call of any other tool (a
framework's own, a tool the policy marks private, a session tool offered under another name) is learned by
no predictor, and taken out of the contexts the others are learned in, so nothing of it reaches a store
(the privacy rule fails closed: a name the session cannot vouch for is private). A conversation the
adapter cannot read (an output nested too deeply to parse, say) costs the step its guesses, never the step.

Learning from the conversation rather than from the tool runs is what makes one rule fit every adapter:
the output a predictor learns from is the text the framework showed the model (the Agents SDK's ``str()``
of a dict, pydantic-ai's JSON), which is what the model derives its next arguments from.

One :class:`~forethought.predictors.patterns.PatternPredictor` per tool set (by its fingerprint) is shared
by every session of the :class:`Foresight`, learns online, and is saved to its store (SQLite: every
``flush_every`` calls, at :meth:`Foresight.flush` and at exit), so a new process starts where the last one
stopped. :meth:`Foresight.default` is the process-wide one the adapters use unless told otherwise; its
store is ``$XDG_CACHE_HOME/forethought/adapter-patterns.sqlite`` (``~/.cache`` without the variable).
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, cast

from forethought._core.calls import ToolCall
from forethought._core.runtime import Session
from forethought._core.tools import Tool
from forethought.agent.feed import GuessFeed
from forethought.integrations.transcripts import Message, text_of, to_chat
from forethought.llm.dispatch import holds
from forethought.llm.events import ToolCallArgumentsDelta, ToolCallStarted
from forethought.predictors.base import ObservedCall, PredictionContext, Predictor, reports_failure
from forethought.predictors.patterns import PatternConfig, PatternPredictor
from forethought.predictors.patterns.store import PatternStore, SqlitePatternStore, tool_set_fingerprint

__all__ = ["Foresight", "default_store_path", "foresight_for"]

STORE_FILE = "adapter-patterns.sqlite"
log = logging.getLogger(__name__)


def default_store_path() -> Path:
    """Where :meth:`Foresight.default` keeps what it learned (the user's cache directory)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "forethought" / STORE_FILE


@dataclass(slots=True)
class _SessionFeed:
    """What one session's steps share: its feed, its tools as predictors see them, the calls learned."""

    feed: GuessFeed
    schemas: dict[str, Mapping[str, Any]]
    openai_tools: list[Mapping[str, Any]]
    learned: set[str] = field(default_factory=set)
    started: float | None = None


def _user_message(messages: Sequence[Message]) -> str:
    return next((text_of(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")


def _ok(output: str) -> bool:
    """Whether a call's output text reports success (a JSON object with an ``error`` field does not)."""
    try:
        return not reports_failure(json.loads(output))
    except (ValueError, RecursionError):
        return True


class Foresight:
    """Step-start guesses for the sessions of the adapters and the tap (see the module docstring)."""

    _defaults: ClassVar[dict[Path, Foresight]] = {}
    _defaults_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, patterns: PatternStore | str | Path | None = None, *, speculators: Sequence[Predictor] = (),
                 pattern_config: PatternConfig | None = None, chain_depth: int = 1, with_patterns: bool = True
                 ) -> None:
        """``patterns``: where learned patterns are kept (a SQLite path, a store, or ``None``: in memory only);
        ``speculators``: predictors that cost more (a speculator model), started after the patterns;
        ``with_patterns=False``: the speculators alone."""
        self.store: PatternStore | None = (SqlitePatternStore(patterns) if isinstance(patterns, str | Path)
                                           else patterns)
        self.with_patterns = with_patterns
        self.speculators = list(speculators)
        self.pattern_config = pattern_config
        self.chain_depth = chain_depth
        self._patterns: dict[str, PatternPredictor] = {}
        self._sessions: weakref.WeakKeyDictionary[Session, _SessionFeed] = weakref.WeakKeyDictionary()

    @classmethod
    def default(cls) -> Foresight:
        """The process-wide foresight on the default store (:func:`default_store_path`), saved at exit."""
        path = default_store_path()
        with cls._defaults_lock:
            found = cls._defaults.get(path)
            if found is None:
                found = cls._defaults[path] = cls(path)
                atexit.register(found.flush)
            return found

    # --- the predictors ---------------------------------------------------------------------------------

    def patterns_for(self, schemas: Mapping[str, Mapping[str, Any]]) -> PatternPredictor:
        """The pattern predictor of this tool set (shared by every session that offers the same tools)."""
        fingerprint = tool_set_fingerprint(schemas)
        found = self._patterns.get(fingerprint)
        if found is None:
            found = self._patterns[fingerprint] = PatternPredictor(self.store, fingerprint, self.pattern_config)
        return found

    def predictors_for(self, session: Session) -> list[Predictor]:
        """The predictors that guess ``session``'s calls: the pattern predictor of its tools, the speculators."""
        schemas = {name: dict(t.parameters) for name, t in _held(session)}
        return [*([self.patterns_for(schemas)] if self.with_patterns else []), *self.speculators]

    def _state(self, session: Session) -> _SessionFeed:
        state = self._sessions.get(session)
        if state is None:
            schemas: dict[str, Mapping[str, Any]] = {name: dict(t.parameters) for name, t in _held(session)}
            # The feed holds the session through a weak proxy: this table must not keep a session alive (its
            # entry goes when the session does).
            held = cast(Session, weakref.proxy(session))
            state = _SessionFeed(GuessFeed(held, self.predictors_for(session), chain_depth=self.chain_depth,
                                           is_private=functools.partial(_not_public, weakref.ref(session))),
                                 schemas, [t.openai_schema() for _, t in _held(session)])
            self._sessions[session] = state
        return state

    # --- steps ------------------------------------------------------------------------------------------

    def begin(self, session: Session, messages: Any) -> None:
        """A model step of ``session`` starts with ``messages`` (Chat Completions messages, Responses input
        items or Anthropic turns): learn the calls not learned yet, then start this step's guesses. Raises
        nothing: a conversation it cannot read costs the step its guesses (logged)."""
        try:
            self._begin(session, messages)
        except Exception as exc:
            log.warning("step-start guesses skipped: the conversation could not be read (%s)", type(exc).__name__)

    def _begin(self, session: Session, messages: Any) -> None:
        state = self._state(session)
        transcript = to_chat(messages)
        history = self._learn(session, state, transcript)
        if state.started is not None:
            state.feed.stop()  # the step before never ended (its stream was dropped): it is over now
        context = PredictionContext(session.id, transcript, _user_message(transcript), tuple(history),
                                    state.schemas, state.openai_tools)
        state.feed.start(context)
        state.started = time.monotonic()

    def streamed(self, session: Session, event: ToolCallStarted | ToolCallArgumentsDelta) -> None:
        """The step's model is streaming a call: guesses that still fit it may run now."""
        state = self._sessions.get(session)
        if state is not None and state.started is not None:
            state.feed.streamed(event)

    def end(self, session: Session) -> None:
        """The step's stream ended (or broke): no more guesses for it; the step is timed."""
        state = self._sessions.get(session)
        if state is None or state.started is None:
            return
        state.feed.stop(time.monotonic() - state.started)
        state.started = None

    def _learn(self, session: Session, state: _SessionFeed, transcript: list[Message]) -> list[ObservedCall]:
        """Every answered call of ``transcript`` in order (the history of the step about to start); the ones
        not learned before are learned now, each in the context of the step that made it."""
        results = {str(m.get("tool_call_id")): text_of(m.get("content")) for m in transcript if m.get("role") == "tool"}
        history: list[ObservedCall] = []
        for position, message in enumerate(transcript):
            calls = message.get("tool_calls") if message.get("role") == "assistant" else None
            if not calls:
                continue
            before = tuple(history)
            context: PredictionContext | None = None
            for n, call in enumerate(calls):
                call_id = str(call.get("id") or f"#{position}.{n}")
                output = results.get(call_id)
                observed = self._observed(call, output)
                if observed is None:
                    continue
                if call_id not in state.learned:
                    if context is None:
                        earlier = transcript[:position]
                        context = PredictionContext(session.id, earlier, _user_message(earlier), before,
                                                    state.schemas, state.openai_tools)
                    state.feed.learn(context, observed)
                    state.learned.add(call_id)
                history.append(observed)
        return history

    @staticmethod
    def _observed(call: Mapping[str, Any], output: str | None) -> ObservedCall | None:
        function = call.get("function") or {}
        name, raw = function.get("name"), function.get("arguments")
        if output is None or not isinstance(name, str) or not name:
            return None
        try:
            arguments = json.loads(raw) if isinstance(raw, str) and raw.strip() else {}
        except (ValueError, RecursionError):
            return None
        if not isinstance(arguments, dict):
            return None
        return ObservedCall(ToolCall(name, arguments), output, _ok(output))

    # --- saving -----------------------------------------------------------------------------------------

    def flush(self) -> None:
        """Save what every pattern predictor learned since its last save (a failure is logged, kept)."""
        for predictor in list(self._patterns.values()):
            try:
                predictor.flush()
            except (sqlite3.Error, OSError) as exc:
                log.warning("pattern store: save failed, kept in memory: %s", exc)

    def close(self) -> None:
        """Save, and close the store."""
        self.flush()
        if self.store is not None:
            self.store.close()


def _held(session: Session) -> list[tuple[str, Tool]]:
    """The session's tools whose calls run through it (not those the caller runs tools of the same name for:
    :func:`~forethought.llm.dispatch.caller_runs`): the only ones guessed."""
    return [(name, t) for name, t in session.tools.items() if holds(session, name)]


def _not_public(ref: weakref.ref[Session], name: str) -> bool:
    """Whether a call of ``name`` must not be learned: unless the session (still there) holds a tool of that
    name whose calls are not private (and the caller does not run its own tool of that name), it is."""
    session = ref()
    t = session.tools.get(name) if session is not None else None
    return t is None or t.hide_key or not holds(cast(Session, session), name)


def foresight_for(predict: bool | Foresight, speculate: bool) -> Foresight | None:
    """What an adapter's ``predict`` argument means: ``True`` the default foresight, ``False`` none, or the
    one given; nothing at all when the adapter does not speculate."""
    if not speculate or predict is False:
        return None
    return Foresight.default() if predict is True else predict
