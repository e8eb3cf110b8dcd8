"""Whole tool outputs, indexed once each, bounded by bytes, so that finding a value in them costs O(1).

Argument values often sit in earlier outputs: an id in a listing, a price in a quote, a path in a
directory tree. An output is parsed once (:func:`output_index`, remembered for the most recent outputs up
to :data:`INDEXED_BYTES` of output text: a history of any length holds no more) into an
:class:`OutputIndex`: every JSON node with its path (``items[3].id``; list items also from the end,
``items[-1]``), walked until :data:`MAX_INDEX_BYTES` of scalar text, and the atoms
(:mod:`~forethought.predictors.patterns.text`) inside its text fields, tokenized up to
:data:`MAX_TOKEN_BYTES` in all. Each leaf is filed under *lookup keys*: forms that every transform of
:mod:`~forethought.predictors.patterns.derive_values` preserves (a string's alphanumeric characters,
lower-cased, whole or first / last word; a number's integer part; a date's ISO form; a text longer than
:data:`MAX_KEYED_BYTES` under itself, as a copy), so that explaining a value (which leaves give it?)
reads a few dict entries instead of every leaf. Of the atoms of a text field only those a rule can name
are kept (the first and last few of each kind).

Rules address list items by index only up to :data:`MAX_LIST_INDEX` (and from the end up to
:data:`MAX_FROM_END`), so only those items are walked; of every list the scalars of its first
:data:`~forethought.predictors.patterns.derive_lists.MAX_WALK_ITEMS` items are filed for the rules that walk
a list, with where each first sits, and the codes among a list of scalars (:mod:`derive_lists`). The parsed
document itself is not kept, and what is kept is held in strings and flat lists rather than a tuple per
item: an index leaves few objects for the garbage collector to visit. Nothing here knows about any
particular tool.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
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
from forethought.predictors.patterns.derive_values import DATE_FORMATS, value_key
from forethought.predictors.patterns.text import NUMBER_WORDS, Atom, output_atoms, parse_number

MAX_INDEX_BYTES = 512 * 1024
"""Scalar text walked per output; an output larger than this is indexed up to it."""
MAX_TOKEN_BYTES = 8 * 1024
"""Text of an output's string fields cut into atoms, in all (the rest of a longer field is not)."""
MAX_KEYED_BYTES = 2048
"""A list or object larger than this (roughly, in bytes) is not filed under its whole value."""
MIN_DATE_DIGITS = 5
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


_NOT_ALNUM = re.compile(r"[\W_]+")
_json_string = json.encoder.encode_basestring
"""What :func:`~forethought.predictors.patterns.derive_values.value_key` gives for a string."""


def alnum(text: str) -> str:
    """``text`` case-folded (upper-cased first: every case change maps to one form), only its word
    characters but ``_`` (what case and spelling changes keep)."""
    return _NOT_ALNUM.sub("", text.upper().casefold())


def _number_keys(number: int | float) -> tuple[str, ...]:
    """Lookup keys of a number a target may be: integer parts that round or floor to it."""
    if not abs(number) <= 1e15:  # (nan, inf and ints no float holds too)
        return ()
    base = math.floor(number)
    return (f"n:{base - 1}", f"n:{base}", f"n:{base + 1}")


@functools.lru_cache(maxsize=4096)
def _date_of(text: str) -> dt.date | None:
    """``text`` read as a date in one of :data:`DATE_FORMATS` (each has a four-digit year and a day)."""
    if len(text) > 24 or sum(ch.isdigit() for ch in text) < MIN_DATE_DIGITS:
        return None
    for fmt in DATE_FORMATS:
        try:
            return dt.datetime.strptime(text, fmt).date()
        except ValueError:
            continue
    return None


def date_of(text: str) -> dt.date | None:
    """``text`` read as a whole date in one of the spellings of
    :data:`~forethought.predictors.patterns.derive_values.DATE_FORMATS`, or None."""
    return _date_of(text)


