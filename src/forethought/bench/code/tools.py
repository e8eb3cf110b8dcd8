"""The code benchmark's tools: deterministic functions of JSON values, each taking an injected latency.

Standard library only: the spec-ptc arm loads this file by path in its own Python 3.12 environment, so both
arms call the very same functions. :func:`make_tools` returns fresh functions (and a fresh outbox for the
one writing tool) for one run; every tool sleeps ``latency_s`` and then answers from a hash of its input.
``EFFECTS`` says what running each tool early may do (the values of ``forethought.Effect``).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any

EFFECTS = {
    "search": "read_only", "fetch": "pure", "summarize": "pure", "lookup": "pure", "weather": "read_only",
    "price": "read_only", "place": "pure", "notify": "destructive"}
CITIES = ("Paris", "Oslo", "Lima", "Cairo", "Delhi", "Quito", "Perth", "Tokyo")
KNOWN_KEYS = ("start", "alpha", "beta", "gamma", "delta", "omega")


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def make_tools(latency_s: float, outbox: list[str] | None = None) -> dict[str, Callable[..., Any]]:
    """Fresh tool functions that sleep ``latency_s`` per call; ``notify`` appends to ``outbox``."""
    sent = outbox if outbox is not None else []

    def search(query: str, k: int = 4) -> list[str]:
        """Ids of the documents that match a query, best first."""
        time.sleep(latency_s)
        base = _digest(query)
        return [f"doc-{(base >> (8 * i)) % 997:03d}" for i in range(k)]

    def fetch(doc_id: str) -> dict[str, Any]:
        """A document's title, length and score."""
        time.sleep(latency_s)
        h = _digest(doc_id)
        return {"id": doc_id, "title": f"Title of {doc_id}", "words": 100 + h % 900, "score": h % 100}

    def summarize(text: str) -> str:
        """A one-line summary of a text."""
        time.sleep(latency_s)
        words = text.split()
        return f"{len(words)} words, starts with {words[0] if words else '-'} [{_digest(text) % 1000}]"

    def lookup(key: str) -> int:
        """The value stored under a key; unknown keys raise KeyError."""
        time.sleep(latency_s)
        if not (key in KNOWN_KEYS or key.startswith("next-")):
            raise KeyError(key)
        return _digest(key) % 50

    def weather(city: str) -> dict[str, Any]:
        """Today's temperature (Celsius) and sky in a city."""
        time.sleep(latency_s)
        h = _digest(city)
        return {"city": city, "temp": h % 35, "sky": ("clear", "cloudy", "rain")[h % 3]}

    def price(symbol: str, currency: str = "USD") -> int:
        """A price in cents."""
        time.sleep(latency_s)
        return 100 + _digest(symbol + currency) % 10_000

    def place(point: tuple[float, float]) -> str:
        """The nearest city to a ``(latitude, longitude)`` point; a tuple only (a list is refused)."""
        time.sleep(latency_s)
        if type(point) is not tuple:
            raise TypeError(f"place() takes a (latitude, longitude) tuple, not {type(point).__name__}")
        return CITIES[_digest(repr(point)) % len(CITIES)]

    def notify(message: str) -> str:
        """Send a message (a write: it must never run early)."""
        time.sleep(latency_s)
        sent.append(message)
        return f"sent #{len(sent)}"

    return {"search": search, "fetch": fetch, "summarize": summarize, "lookup": lookup, "weather": weather,
            "price": price, "place": place, "notify": notify}
