"""The lists of an output: where each scalar first sits, its scalars by field for walking, its codes.

A rule that *walks* a list (the next item, not yet used this turn, of the list the parameter's latest value
came from) needs, for every list of an output, where each scalar value first sits (the list, the item's
place, the field holding it) and the scalars of the following items; an abbreviation needs the codes among
a list of scalars. :class:`ListIndex` files both while an output is indexed
(:mod:`~forethought.predictors.patterns.derive_outputs`), for the first :data:`MAX_WALK_ITEMS` items of
each list, as strings and flat lists rather than a tuple per item (an output's index then leaves few objects
for the garbage collector to visit), and reads a list whole again from the output's text only when asked.
Nothing here knows about any particular tool.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from forethought.predictors.patterns.derive_values import value_key
from forethought.predictors.patterns.mentions import is_code

MAX_LIST_INDEX = 12
"""List items are addressed by rules as [0] .. [11] ..."""
MAX_FROM_END = 2
"""... and as [-1], [-2]."""
MAX_WALK_ITEMS = 2000
"""Items of one list whose values are noted for walking it."""
MAX_CODE_ITEMS = 256
"""Items of a list of scalars looked at for codes."""

_json_string = json.encoder.encode_basestring
"""What :func:`~forethought.predictors.patterns.derive_values.value_key` gives for a string."""

def walk_key(value: Any) -> str | None:
    """The key a scalar is found by in a list (strings compared lower-cased); None for a container."""
    if value.__class__ is str:
        return value_key(value.lower())
    return None if isinstance(value, list | dict) else value_key(value)


_PLACE_SEP = "\x1f"
_ITEM = "\x00"
"""The field name written for a scalar that is a list's item itself."""


def place(path: str, position: int, name: str | None) -> str:
    """A place in a list as one string: the path's length, the path, the position, the field (any text)."""
    return f"{len(path)}{_PLACE_SEP}{path}{position}{_PLACE_SEP}{_ITEM if name is None else name}"


def unplace(place: str) -> tuple[str, int, str | None]:
    length, rest = place.split(_PLACE_SEP, 1)
    path, rest = rest[:int(length)], rest[int(length):]
    position, name = rest.split(_PLACE_SEP, 1)
    return path, int(position), None if name == _ITEM else name


class Places(Mapping[str, tuple[str, int, str | None]]):
    """The places of an index read as (path, position, field) (a view: nothing is copied)."""

    def __init__(self, places: Mapping[str, str]) -> None:
        self._places = places

    def __getitem__(self, key: str) -> tuple[str, int, str | None]:
        return unplace(self._places[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self._places)

    def __len__(self) -> int:
        return len(self._places)


def collect_lists(node: Any, path: str, addressable: bool, wanted: set[str], out: dict[str, list[Any]]) -> None:
    """The list nodes of ``wanted`` paths in a parsed output, found by the paths :class:`_Walk` gives them."""
    kind = node.__class__
    if kind is dict:
        prefix = path + "." if path != "$" else ""
        for k, v in node.items():
            if v.__class__ is dict or v.__class__ is list:
                collect_lists(v, prefix + str(k), addressable, wanted, out)
    elif kind is list:
        if path in wanted:
            out.setdefault(path, node)
        base = path if path != "$" else ""
        for i, v in enumerate(node[:MAX_LIST_INDEX] if addressable else ()):
            if v.__class__ is dict or v.__class__ is list:
                collect_lists(v, f"{base}[{i}]", True, wanted, out)
        for back in range(1, min(len(node), MAX_FROM_END) + 1):
            v = node[-back]
            if v.__class__ is dict or v.__class__ is list:
                collect_lists(v, f"{base}[-{back}]", addressable, wanted, out)




@dataclass(slots=True)
class ListIndex:
    """The lists of one output: where each scalar first sits, the scalars by field, the codes."""

    list_paths: list[str] = field(default_factory=list)
    """The paths of the list nodes filed, in document order."""
    places: dict[str, str] = field(default_factory=dict)
    """:func:`walk_key` of a scalar -> where it first sits in a list, as :func:`place` writes it (a string:
    a dict of strings is one object the garbage collector never visits, a tuple per item would not be)."""
    columns: dict[str, dict[str | None, tuple[Any, ...]]] = field(default_factory=dict)
    """Path of a list -> per field of its items (None: the items themselves) its scalars item by item (None
    where an item has none, or a container)."""
    code_lists: list[tuple[int, int, int, tuple[tuple[int, str], ...]]] = field(default_factory=list)
    """Per list of scalars: its depth, its place in document order, its length, the codes among its first
    :data:`MAX_CODE_ITEMS` items with their places."""

    def in_list(self, key: str) -> tuple[str, int, str | None] | None:
        """Where the scalar of :func:`walk_key` ``key`` first sits in a list: the list's path, the item's
        place, the field of the item holding it (None: the item itself); None when in none."""
        found = self.places.get(key)
        return None if found is None else unplace(found)

    def walk_values(self, path: str, name: str | None) -> Sequence[Any]:
        """The scalars a walk of the list at ``path`` reads, item by item: the item itself (``name`` None),
        else its field ``name``."""
        return self.columns.get(path, {}).get(name, ())

    def lists_at(self, text: str, paths: Iterable[str]) -> dict[str, list[Any]]:
        """The list nodes at ``paths`` (of :attr:`list_paths`), whole, read again from the output's ``text``
        (not kept: the caller keeps what it needs)."""
        try:
            value = json.loads(text)
        except ValueError:
            value = text if text.strip() else None
        found: dict[str, list[Any]] = {}
        collect_lists(value, "$", True, set(paths), found)
        return found

    def file(self, path: str, node: list[Any]) -> None:
        """Note where each scalar of a list (or of its items' fields) first sits, for walking the list, and the
        codes among a list of scalars' first items (what an abbreviation may stand for)."""
        self.list_paths.append(path)
        if node and node[0].__class__ is not dict and node[0].__class__ is not list:
            codes = tuple((i, item) for i, item in enumerate(node[:MAX_CODE_ITEMS]) if is_code(item))
            depth = path.count("[") + path.count(".")
            self.code_lists.append((depth, len(self.code_lists), len(node), codes))
        in_lists = self.places
        head = f"{len(path)}{_PLACE_SEP}{path}"  # _place, written out
        shown = node[:MAX_WALK_ITEMS]
        columns: dict[str | None, list[Any]] = {}
        for i, item in enumerate(shown):
            pairs = item.items() if item.__class__ is dict else ((None, item),)
            at = f"{head}{i}{_PLACE_SEP}"
            for name, value in pairs:
                # walk_key, written out (this loop runs over every field of every item of every list):
                kind = value.__class__
                if kind is str:
                    key = _json_string(value.lower())
                elif kind is list or kind is dict:
                    continue
                else:
                    key = value_key(value)
                column = columns.get(name)
                if column is None:
                    column = columns[name] = [None] * len(shown)
                column[i] = value
                if key not in in_lists:
                    in_lists[key] = at + (_ITEM if name is None else name)
        if columns:  # as tuples: of scalars only, the garbage collector stops visiting them at its first pass
            self.columns.setdefault(path, {name: tuple(column) for name, column in columns.items()})
