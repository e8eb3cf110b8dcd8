"""The ``_meta`` a guess is sent with, and the client calls it may serve for it.

A client's ``tools/call`` carries ``_meta`` beside its arguments, and a server can answer from it (a tenant, a
trace, an idempotency key). A guess is sent with the ``io.modelcontextprotocol/*`` keys of the client's latest
call (:func:`envelope_of`: what the 2026 revision needs of every request) and a progress token of its own, and
never with the client's other keys (an idempotency key sent with two different requests could make a server
answer one with the other's result). So a guess may serve only a call whose ``_meta``, its progress token aside
(:func:`sent_meta`), is what the guess was sent with: :class:`GuessMetas` remembers that per call key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ENVELOPE_PREFIX = "io.modelcontextprotocol/"
MAX_REMEMBERED = 1024
"""Guessed calls whose ``_meta`` is remembered (the oldest are forgotten; a call whose guess is forgotten is
never served from it)."""


def envelope_of(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The ``io.modelcontextprotocol/*`` keys of a request's ``_meta``."""
    return {k: v for k, v in meta.items() if isinstance(k, str) and k.startswith(ENVELOPE_PREFIX)}


def sent_meta(params: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A request's ``_meta`` but its progress token: what the server sees of it besides the call itself."""
    meta = (params or {}).get("_meta")
    if not isinstance(meta, Mapping):
        return {}
    return {k: v for k, v in meta.items() if k != "progressToken"}


class GuessMetas:
    """Call key -> the ``_meta`` (but its progress token) its latest guess was sent with."""

    def __init__(self) -> None:
        self._sent: dict[str, Mapping[str, Any]] = {}

    def sent(self, key: str, params: Mapping[str, Any] | None) -> None:
        """A guess of ``key`` goes upstream with ``params``."""
        self._sent.pop(key, None)
        self._sent[key] = sent_meta(params)
        while len(self._sent) > MAX_REMEMBERED:
            del self._sent[next(iter(self._sent))]

    def may_serve(self, key: str, params: Mapping[str, Any] | None) -> bool:
        """Whether the client's call of ``key`` with ``params`` carries the ``_meta`` its guess was sent with
        (forgets the guess's: a call claims it once)."""
        guessed = self._sent.pop(key, None)
        return guessed is not None and guessed == sent_meta(params)
