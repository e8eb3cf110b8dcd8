"""Guesses that never ran this turn (withdrawn while running, or deferred before starting): what their
sources proposed is kept until the turn's calls say whether they would have hit.

A call this turn with a held key counts its votes as hits; the turn's end counts what is left as misses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from forethought._core.calls import CallKey

__all__ = ["Unrun", "Votes"]

Votes = list[tuple[str, float]]
"""(source, confidence) of each guess of one call."""


class Unrun:
    """This turn's withdrawn and deferred guesses by key; ``learn(votes, hit)`` calibrates their sources."""

    __slots__ = ("_learn", "held")

    def __init__(self, learn: Callable[[Iterable[tuple[str, float]], bool], None]) -> None:
        self._learn = learn
        self.held: dict[CallKey, Votes] = {}
        """The votes held, by key (the same dict for the session's life: a caller may test it for emptiness
        without a call, on the hot path)."""

    def hold(self, key: CallKey, votes: Iterable[tuple[str, float]]) -> None:
        """Keep ``votes`` for ``key`` until the turn's calls settle them."""
        self.held.setdefault(key, []).extend(votes)

    def holds(self, key: CallKey, source: str, confidence: float) -> bool:
        """Whether ``source``'s guess of ``key`` at ``confidence`` is still held."""
        votes = self.held.get(key)
        return votes is not None and (source, confidence) in votes

    def release(self, key: CallKey, source: str, confidence: float) -> bool:
        """Stop holding one guess (it runs after all); whether it was held."""
        votes = self.held.get(key)
        if votes is None or (source, confidence) not in votes:
            return False
        votes.remove((source, confidence))
        if not votes:
            del self.held[key]
        return True

    def settle(self, key: CallKey | None) -> None:
        """The turn's call ``key`` arrived (its held guesses hit), or, with ``None``, the turn ended (every
        guess still held missed)."""
        if key is not None:
            votes = self.held.pop(key, None)
            if votes is not None:
                self._learn(votes, True)
            return
        for votes in self.held.values():
            self._learn(votes, False)
        self.held.clear()
