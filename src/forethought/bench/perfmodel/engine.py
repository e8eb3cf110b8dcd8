"""The engine-side formula: what a client round trip costs, and what a server-side continuation saves.

A tool call normally ends the response: the client runs the tool and sends the whole conversation back.
That round trip costs ``C = o + R / phi`` on top of the turn: API overhead ``o`` plus the re-prefill of the
``R`` tokens the engine cannot find in its prefix cache (the tool-call tokens the client re-renders, the
reasoning tokens if the client sends them back, and any context evicted while the sequence was away). A
server-side continuation (the gateway found the tool's result in its cache when the call closed) pays
neither: the sequence stays in the engine and only the tool-result tokens are prefilled, which every arm
pays. Generation per turn is ``G = (r + c) / delta + q / phi`` (decode reasoning ``r`` and call ``c``
tokens; prefill the ``q`` result tokens).

Per turn ``i`` (request ``i`` initiated at ``S_i`` by the client, ``C_i = C``, or by the server, ``C_i = 0``;
the speculator starts at ``S_i`` and, on the engine-side arm, posts its result at ``g + T + o``):

* miss:                                   ``C_i + G + T``, next request client-sent
* correct guess, posted before the close: ``C_i + G`` (``g + T + o <= C_i + G``), next request server-side
* correct guess otherwise (client-side):  ``max(C_i + G, g + T)``, next request client-sent

:func:`arm_times` returns the exact expectation over i.i.d. guesses (probability ``alpha``) by a two-state
recursion; docs/perfmodel.md derives the closed forms it reduces to. Serial is ``N (C + G + T)``; the
client-side arm is the Lemma-1 form with ``G`` replaced by ``C + G``; the engine-side arm is never slower
than the client-side arm, and unlike it can exceed 2x because it also removes ``C``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from forethought.bench.perfmodel._checks import finite_nonnegative, finite_positive, positive_int, probability, require


@dataclass(frozen=True, slots=True)
class EngineTimes:
    """Expected wall time of the three arms, in seconds."""

    serial_s: float
    client_s: float
    engine_s: float

    @property
    def speedup_client(self) -> float:
        return self.serial_s / self.client_s

    @property
    def speedup_engine(self) -> float:
        return self.serial_s / self.engine_s

    @property
    def time_saved_client(self) -> float:
        return 1.0 - self.client_s / self.serial_s

    @property
    def time_saved_engine(self) -> float:
        return 1.0 - self.engine_s / self.serial_s

    @property
    def engine_gain(self) -> float:
        """How much faster the engine-side arm is than the client-side arm (``client_s / engine_s``)."""
        return self.client_s / self.engine_s


def arm_times(
    *, alpha: float, G: float, g: float, T: float, round_trip_s: float, post_s: float, turns: int
) -> EngineTimes:
    """Expected serial, client-side and engine-side times of ``turns`` tool turns.

    ``G`` is the per-turn generation time on the engine, ``round_trip_s`` the client round trip ``C``,
    ``post_s`` the overhead of posting a speculative result to the gateway (normally the API overhead ``o``).
    The first request of the task is always client-sent.
    """
    probability("alpha", alpha)
    for name, value in (("G", G), ("g", g), ("T", T), ("round_trip_s", round_trip_s), ("post_s", post_s)):
        finite_nonnegative(name, value)
    require(G + T + round_trip_s > 0, "a turn must take some time")
    positive_int("turns", turns)
    C = round_trip_s
    serial = turns * (C + G + T)
    client = turns * (alpha * max(C + G, g + T) + (1.0 - alpha) * (C + G + T))
    posted = g + T + post_s
    engine = 0.0
    p_client = 1.0  # probability that request i is client-sent
    for _ in range(turns):
        p_server = 1.0 - p_client
        # client-sent request
        hit_engine = posted <= C + G
        hit_time = C + G if hit_engine else max(C + G, g + T)
        engine += p_client * (alpha * hit_time + (1.0 - alpha) * (C + G + T))
        next_server = p_client * alpha * (1.0 if hit_engine else 0.0)
        # server-continued request
        if p_server > 0:
            hit_engine_s = posted <= G
            hit_time_s = G if hit_engine_s else max(G, g + T)
            engine += p_server * (alpha * hit_time_s + (1.0 - alpha) * (G + T))
            next_server += p_server * alpha * (1.0 if hit_engine_s else 0.0)
        p_client = 1.0 - next_server
    return EngineTimes(serial, client, engine)


@dataclass(frozen=True, slots=True)
class EngineParams:
    """Token-level description of a tool-using agent on a real engine (single sequence, no contention).

    ``reasoning_resubmitted`` says whether the client sends the reasoning back (chat templates that strip
    earlier reasoning do not); ``evicted_tokens`` is context lost from the prefix cache while the sequence
    was out of the engine (0 with ample cache).
    """

    alpha: float
    tool_s: float
    speculator_s: float
    api_overhead_s: float
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    call_tokens: int
    reasoning_tokens: int
    result_tokens: int
    turns: int = 1
    reasoning_resubmitted: bool = True
    evicted_tokens: int = 0

    def __post_init__(self) -> None:
        probability("alpha", self.alpha)
        finite_nonnegative("tool_s", self.tool_s)
        finite_nonnegative("speculator_s", self.speculator_s)
        finite_nonnegative("api_overhead_s", self.api_overhead_s)
        finite_positive("prefill_tokens_per_s", self.prefill_tokens_per_s)
        finite_positive("decode_tokens_per_s", self.decode_tokens_per_s)
        positive_int("call_tokens", self.call_tokens)
        for name, value in (
            ("reasoning_tokens", self.reasoning_tokens),
            ("result_tokens", self.result_tokens),
            ("evicted_tokens", self.evicted_tokens),
        ):
            require(isinstance(value, int) and value >= 0, f"{name} must be an integer >= 0, got {value!r}")
        positive_int("turns", self.turns)

    @property
    def generation_s(self) -> float:
        """``G = (r + c) / delta + q / phi``: decode the reasoning and the call, prefill the tool result."""
        decoded = self.reasoning_tokens + self.call_tokens
        return decoded / self.decode_tokens_per_s + self.result_tokens / self.prefill_tokens_per_s

    @property
    def reprefill_tokens(self) -> int:
        """``R``: tokens a client round trip makes the engine prefill again."""
        resubmitted_reasoning = self.reasoning_tokens if self.reasoning_resubmitted else 0
        return self.call_tokens + resubmitted_reasoning + self.evicted_tokens

    @property
    def round_trip_s(self) -> float:
        """``C = o + R / phi``."""
        return self.api_overhead_s + self.reprefill_tokens / self.prefill_tokens_per_s


def engine_params_of(source: object) -> EngineParams:
    """The :class:`EngineParams` of ``source``: each field read from ``source``'s attribute of the same name.

    For parameter sets that carry these fields among others (``forethought model``'s, the simulator's);
    a field ``source`` lacks keeps its default (``evicted_tokens``), and a missing one without a default
    is a ``TypeError``. Validation is :class:`EngineParams`' own.
    """
    return EngineParams(**{f.name: getattr(source, f.name) for f in fields(EngineParams) if hasattr(source, f.name)})


def engine_times(params: EngineParams) -> EngineTimes:
    """:func:`arm_times` for token-level parameters (the speculator posts with the API overhead ``o``)."""
    p = params
    return arm_times(
        alpha=p.alpha,
        G=p.generation_s,
        g=p.speculator_s,
        T=p.tool_s,
        round_trip_s=p.round_trip_s,
        post_s=p.api_overhead_s,
        turns=p.turns,
    )
