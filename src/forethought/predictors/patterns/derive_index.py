"""Lookups over what derivation rules read, worked out once per text or output and remembered.

A rule is replayed at every step of a session, often on the same texts: the latest user message stays
the same for a whole turn, and an output is read again at every later step. This module keeps, per text,
its atoms by kind and an index from locators to atoms, and the values rules reading only a message give
on it (outputs have their own index: :mod:`derive_outputs`). Everything here is a pure function of its
argument, cached with a bounded LRU.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Mapping
from typing import Any

from forethought.predictors.patterns.derive_values import apply_transform, value_key
from forethought.predictors.patterns.text import ATOM_KINDS, ORDINAL_KINDS, Atom, text_atoms

MAX_ORDINAL = 4
"""Atoms are addressed as first .. fourth from the start."""
MAX_FROM_END = 2
MESSAGE_MEMOS = 64
"""Messages whose rule values are remembered: the current and previous messages of the sessions served."""
MESSAGE_INDEXES = 64
"""Messages whose atom index is remembered."""


@functools.lru_cache(maxsize=1024)
def atoms_by_kind(text: str) -> Mapping[str, tuple[Atom, ...]]:
    """The atoms of ``text`` by kind (every kind of :data:`ATOM_KINDS` present), in order."""
    grouped: dict[str, list[Atom]] = {kind: [] for kind in ATOM_KINDS}
    for atom in text_atoms(text):
        grouped[atom.kind].append(atom)
    return {kind: tuple(atoms) for kind, atoms in grouped.items()}


RUN_KINDS = ("quoted", "file", "number", "id", "hashtag", "mention", "url", "path", "date", "proper", "email")
"""Kinds whose atoms form enumerations."""
MAX_RUNS = 4
"""Enumerations of a kind addressed from the start (and from the end)."""
_SEPARATOR = re.compile(r"[\s,;&/'\"‘’“”()]*(?:(?:and|or|plus|then)\b[\s,;'\"‘’“”()]*)?", re.I)
"""What may stand between two items of an enumeration: punctuation, quotes and one "and" / "or"."""


@functools.lru_cache(maxsize=MESSAGE_INDEXES)
def atom_runs(text: str) -> Mapping[str, tuple[tuple[Atom, ...], ...]]:
    """The enumerations of ``text`` by kind: runs of two or more atoms of one kind with nothing between
    them but separators ("'Travel' and 'Adventure'", "a.txt, b.txt or c.txt"), in order."""
    out: dict[str, tuple[tuple[Atom, ...], ...]] = {}
    for kind in RUN_KINDS:
        atoms = atoms_by_kind(text).get(kind, ())
        runs: list[tuple[Atom, ...]] = []
        run: list[Atom] = []
        for atom in atoms:
            if run:
                found = text.find(run[-1].text, run[-1].start)  # a quoted atom starts at its quote
                gap_start = found + len(run[-1].text)
                gap = text[gap_start:atom.start] if found >= 0 and gap_start <= atom.start else None
                if gap is None or _SEPARATOR.fullmatch(gap) is None:
                    if len(run) > 1:
                        runs.append(tuple(run))
                    run = []
            run.append(atom)
        if len(run) > 1:
            runs.append(tuple(run))
        if runs:
            out[kind] = tuple(runs)
    return out


@functools.lru_cache(maxsize=MESSAGE_INDEXES)
def atom_index(text: str) -> Mapping[tuple[str, ...], Atom | None]:
    """Locator -> atom (None: no such atom) for the locators rules use on a message: (kind, ``i`` / ``r``,
    n) the n-th atom of an ordinal kind from the start / end (every n up to the count of atoms, and at
    least up to what rules address), (kind, ``b`` / ``a``, cue word) the first just after / before that
    word (a cue word not listed has no atom). Other locators are not listed."""
    index: dict[tuple[str, ...], Atom | None] = {}
    for kind, atoms in atoms_by_kind(text).items():
        count = len(atoms)
        for n in range(max(count, MAX_ORDINAL, MAX_FROM_END)) if kind in ORDINAL_KINDS else ():
            index[(kind, "i", f"{n}")] = atoms[n] if n < count else None
            index[(kind, "r", f"{n}")] = atoms[-1 - n] if n < count else None
        for atom in atoms:
            if (key := (kind, "b", atom.before)) not in index:
                index[key] = atom
            if (key := (kind, "a", atom.after)) not in index:
                index[key] = atom
    return index


@functools.lru_cache(maxsize=MESSAGE_MEMOS)
def message_memo(text: str) -> dict[str, tuple[Any, str] | None]:
    """Rule key -> what a rule reading only the message ``text`` gives (the same at every step of a turn):
    a dict shared by every caller, filled by them."""
    return {}


@functools.lru_cache(maxsize=8192)
def atom_value(text: str, date: dt.date | dt.time | None, transform: str, wrap: bool) -> tuple[Any, str] | None:
    """An atom's value under ``transform`` (in a list if ``wrap``) with its value key, or None."""
    value = apply_transform(transform, text, date)
    if value is None:
        return None
    if wrap:
        value = [value]
    return value, value_key(value)


@functools.lru_cache(maxsize=8192)
def atom_keys(text: str, number: float | None) -> frozenset[str]:
    """The value keys an atom stands for: its text (lower-cased) and, if it is one, its number."""
    keys = {value_key(text.lower())}
    if number is not None:
        keys.add(value_key(number))
    return frozenset(keys)
