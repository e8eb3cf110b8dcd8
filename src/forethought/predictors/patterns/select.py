"""Best first, scoring lazily: the order of a stable sort by score, without scoring every item.

Choosing a parameter's few best values needs the exact scores of the values that make the cut, not of
all of them. :func:`best_first` takes each item with either its exact score or an upper bound of it, and
yields the items in exactly the order ``sorted(items, key=score, reverse=True)`` would (ties in the order
given), working out an exact score only when its bound reaches the head of the queue.
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")
_NUMBER = operator.itemgetter(0)


def best_first(items: Sequence[tuple[float, bool, T]], score: Callable[[T], float]) -> Iterator[tuple[float, T]]:
    """``(score, item)`` best first; each entry of ``items`` is ``(number, exact, item)`` where ``number``
    is the item's score when ``exact``, else an upper bound of ``score(item)``."""
    if all(exact for _, exact, _ in items):
        for number, _, item in sorted(items, key=_NUMBER, reverse=True):
            yield number, item
        return
    heap = [(-number, i, exact) for i, (number, exact, _) in enumerate(items)]
    heapq.heapify(heap)
    while heap:
        negated, i, exact = heap[0]
        if exact:
            heapq.heappop(heap)
            yield -negated, items[i][2]
        else:
            heapq.heapreplace(heap, (-score(items[i][2]), i, True))