def target_keys(value: Any) -> tuple[str, ...]:
    """The lookup keys under which a leaf that can give ``value`` (or ``[value]``) is filed."""
    single = value[0] if isinstance(value, list) and len(value) == 1 else None
    keys: list[str] = []
    for item in (value,) if single is None or isinstance(single, list | dict) else (value, single):
        if isinstance(item, str):
            keys.append("s:" + alnum(item))
            if len(item) > MAX_KEYED_BYTES:
                keys.append("x:" + item)  # as a long leaf is filed (:func:`_long_string_keys`)
            number = parse_number(item)
            if number is not None:
                keys.extend(_number_keys(number))
            date = _date_of(item)
            if date is not None:
                keys.append("d:" + date.isoformat())
        elif isinstance(item, int | float) and not isinstance(item, bool):
            keys.extend(_number_keys(item))
        else:
            keys.append("v:" + value_key(item))
    return tuple(dict.fromkeys(keys))


_NUMERIC = re.compile(r"\s*[-+]?\$?\s*[\d.]")
"""How a text that :func:`parse_number` reads as a number written in digits starts."""
MAX_NUMBER_WORD = 10


def _string_keys(text: str) -> list[str]:
    """The lookup keys of a short text (remembered joined in one string: a cached tuple would be one more
    object for the garbage collector to visit, per distinct text)."""
    return _joined_string_keys(text).split(_KEY_SEP)


_KEY_SEP = "\x1d"
"""Joins the lookup keys of one text (no key holds it: they are made of alphanumerics and digits)."""


@functools.lru_cache(maxsize=8192)
def _joined_string_keys(text: str) -> str:
    keys = ["s:" + alnum(text)]
    pieces = text.split()
    if len(pieces) > 1:
        keys.append("s:" + alnum(pieces[0]))
        keys.append("s:" + alnum(pieces[-1]))
    if _NUMERIC.match(text) or (len(text) <= MAX_NUMBER_WORD and text.strip().lower() in NUMBER_WORDS):
        number = parse_number(text)
        if number is not None and math.isfinite(number) and abs(number) <= 1e15:
            keys.append(f"n:{math.floor(number)}")
    return _KEY_SEP.join(dict.fromkeys(keys))


def _long_string_keys(text: str) -> tuple[str, ...]:
    """The lookup keys of a text longer than :data:`MAX_KEYED_BYTES`: the text itself (a long value is a
    copy, not a case change of one; reading every character to fold it would cost more than all the rest
    of the index) and the keys of its first and last words."""
    keys = ["x:" + text]
    head, tail = text.split(None, 1), text.rsplit(None, 1)
    if len(head) > 1:
        keys.append("s:" + alnum(head[0]))
        keys.append("s:" + alnum(tail[-1]))
    return tuple(dict.fromkeys(keys))


def _leaf_keys(leaf: Any) -> Sequence[str]:
    if isinstance(leaf, str):
        return _string_keys(leaf) if len(leaf) <= MAX_KEYED_BYTES else _long_string_keys(leaf)
    if isinstance(leaf, int | float) and not isinstance(leaf, bool):
        return (f"n:{math.floor(leaf)}",) if abs(leaf) <= 1e15 else ()  # (never inf, nan or past a float)
    return ("v:" + value_key(leaf),)


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

    paths: list[str] = field(default_factory=list)
    """The path of every node walked, containers too, in document order ..."""
    nodes: list[Any] = field(default_factory=list)
    """... and the node (two lists, not a tuple per node: fewer objects for the garbage collector)."""
    addressable: list[bool] = field(default_factory=list)
    """Per leaf: whether rules may name its path (list indices within reach)."""
    first_by_path: dict[str, Any] = field(default_factory=dict)
    last_by_path: dict[str, Any] = field(default_factory=dict)
    first_by_name: dict[str, Any] = field(default_factory=dict)
    first_path_by_name: dict[str, str] = field(default_factory=dict)
    by_key: dict[str, Sequence[int]] = field(default_factory=dict)
    """Lookup key -> positions in :attr:`leaves` of the addressable leaves filed under it."""
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
        return _Leaves(self.paths, self.nodes)

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
            found.update(self.by_key.get(key, ()))
        return sorted(found)

    def token_candidates(self, keys: tuple[str, ...]) -> list[TokenAtom]:
        out: dict[int, TokenAtom] = {}
        for key in keys:
            for token in self.tokens_by_key.get(key, ()):
                out.setdefault(id(token), token)
        return list(out.values())


