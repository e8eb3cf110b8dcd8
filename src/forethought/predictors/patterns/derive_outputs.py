"""Whole tool outputs, indexed once each, bounded by bytes, so that finding a value in them costs O(1).

Argument values often sit in earlier outputs: an id in a listing, a price in a quote, a path in a
directory tree. An output is parsed once (:func:`output_index`, remembered for the most recent outputs up
to :data:`INDEXED_BYTES` of output text: a history of any length holds no more) into an
:class:`OutputIndex`: every JSON node with its path (``items[3].id``; list items also from the end,
``items[-1]``), walked until :data:`MAX_INDEX_BYTES` of scalar text, and the atoms
(:mod:`~forethought.predictors.patterns.text`) inside its text fields, tokenized up to
:data:`MAX_TOKEN_BYTES` in all. Each leaf is filed under *lookup keys* (:mod:`derive_lookup`): forms that
every transform of :mod:`~forethought.predictors.patterns.derive_values` preserves (a string's alphanumeric
characters, lower-cased, whole or first / last word; a number's integer part; a date's ISO form; a text
longer than :data:`MAX_KEYED_BYTES` under itself, as a copy), so that explaining a value (which leaves give
it?) reads a few dict entries instead of every leaf. Of the atoms of a text field only those a rule can name
are kept (the first and last few of each kind).

Rules address list items by index only up to :data:`MAX_LIST_INDEX` (and from the end up to
:data:`MAX_FROM_END`), so only those items are walked; of every list the scalars of its first
:data:`~forethought.predictors.patterns.derive_lists.MAX_WALK_ITEMS` items are filed for the rules that walk
a list, with where each first sits, and the codes among a list of scalars (:mod:`derive_lists`). The parsed
document itself is not kept: a container larger than :data:`MAX_KEYED_BYTES` (the document, a long listing)
is held as the route of keys and indices that leads to it and read again from the text when a rule asks
for it (rarely: no rule is learned from one), so the records past what rules address are freed at once.
What is kept is held in strings, numbers and flat tuples of them (positions, not nodes, in its tables): an
index leaves few objects for the garbage collector to visit (each one it keeps is visited again by the
young-generation passes it lives through, the cost that set the tail of learning's CPU time). Nothing here
knows about any particular tool.
"""

from __future__ import annotations

import array
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast, overload

from forethought.predictors.patterns.derive_index import MAX_FROM_END as ATOM_FROM_END
from forethought.predictors.patterns.derive_index import MAX_ORDINAL as ATOM_ORDINAL
from forethought.predictors.patterns.derive_lists import (
    MAX_FROM_END,
    MAX_LIST_INDEX,
    ListIndex,
    Places,
)
from forethought.predictors.patterns.derive_lookup import (
    MAX_KEYED_BYTES,
    leaf_keys,
    string_keys,
)
from forethought.predictors.patterns.text import Atom, output_atoms

MAX_INDEX_BYTES = 512 * 1024
"""Scalar text walked per output; an output larger than this is indexed up to it."""
MAX_TOKEN_BYTES = 8 * 1024
"""Text of an output's string fields cut into atoms, in all (the rest of a longer field is not)."""
OUTPUT_INDEXES = 4096
"""Outputs whose index is remembered, at most (the latest outputs of the sessions served) ..."""
INDEXED_BYTES = 8 * 1024 * 1024
"""... and at most this much output text in all (an index takes a few times its output's size)."""
TOKEN_KINDS = ("quoted", "file", "id", "url", "path", "number", "date", "hashtag", "mention", "email")
"""Atom kinds looked for inside an output's text fields (those
:func:`~forethought.predictors.patterns.text.output_atoms` finds)."""


def leaf_name(path: str) -> str:
    """The last field name of a leaf's path (``invoice.booking_id`` -> ``booking_id``)."""
    return path.rsplit(".", 1)[-1]


@dataclass(frozen=True, slots=True)
class TokenAtom:
    """An atom inside an output's text field: the field's path, its kind and place among that kind's atoms
    of the field (``from_end`` None when the field was tokenized only in part)."""

    path: str
    kind: str
    index: int
    from_end: int | None
    atom: Atom


