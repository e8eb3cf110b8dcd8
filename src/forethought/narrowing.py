"""Narrowing a step's guesses by the model's own call as it streams.

A model streams its call's name first, then its arguments a fragment at a time. Each fragment rules out
the step's guesses that no longer fit: another tool, or an argument whose finished value differs, or a
string argument that does not start with what has streamed of it. The guesses that still fit share the
chance the step's guesses had between them (each keeps its share: ``p * total / fitting``), so a guess
priced out at the step's start may now be worth running, with the tool time still left before the call
closes to hide. :class:`StreamNarrowing` keeps the step's guesses (launched or priced out), recomputes
their chances at each fragment and offers a guess to the session again when its chance has grown by
``growth`` since it was last offered, under the source ``<source>@stream`` so the runtime calibrates
these conditional chances apart from the predictor's own. It only ever adds guesses: a call that streams
may still be followed by others in the same turn, so nothing is withdrawn here.

The streamed text is read with jiter's partial mode: the keys before the last are finished values and are
compared exactly; the last may still be growing and is compared as a string prefix (other types are not
compared until a later key begins); only the first 4,096 characters are read, and inside a value only
every 64 characters, so the parsing stays linear in the text. Narrowing never decides what the agent sees:
a guess is still served only to a call with an identical canonical key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jiter

from forethought._runtime import Session
from forethought._store import SpeculationTicket
from forethought.errors import CallError
from forethought.predictors.base import Prediction

__all__ = ["STREAM_SUFFIX", "StreamNarrowing", "fits"]

STREAM_SUFFIX = "@stream"
"""Appended to a guess's source when narrowing offers it again."""
MIN_FITTING = 1e-9
MAX_TEXT = 4096
"""Arguments are narrowed over their first this many characters only (each narrowing parses them all)."""
EVERY = 64
"""Inside a value, narrow again only once this many characters have arrived (a fragment with a quote, comma
or bracket, where a value may have ended, always narrows): the parsing stays linear in the text."""
_BOUNDARY = frozenset('",}]')


@dataclass(slots=True)
class _Guess:
    prediction: Prediction
    source: str
    p_hit: float
    key: str
    offered: float = 0.0
    """The conditional chance it was last offered at by narrowing (0: not yet)."""


@dataclass(slots=True)
class _Streaming:
    name: str
    text: list[str] = field(default_factory=list)
    length: int = 0
    narrowed_at: int = 0


def fits(arguments: Mapping[str, Any], streamed: Mapping[str, Any]) -> bool:
    """Whether a guess's ``arguments`` can still be the call whose partial arguments parsed as ``streamed``.

    Every key of ``streamed`` but the last holds a finished value: it must be equal. The last may still be
    growing: a string must be a prefix of the guess's string; any other type is not judged yet.
    """
    if not streamed:
        return True
    *done, last = streamed
    for key in done:
        if key not in arguments or arguments[key] != streamed[key]:
            return False
    value = streamed[last]
    if isinstance(value, str):
        mine = arguments.get(last)
        return isinstance(mine, str) and mine.startswith(value)
    return True


def parse_partial(text: str) -> Mapping[str, Any] | None:
    """The arguments streamed so far (a prefix of a JSON object), or ``None`` when it does not parse as one."""
    if not text.strip():
        return {}
    try:
        value = jiter.from_json(text.encode(), partial_mode="trailing-strings")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class StreamNarrowing:
    """One agent's guesses for the current step, narrowed by the model's streamed calls."""

    def __init__(self, session: Session, eta_s: Callable[[], float | None], growth: float = 1.5,
                 on_ticket: Callable[[SpeculationTicket], object] | None = None) -> None:
        self.session = session
        self.eta_s = eta_s
        self.growth = growth
        self.on_ticket = on_ticket
        self._guesses: dict[str, _Guess] = {}
        self._streams: dict[int, _Streaming] = {}
        self.offered = 0
        """Guesses offered again by narrowing (launched, joined or rejected)."""

    @property
    def active(self) -> bool:
        """Whether the step has guesses to narrow."""
        return bool(self._guesses)

    def reset(self) -> None:
        """A new step (or the end of one): forget its guesses and streams."""
        self._guesses.clear()
        self._streams.clear()

    def add(self, prediction: Prediction, source: str, p_hit: float) -> None:
        """One of this step's guesses, as priced when offered (launched or not)."""
        if not prediction.executable or not 0.0 < p_hit <= 1.0:
            return
        try:
            key = self.session.resolve(prediction.call)[2]
        except CallError:
            return
        known = self._guesses.get(key)
        if known is None or p_hit > known.p_hit:
            self._guesses[key] = _Guess(prediction, source, p_hit, key)

    def revise(self, key: str, p_hit: float) -> None:
        """A guess's chance was revised by other evidence (a speculator's samples)."""
        guess = self._guesses.get(key)
        if guess is not None:
            guess.p_hit = p_hit

    def started(self, index: int, name: str) -> None:
        """The model began call ``index`` of its message with tool ``name``."""
        self._streams[index] = _Streaming(name)
        self._narrow(index)

    def delta(self, index: int, text: str) -> None:
        """A fragment of call ``index``'s arguments."""
        stream = self._streams.get(index)
        if stream is None or stream.length >= MAX_TEXT:
            return
        stream.text.append(text)
        stream.length += len(text)
        if stream.length - stream.narrowed_at >= EVERY or not _BOUNDARY.isdisjoint(text):
            self._narrow(index)

    def _narrow(self, index: int) -> None:
        if not self._guesses:
            return
        stream = self._streams[index]
        stream.narrowed_at = stream.length
        text = "".join(stream.text)
        streamed = parse_partial(text[:MAX_TEXT] if len(text) > MAX_TEXT else text)
        if streamed is None:
            return
        total = min(1.0, sum(g.p_hit for g in self._guesses.values()))
        fitting = [g for g in self._guesses.values()
                   if g.prediction.call.name == stream.name and fits(g.prediction.call.arguments, streamed)]
        mass = sum(g.p_hit for g in fitting)
        if mass < MIN_FITTING:
            return
        session = self.session
        for guess in fitting:
            p = min(1.0, guess.p_hit * total / mass)
            if p <= guess.offered * self.growth or p <= guess.p_hit or session.has_speculation(guess.key):
                continue
            guess.offered = p
            self.offered += 1
            ticket = session.speculate(guess.prediction.call, source=guess.source + STREAM_SUFFIX, confidence=p,
                                       eta_s=self.eta_s())
            if self.on_ticket is not None and ticket.key is not None and ticket.status != "rejected":
                self.on_ticket(ticket)