def _walk(index: OutputIndex, value: Any) -> None:
    """File every node of ``value`` (depth first, in document order) until the byte budget is spent."""
    _Walk(index).visit("$", value, True, "$")


class _Walk:
    """One walk of an output (a class, not a closure: a recursive closure is a reference cycle that keeps
    the walk's locals until the garbage collector finds it)."""

    __slots__ = ("budget", "index")

    def __init__(self, index: OutputIndex) -> None:
        self.index = index
        self.budget = MAX_INDEX_BYTES

    def visit(self, path: str, node: Any, addressable: bool, name: str) -> int:
        """File ``node`` and what it holds; its size in bytes, roughly (containers: their contents')."""
        if self.budget <= 0:
            return MAX_KEYED_BYTES + 1  # not walked in full: too big to file whole
        index = self.index
        position = len(index.paths)
        index.paths.append(path)
        index.nodes.append(node)
        index.addressable.append(addressable)
        if path not in index.first_by_path:
            index.first_by_path[path] = node
        index.last_by_path[path] = node
        if name not in index.first_by_name:
            index.first_by_name[name] = node
            index.first_path_by_name[name] = path
        kind = node.__class__
        size = 2
        if kind is dict:
            prefix = path + "." if path != "$" else ""
            for k, v in node.items():
                size += len(k) + self.visit(prefix + str(k), v, addressable, str(k))
        elif kind is list:
            index.lists.file(path, node)
            base = path if path != "$" else ""
            shown = node[:MAX_LIST_INDEX] if addressable else ()
            for i, v in enumerate(shown):
                item = f"{base}[{i}]"
                size += self.visit(item, v, True, leaf_name(item))
            if len(node) > len(shown):
                size += MAX_KEYED_BYTES  # not every item walked: too big to file whole
            for back in range(1, min(len(node), MAX_FROM_END) + 1):
                item = f"{base}[-{back}]"
                self.visit(item, node[-back], addressable, leaf_name(item))
        else:
            size = len(node) if kind is str else 8
            self.budget -= size
        if addressable and (size <= MAX_KEYED_BYTES or (kind is not dict and kind is not list)):
            by_key = index.by_key
            for key in _leaf_keys(node):
                cast(list[int], by_key.setdefault(key, [])).append(position)
        return size


class _Leaves(Sequence[tuple[str, Any]]):
    """The paths and nodes of an index read as ``(path, node)`` pairs (a view: nothing is copied)."""

    def __init__(self, paths: list[str], nodes: list[Any]) -> None:
        self._paths = paths
        self._nodes = nodes

    @overload
    def __getitem__(self, i: int) -> tuple[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[tuple[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> tuple[str, Any] | Sequence[tuple[str, Any]]:
        if isinstance(i, slice):
            return list(zip(self._paths[i], self._nodes[i], strict=True))
        return self._paths[i], self._nodes[i]

    def __len__(self) -> int:
        return len(self._paths)


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
            keys = _string_keys(atom.text)
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
    # Frozen into tuples: a cached index then holds few objects the garbage collector must keep visiting.
    index.by_key = {key: tuple(found) for key, found in index.by_key.items()}
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
    return output_index(output).first_by_path


def first_leaf_by_name(output: str) -> Mapping[str, Any]:
    """Field name (:func:`leaf_name`) -> the first node with that name."""
    return output_index(output).first_by_name