@dataclass(slots=True)
class OutputIndex:
    """One output's leaves, by path, by field name and by lookup key; the atoms of its text fields."""

    paths: Sequence[str] = field(default_factory=list)
    """The path of every node walked, containers too, in document order ..."""
    nodes: Sequence[Any] = field(default_factory=list)
    """... and the node if a scalar, None if a container (:attr:`containers`): two sequences of scalars, not
    a tuple per node, which the garbage collector never visits. Read a node with :meth:`node`."""
    containers: dict[int, Any] = field(default_factory=dict)
    """Position -> the container there; one larger than :data:`MAX_KEYED_BYTES` as its route (a tuple of
    keys and indices: parsed JSON holds none)."""
    addressable: Sequence[bool] = field(default_factory=list)
    """Per leaf: whether rules may name its path (list indices within reach)."""
    first_by_path: dict[str, int] = field(default_factory=dict)
    """Path -> the position of the first node with that path (:func:`first_leaf_by_path` reads the nodes)."""
    first_by_name: dict[str, int] = field(default_factory=dict)
    """Field name (:func:`leaf_name`) -> the position of the first node with that name."""
    by_key: dict[str, int | bytes] = field(default_factory=dict)
    """Lookup key -> position in :attr:`leaves` of the addressable leaf filed under it, or the positions of
    several (native ints packed in bytes)."""
    tokens: dict[str, dict[str, tuple[Atom, ...]]] = field(default_factory=dict)
    """Path of a text field -> its atoms by kind (the whole field excluded), for the fields tokenized."""
    truncated: set[str] = field(default_factory=set)
    """Text fields tokenized only in part."""
    tokens_by_key: dict[str, Sequence[TokenAtom]] = field(default_factory=dict)
    lists: ListIndex = field(default_factory=ListIndex)
    """Its lists: where each scalar first sits, the scalars by field for walking, the codes
    (:mod:`derive_lists`)."""
    text: str = ""
    """The output (the parsed document is not kept: its every record would be an object for the garbage
    collector to visit; a list is read again from the text when asked)."""
    facts: dict[str, Any] = field(default_factory=dict)
    """What other modules work out once per output (its first date, the codes of its lists), kept with the
    index so that it is forgotten with it."""

    @property
    def leaves(self) -> Sequence[tuple[str, Any]]:
        """``(path, node)`` for every node walked, containers too, in document order."""
        return _Leaves(self)

    def node(self, position: int) -> Any:
        """The node at ``position`` (of :attr:`paths`); a large container is read again from the output (not
        kept: the caller keeps what it needs)."""
        kept = self.containers.get(position)
        if kept is None:
            return self.nodes[position]
        if kept.__class__ is not tuple:
            return kept
        node = json.loads(self.text)
        for step in kept:
            node = node[step]
        return node

    def first_path_with_name(self, name: str) -> str | None:
        """The path of the first node whose field name is ``name``, or None."""
        position = self.first_by_name.get(name)
        return None if position is None else self.paths[position]

    @property
    def in_lists(self) -> Mapping[str, tuple[str, int, str | None]]:
        """:func:`walk_key` of a scalar -> where it first sits in a list: the list's path, the item's place,
        and the field of the item holding it (None: the item itself)."""
        return Places(self.lists.places)

    def in_list(self, key: str) -> tuple[str, int, str | None] | None:
        """Where the scalar of :func:`walk_key` ``key`` first sits in a list (:attr:`in_lists`), or None."""
        return self.lists.in_list(key)

    def walk_values(self, path: str, name: str | None) -> Sequence[Any]:
        """The scalars a walk of the list at ``path`` reads (:meth:`ListIndex.walk_values`)."""
        return self.lists.walk_values(path, name)

    def lists_at(self, paths: Iterable[str]) -> dict[str, list[Any]]:
        """The list nodes at ``paths``, whole, read again from the output (:meth:`ListIndex.lists_at`)."""
        return self.lists.lists_at(self.text, paths)

    def candidates(self, keys: tuple[str, ...]) -> list[int]:
        """Positions of the addressable leaves filed under any of ``keys``, in document order."""
        found: set[int] = set()
        for key in keys:
            filed = self.by_key.get(key)
            if isinstance(filed, int):
                found.add(filed)
            elif filed is not None:
                found.update(memoryview(filed).cast("i"))
        return sorted(found)

    def token_candidates(self, keys: tuple[str, ...]) -> list[TokenAtom]:
        out: dict[int, TokenAtom] = {}
        for key in keys:
            for token in self.tokens_by_key.get(key, ()):
                out.setdefault(id(token), token)
        return list(out.values())


def _walk(index: OutputIndex, value: Any) -> None:
    """File every node of ``value`` (depth first, in document order) until the byte budget is spent."""
    _Walk(index).visit("$", value, True, "$", ())


_CANONICAL = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"))
"""What :func:`~forethought.predictors.patterns.derive_values.value_key` writes for parsed JSON without floats."""


