"""Admission: whether a guess may be considered at all, before it is priced (the session open, the tool's
effect and policy, a confidence in range and over the policy's floor, the tool's circuit breaker closed).

What depends only on the tool and the policy is decided once per tool object and kept.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from forethought._core.policy import Policy
from forethought._core.tools import Effect, Tool

__all__ = ["Admission"]

_ISOLATED_WRITE = Effect.ISOLATED_WRITE


class _Closable(Protocol):
    @property
    def closed(self) -> bool: ...


class Admission:
    """A session's admission of guesses (:meth:`refusal`)."""

    __slots__ = ("_allowed", "_live", "_policy", "_static")

    def __init__(self, policy: Policy, live: _Closable, allowed: Callable[[str], bool]) -> None:
        self._policy = policy
        self._live = live
        self._allowed = allowed
        self._static: dict[str, tuple[Tool, str | None]] = {}

    def refusal(self, t: Tool, confidence: Any) -> str | None:
        """Why a guess of ``t`` at ``confidence`` is refused before pricing, or ``None``."""
        if self._live.closed:
            return "session closed"
        cached = self._static.get(t.name)
        if cached is None or cached[0] is not t:
            cached = self._static[t.name] = (t, self._static_refusal(t))
        if cached[1] is not None:
            return cached[1]
        kind = type(confidence)
        exact = kind is float or kind is int  # the fast path; anything else is checked in full
        if not (exact or (isinstance(confidence, float | int) and not isinstance(confidence, bool))) or not (
                0.0 <= confidence <= 1.0):
            return f"confidence {confidence!r} is not a number between 0 and 1"
        policy = self._policy
        if confidence < policy.min_confidence:
            return f"confidence {confidence:.2f} below threshold {policy.min_confidence:.2f}"
        if not self._allowed(t.name):
            return "circuit breaker open"
        return None

    def _static_refusal(self, t: Tool) -> str | None:
        """Why ``t`` may never be speculated under this policy (constant per tool)."""
        policy = self._policy
        if not t.speculate or not policy.for_tool(t.name).speculate:
            return "policy denies speculation of this tool"
        if not t.speculable:
            return f"effect {t.effect.value} may not run early" + (
                " (no snapshot state)" if t.effect is _ISOLATED_WRITE else "")
        if policy.max_concurrent < 1 or policy.max_concurrent_per_session < 1:
            return "speculation disabled (no speculative slots)"
        return None
