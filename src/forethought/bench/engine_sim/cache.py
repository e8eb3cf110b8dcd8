"""The simulated engine's prefix cache: per-conversation prompts, a capacity in tokens, LRU eviction.

Each conversation keeps the prompt of its latest request and, once that request has finished, the KV of
the text it generated. A new request of the conversation is served from cache for the characters it
shares with the stored prompt, up to what eviction left. Entries are pinned while their request runs;
when the cache holds more than ``capacity_tokens``, the least recently used unpinned entry loses its
generated output first, then its prompt from the tail (block-wise eviction, as paged engines do), until
the cache fits. A conversation trimmed to nothing stays as a tombstone (so recomputation is still
recognised) until ``max_conversations`` pushes it out.

Two kinds of request meet the cache:

* a **client round trip**: the client re-renders the previous response (the tool call) into its next
  prompt, so the engine reuses the shared prompt prefix only; the re-rendered output and any evicted
  prefix are prefilled again and counted as *recomputed*;
* a **server-side continuation** (the gateway says ``continuation``): the sequence never left the engine,
  so its previous prompt *and* its generated output are still there (if not evicted); only the appended
  tool results are prefilled.

Token counts follow the engine's documented approximation (ceil(characters / 4)).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

CHARS_PER_TOKEN = 4
DEFAULT_MAX_CONVERSATIONS = 1024


def count_tokens(text: str) -> int:
    """The documented approximation: ceil(len(text) / 4)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _tokens(chars: int) -> int:
    return math.ceil(chars / CHARS_PER_TOKEN)


def common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix of ``a`` and ``b`` (binary search over slices)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(frozen=True, slots=True)
class Prefill:
    """What one request's prompt cost: tokens in it, served from cache, and recomputed."""

    prompt_tokens: int
    cached_tokens: int
    recomputed_tokens: int
    """Prefilled tokens the engine had computed before (evicted prefix, re-rendered output)."""

    @property
    def computed_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens


@dataclass(slots=True)
class _Entry:
    prompt: str
    kept: int
    output_chars: int = 0
    pins: int = 0

    @property
    def held(self) -> int:
        return self.kept + self.output_chars


class PrefixCache:
    """Prompts of recent conversations, LRU over ``capacity_tokens`` (0: unbounded)."""

    def __init__(self, capacity_tokens: int = 0, max_conversations: int = DEFAULT_MAX_CONVERSATIONS) -> None:
        if capacity_tokens < 0 or max_conversations < 1:
            raise ValueError("capacity_tokens must be >= 0 and max_conversations >= 1")
        self.capacity_tokens = capacity_tokens
        self.max_conversations = max_conversations
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._held = 0
        self.evicted_tokens = 0
        self.evictions = 0

    @property
    def held_tokens(self) -> int:
        """Tokens the cache holds now (pinned and evictable)."""
        return _tokens(self._held)

    def admit(self, key: str, prompt: str, *, continuation: bool = False, tail_chars: int = 0) -> Prefill:
        """Start a request of conversation ``key``: price its prompt, store it and pin it while it runs.

        ``tail_chars`` are the characters at the end of ``prompt`` that a continuation appends (the tool
        results); everything before them is hot when the conversation's entry survived intact.
        """
        entry = self._entries.pop(key, None)
        cached = recomputed = 0
        if entry is not None:
            self._held -= entry.held
            shared = common_prefix(entry.prompt, prompt)
            cached = min(shared, entry.kept)
            intact = entry.kept == len(entry.prompt) and shared == len(entry.prompt)
            if continuation and intact and entry.output_chars:
                cached = max(cached, len(prompt) - tail_chars)
            else:
                # the previous output comes back re-rendered by the client (or was evicted): computed again
                recomputed += min(entry.output_chars, max(0, len(prompt) - shared))
            recomputed += shared - min(shared, entry.kept)
            pins = entry.pins
        else:
            pins = 0
        self._entries[key] = _Entry(prompt, len(prompt), 0, pins + 1)
        self._held += len(prompt)
        while len(self._entries) > self.max_conversations:
            oldest = next(iter(self._entries))
            if self._entries[oldest].pins:
                break
            self._held -= self._entries.pop(oldest).held
        self._evict()
        prompt_tokens, cached_tokens = count_tokens(prompt), _tokens(cached)
        return Prefill(prompt_tokens, cached_tokens, min(_tokens(recomputed), prompt_tokens - cached_tokens))

    def finish(self, key: str, output_chars: int) -> None:
        """The request of ``key`` ended: unpin it and keep the KV of its ``output_chars`` generated characters."""
        entry = self._entries.get(key)
        if entry is None:
            return
        entry.pins = max(0, entry.pins - 1)
        self._held += output_chars - entry.output_chars
        entry.output_chars = output_chars
        self._entries.move_to_end(key)
        self._evict()

    def clear(self) -> None:
        self._entries.clear()
        self._held = 0
        self.evicted_tokens = 0
        self.evictions = 0

    def _evict(self) -> None:
        if self.capacity_tokens <= 0:
            return
        excess = self._held - self.capacity_tokens * CHARS_PER_TOKEN
        if excess <= 0:
            return
        for entry in list(self._entries.values()):  # least recently used first
            if excess <= 0:
                break
            if entry.pins or not entry.held:
                continue
            take = min(excess, entry.held)
            from_output = min(take, entry.output_chars)
            entry.output_chars -= from_output
            entry.kept -= take - from_output
            self._held -= take
            excess -= take
            self.evicted_tokens += _tokens(take)
            self.evictions += 1