class _Walk:
    """One walk of an output (a class, not a closure: a recursive closure is a reference cycle that keeps
    the walk's locals until the garbage collector finds it)."""

    __slots__ = ("budget", "floats", "index")

    def __init__(self, index: OutputIndex) -> None:
        self.index = index
        self.budget = MAX_INDEX_BYTES
        self.floats = 0
        """Floats walked so far: a container with none under it is keyed by one C encoding, without the
        normalising copy :func:`value_key` makes (it writes a whole float as an int)."""

    def visit(self, path: str, node: Any, addressable: bool, name: str, route: tuple[str | int, ...]) -> int:
        """File ``node`` (reached from the document by ``route``: only a container's is kept, so a leaf is
        handed its parent's) and what it holds; its size in bytes, roughly (containers: their contents')."""
        if self.budget <= 0:
            return MAX_KEYED_BYTES + 1  # not walked in full: too big to file whole
        index = self.index
        position = len(index.paths)
        cast(list[str], index.paths).append(path)
        kind = node.__class__
        if kind is dict or kind is list:
            cast(list[Any], index.nodes).append(None)
            index.containers[position] = node
        else:
            cast(list[Any], index.nodes).append(node)
        cast(list[bool], index.addressable).append(addressable)
        if path not in index.first_by_path:
            index.first_by_path[path] = position
        if name not in index.first_by_name:
            index.first_by_name[name] = position
        size = 2
        floats = self.floats
        if kind is dict:
            prefix = path + "." if path != "$" else ""
            for k, v in node.items():
                inner = (*route, k) if v.__class__ is dict or v.__class__ is list else route
                size += len(k) + self.visit(prefix + str(k), v, addressable, str(k), inner)
        elif kind is list:
            index.lists.file(path, node)
            base = path if path != "$" else ""
            shown = node[:MAX_LIST_INDEX] if addressable else ()
            for i, v in enumerate(shown):
                item = f"{base}[{i}]"
                inner = (*route, i) if v.__class__ is dict or v.__class__ is list else route
                size += self.visit(item, v, True, leaf_name(item), inner)
            if len(node) > len(shown):
                size += MAX_KEYED_BYTES  # not every item walked: too big to file whole
            for back in range(1, min(len(node), MAX_FROM_END) + 1):
                item = f"{base}[-{back}]"
                v = node[-back]
                inner = (*route, -back) if v.__class__ is dict or v.__class__ is list else route
                self.visit(item, v, addressable, leaf_name(item), inner)
        else:
            size = len(node) if kind is str else 8
            self.budget -= size
            if kind is float:
                self.floats += 1
        if size > MAX_KEYED_BYTES and (kind is dict or kind is list):
            # Kept as its route: the records under it that no rule names are not kept with the index.
            index.containers[position] = route
        elif addressable:
            by_key = cast(dict[str, list[int]], index.by_key)  # lists while walking, packed at the end
            if (kind is dict or kind is list) and self.floats == floats:  # (filed whole: every item walked)
                by_key.setdefault("v:" + _CANONICAL.encode(node), []).append(position)
            else:
                for key in leaf_keys(node):
                    by_key.setdefault(key, []).append(position)
        return size


