"""Narrowing a step's guesses by the model's own call as it streams.

A model streams its call's name first, then its arguments a fragment at a time. Each fragment rules out
the step's guesses that no longer fit: another tool, or an argument whose finished value differs, or a
string argument that does not start with what has streamed of it. A guess that still fits has at least
the chance ``p / (fitting + 1 - total)`` (``fitting``: the chance of the guesses that fit; ``1 - total``:
the chance of calls nobody guessed, all counted as fitting, so the figure is a lower bound), so a guess
priced out at the step's start may now be worth running, with the tool time still left before the call
closes to hide. A guess already served or ended this step (claimed, expired) no longer takes part.
:class:`StreamNarrowing` keeps the step's guesses (launched or priced out, of tools that may run early),
recomputes their chances at each fragment and offers a guess to the session again once its new chance
makes it worth running (priced as the session would price it), under the source ``<source>@stream`` so
the runtime calibrates these conditional chances apart from the predictor's own. Arguments are compared as proposed
and as the tool's schema reads them (defaults filled in, tuples as lists). It only ever adds guesses: a call
that streams may still be followed by others in the same turn, so nothing is withdrawn here.

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

from forethought._core.entry import SpeculationTicket
from forethought._core.runtime import Session
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
    forms: tuple[Mapping[str, Any], ...]
    """Its arguments as proposed and as the tool's schema reads them (defaults filled, names given)."""
    launched: bool = False
    """Its speculation was started this step (by the feed or by narrowing)."""
    withdrawn: bool = False
    """It was withdrawn on other evidence (it may be offered again)."""
    offered: float = 0.0
    """The conditional chance narrowing last offered it at (0: not yet); offered again only above it."""


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


def _plain(value: Any) -> Any:
    """``value`` as JSON would carry it: tuples as lists, all the way down."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


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

    def __init__(self, session: Session, eta_s: Callable[[], float | None],
                 on_ticket: Callable[[SpeculationTicket], object] | None = None) -> None:
        self.session = session
        self.eta_s = eta_s
        self.on_ticket = on_ticket
        self._guesses: dict[str, _Guess] = {}
        self._streams: dict[int, _Streaming] = {}
        self.offered = 0
        """Guesses narrowing offered to the session again (priced worth running)."""

    @property
    def active(self) -> bool:
        """Whether the step has guesses to narrow."""
        return bool(self._guesses)

    def reset(self) -> None:
        """A new step (or the end of one): forget its guesses and streams."""
        self._guesses.clear()
        self._streams.clear()

    def add(self, prediction: Prediction, source: str, p_hit: float, launched: bool) -> None:
        """One of this step's guesses, as priced when offered (``launched``: it runs, or already ran).

        A guess of a tool that may never run early (its effect, or the policy) is not kept: no chance
        would let it run.
        """
        if not prediction.executable or not 0.0 < p_hit <= 1.0:  # NaN fails this too
            return
        session = self.session
        t = session.tools.get(prediction.call.name)
        if t is None or not t.speculable or not t.speculate or not session.runtime.policy.for_tool(t.name).speculate:
            return
        try:
            canonical, key = session.resolve(prediction.call)[1:]
        except CallError:
            return
        known = self._guesses.get(key)
        if known is not None:
            known.launched = known.launched or launched
            if p_hit <= known.p_hit:
                return
        raw = _plain(dict(prediction.call.arguments))
        plain = _plain(canonical)
        forms = (raw,) if plain == raw else (raw, plain)
        self._guesses[key] = _Guess(prediction, source, p_hit, key, forms,
                                    launched or (known is not None and known.launched))

    def revise(self, key: str, p_hit: float, withdrawn: bool) -> None:
        """A guess's chance was revised by other evidence (a speculator's samples); ``withdrawn``: its
        speculation was cancelled for it."""
        guess = self._guesses.get(key)
        if guess is not None:
            guess.p_hit = p_hit
            guess.withdrawn = guess.withdrawn or withdrawn

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
        session = self.session
        live: list[tuple[_Guess, bool]] = []  # (guess, running now)
        for guess in self._guesses.values():
            running = session.has_speculation(guess.key)
            if guess.launched and not running and not guess.withdrawn:
                continue  # served or ended this step: not a candidate any more
            live.append((guess, running))
        total = min(1.0, sum(g.p_hit for g, _ in live))
        fitting = [(g, running) for g, running in live
                   if g.prediction.call.name == stream.name and any(fits(form, streamed) for form in g.forms)]
        mass = sum(g.p_hit for g, _ in fitting)
        if mass < MIN_FITTING:
            return
        floor = mass + (1.0 - total)
        runtime = session.runtime
        eta = self.eta_s()
        for guess, running in fitting:
            p = min(1.0, guess.p_hit / floor)
            if running or p <= guess.p_hit or p <= guess.offered:
                continue
            label = guess.source + STREAM_SUFFIX
            t = session.tools.get(guess.prediction.call.name)
            if t is None:
                continue
            priced, _ = runtime.price(t, label, p, eta, p_hit=runtime.calibration.p_hit(label, p))
            if priced.value < runtime.policy.min_value_s:
                continue  # not worth it yet: offered when a later fragment makes it so
            guess.offered = p
            self.offered += 1
            ticket = session.speculate(guess.prediction.call, source=label, confidence=p, eta_s=eta)
            if ticket.launched:
                guess.launched, guess.withdrawn = True, False
            if self.on_ticket is not None and ticket.key is not None and ticket.status != "rejected":
                self.on_ticket(ticket)