class _Leaves(Sequence[tuple[str, Any]]):
    """The paths and nodes of an index read as ``(path, node)`` pairs (a view: nothing is copied)."""

    def __init__(self, index: OutputIndex) -> None:
        self._index = index

    @overload
    def __getitem__(self, i: int) -> tuple[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[tuple[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> tuple[str, Any] | Sequence[tuple[str, Any]]:
        index = self._index
        if isinstance(i, slice):
            return [(index.paths[n], index.node(n)) for n in range(len(index.paths))[i]]
        return index.paths[i], index.node(i)

    def __len__(self) -> int:
        return len(self._index.paths)


class _Nodes(Mapping[str, Any]):
    """A path or name table of an index read as the nodes it points at (a view)."""

    def __init__(self, index: OutputIndex, table: dict[str, int]) -> None:
        self._index = index
        self._table = table

    def __getitem__(self, key: str) -> Any:
        return self._index.node(self._table[key])

    def __contains__(self, key: object) -> bool:
        return key in self._table

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)


def _tokenize_fields(index: OutputIndex) -> None:
    budget = MAX_TOKEN_BYTES
    for position, (path, leaf) in enumerate(zip(index.paths, index.nodes, strict=True)):
        if budget <= 0:
            return
        if (leaf.__class__ is str and index.addressable[position] and path not in index.tokens
                and _worth_tokenizing(leaf)):
            text = leaf[:budget]
            budget -= len(text)
            if len(text) < len(leaf):
                index.truncated.add(path)
            _tokenize(index, path, leaf, text)


_TOKEN_HINT = re.compile(r"[\d'\"`./#@_\-‘“]")
"""What a text holds if an atom of :data:`TOKEN_KINDS` other than a number word is in it."""


def _worth_tokenizing(text: str) -> bool:
    """Whether a text field may hold atoms other than itself: words apart (one token, an id or a date, is
    filed whole already) and a digit, quote or separator."""
    return _SPACE.search(text) is not None and _TOKEN_HINT.search(text) is not None


_SPACE = re.compile(r"\s")


def _tokenize(index: OutputIndex, path: str, leaf: str, text: str) -> None:
    # Rules name an atom of a field as one of the first ATOM_ORDINAL or last ATOM_FROM_END of its kind: only
    # those are kept (the first ones, then the last ones, so that [n] and [-1 - n] still pick them).
    found = output_atoms(text, leaf, ATOM_ORDINAL, ATOM_FROM_END)
    index.tokens[path] = {kind: tuple(atom for _, atom in kept) for kind, (_, kept) in found.items()}
    whole = path not in index.truncated
    for kind, (count, kept) in found.items():
        for i, atom in kept:
            from_end = count - 1 - i if whole else None
            if i >= ATOM_ORDINAL and (from_end is None or from_end >= ATOM_FROM_END):
                continue  # no rule can name it
            token = TokenAtom(path, kind, i, from_end, atom)
            keys = string_keys(atom.text)
            if atom.date is not None:
                keys.append("d:" + atom.date.isoformat())
            for key in dict.fromkeys(keys):
                cast(list[TokenAtom], index.tokens_by_key.setdefault(key, [])).append(token)


def _index(output: str) -> OutputIndex:
    """The index of one output, worked out."""
    index = OutputIndex()
    try:
        value = json.loads(output)
    except ValueError:
        value = output if output.strip() else None
        if value is None:
            return index
    index.text = output
    _walk(index, value)
    _tokenize_fields(index)
    # Frozen into tuples: a cached index then holds few objects the garbage collector must keep visiting
    # (a tuple of strings, numbers and booleans it stops tracking at its first pass).
    index.paths, index.nodes, index.addressable = tuple(index.paths), tuple(index.nodes), tuple(index.addressable)
    # One position as itself, several packed in bytes: a table of numbers and bytes is one the garbage
    # collector never tracks, however many keys it has.
    index.by_key = {key: found[0] if len(found) == 1 else array.array("i", found).tobytes()
                    for key, found in cast(dict[str, list[int]], index.by_key).items()}
    index.tokens_by_key = {key: tuple(found) for key, found in index.tokens_by_key.items()}
    return index


class _RecentIndexes:
    """The indexes of the latest outputs asked for, bounded by count and by the bytes of their outputs."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._kept: OrderedDict[str, OutputIndex] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __call__(self, output: str) -> OutputIndex:
        with self._lock:
            index = self._kept.get(output)
            if index is not None:
                self._kept.move_to_end(output)
                return index
        index = _index(output)
        with self._lock:
            if output not in self._kept:
                self._kept[output] = index
                self._bytes += len(output)
                while self._kept and (len(self._kept) > self.max_entries or self._bytes > self.max_bytes):
                    dropped, _ = self._kept.popitem(last=False)
                    self._bytes -= len(dropped)
        return index

    def holds(self, output: str) -> bool:
        """Whether the index of ``output`` is kept (asking does not make it recent)."""
        with self._lock:
            return output in self._kept

    def cache_clear(self) -> None:
        with self._lock:
            self._kept.clear()
            self._bytes = 0

    @property
    def kept_bytes(self) -> int:
        """The bytes of output text whose indexes are kept."""
        return self._bytes


output_index = _RecentIndexes(OUTPUT_INDEXES, INDEXED_BYTES)
"""The index of one output (JSON, or else plain text as one field ``$``), worked out once while it is among
the latest outputs asked for (:data:`OUTPUT_INDEXES`, :data:`INDEXED_BYTES`)."""


def first_leaf_by_path(output: str) -> Mapping[str, Any]:
    """Path -> the first node with that path."""
    index = output_index(output)
    return _Nodes(index, index.first_by_path)


def first_leaf_by_name(output: str) -> Mapping[str, Any]:
    """Field name (:func:`leaf_name`) -> the first node with that name."""
    index = output_index(output)
    return _Nodes(index, index.first_by_name)
