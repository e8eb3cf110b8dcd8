"""Atoms: the candidate argument values a piece of text offers, each with where it sits.

Argument values mostly come from the user's words or from earlier tool outputs, rarely verbatim as a
whole message: a file name in quotes, a number with a thousands separator, a date written out in words,
a hashtag, an identifier such as ``USR003``. :func:`text_atoms` cuts a text into such :class:`Atom`
values, each tagged with its kind, its order among atoms of that kind and the words around it (its cues),
so a derivation rule can say "the second quoted string" or "the file name after 'to'" without knowing
anything about the workload.

Everything here is plain English text handling; nothing knows about any particular tool.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

ATOM_KINDS = ("quoted", "file", "number", "id", "hashtag", "mention", "url", "path", "date", "compound", "proper",
              "word", "email")
"""Kinds of atom, from most to least specific. ``word`` atoms are addressed only by their cues."""

_KIND_RANK = {kind: i for i, kind in enumerate(ATOM_KINDS)}
"""Kind -> its place in :data:`ATOM_KINDS` (the order of :func:`text_atoms`)."""
ORDINAL_KINDS = frozenset(ATOM_KINDS) - {"word"}
"""Kinds whose atoms are also addressed by position (first, second, last...)."""

MAX_ATOM_CHARS = 400
"""Longer spans are never argument values worth guessing."""
NEIGHBOUR_CHARS = 40
"""How far the cue words of an atom may be from it."""

_WORD = re.compile(r"[A-Za-z0-9][\w'\-]*")
_QUOTED = [
    # Single quotes: an apostrophe between letters inside ("'I've done it'") does not close the quote, a
    # closing quote may follow sentence punctuation straight before a word ("'Done!'said"), and a typed
    # quote may close a curly one or the other way round.
    re.compile(r"(?<![\w])['‘]((?:[^'’\n]|(?<=\w)['’](?=\w))+?)(?:['’](?![\w])|(?<=[.?!])['’])"),
    re.compile(r'"([^"\n]+?)"'),
    re.compile(r"[‘]([^’\n]+?)[’]"),
    re.compile(r"[“]([^”\n]+?)[”]"),
    re.compile(r"`([^`\n]+?)`"),
]
_FILE = re.compile(r"(?<![\w/.\-])([\w\-]+(?:\.[\w\-]+)*\.[A-Za-z][A-Za-z0-9]{0,6})(?![\w\-])")
_NUMBER = re.compile(r"(?<![\w.])[-+]?\$?(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(%?)(?![\w])")
_ID = re.compile(r"(?<![\w\-@#/.])([A-Za-z0-9]+(?:[_\-@][A-Za-z0-9]+)+|[A-Za-z]+\d[A-Za-z0-9]*|\d+[A-Za-z][A-Za-z0-9]*)"
                 r"(?![\w\-@])")
_TAG = re.compile(r"(?<![\w])([#@][A-Za-z0-9_]+)")
_FILE_HINT = re.compile(r"\.[A-Za-z]")
"""What every file name matched by _FILE has: a dot before a letter."""
_EMAIL = re.compile(r"(?<![\w.+\-])([\w.+\-]+@[\w\-]+(?:\.[\w\-]+)+)(?![\w\-@])")
"""An e-mail address (a trailing full stop is the sentence's)."""
_URL = re.compile(r"\b(?:https?|ftp)://[^\s'\"<>]+[^\s'\"<>.,;:!?)]")
_PATH = re.compile(r"(?<![\w])((?:~|\.{1,2})?/[\w.\-]+(?:/[\w.\-]+)*/?|[\w.\-]+(?:/[\w.\-]+)+/?)")
_NAME_WORD = r"[A-Z][a-zA-Z0-9&\-]*(?:['’][A-Z][a-zA-Z]*)*"
"""A capitalised word of a name, with an apostrophe before a capital inside it ("O'Brien", "D'Angelo"; not
"I've" or a possessive)."""
_CAPITALISED = rf"{_NAME_WORD}(?:\s+{_NAME_WORD})*"
_COMPOUND = re.compile(rf"\b((?:\d+\s+)?{_CAPITALISED}(?:,\s+{_CAPITALISED})+(?:\s+\d{{3,}})?)")
"""Capitalised names joined by commas, maybe with a leading and a trailing number: an address such as
"12 Elm St, Springfield, IL 62704", a place such as "Paris, France"."""
_QUOTES_AND_SPACE = " \t\r\n'\"‘’“”()"


def _opens_sentence(text: str, start: int) -> bool:
    """Whether the word at ``start`` opens a sentence (only spaces, quotes and brackets after the start of
    ``text`` or after a sentence's end)."""
    before = text[max(0, start - 8):start].rstrip(_QUOTES_AND_SPACE)
    if not before:
        return start <= 8 or not text[:start].rstrip(_QUOTES_AND_SPACE)
    return before[-1] in ".!?:;\n"


_PROPER = re.compile(rf"\b({_NAME_WORD}(?:\s+(?:of\s+|the\s+|de\s+)?{_NAME_WORD})*\.?)")

_MONTHS = {name: i + 1 for i, name in enumerate(
    ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
     "november", "december"])}
_MONTHS.update({name[:3]: i for name, i in list(_MONTHS.items())})
_MONTHS["sept"] = 9
_MONTH_RE = "|".join(sorted(_MONTHS, key=len, reverse=True))
_ORD = r"(\d{1,2})(?:st|nd|rd|th)?"
_DATES: list[tuple[re.Pattern[str], tuple[str, str, str]]] = [
    (re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})(?:\b|(?=T\d))"), ("y", "m", "d")),
    (re.compile(r"\b(\d{4})/(\d{1,2})/(\d{1,2})\b"), ("y", "m", "d")),
    (re.compile(r"\b(\d{1,2})/(\d{1,2})(?:/|,\s*)(\d{4})\b"), ("m", "d", "y")),  # 10/15/2026, 09/10, 2026
    (re.compile(rf"\b({_MONTH_RE})\.?\s+{_ORD},?\s+(\d{{4}})\b", re.I), ("M", "d", "y")),
    (re.compile(rf"\b{_ORD}(?:\s+of)?\s+({_MONTH_RE})\.?,?\s+(\d{{4}})\b", re.I), ("d", "M", "y")),
]

_YEAR = re.compile(r"\d{4}")
"""What every date matched by _DATES has: a four-digit year."""

_NUMBER_WORDS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20, "thirty": 30,
    "forty": 40, "fifty": 50, "hundred": 100, "thousand": 1000, "once": 1, "twice": 2, "single": 1,
    "double": 2, "half": 0.5, "dozen": 12,
}

NUMBER_WORDS = frozenset(_NUMBER_WORDS)
"""Words :func:`parse_number` reads as numbers."""

STOPWORDS = frozenset({
    "a", "an", "the", "and", "or", "but", "if", "of", "to", "in", "on", "at", "by", "for", "with", "from", "as",
    "is", "are", "was", "were", "be", "been", "being", "it", "its", "this", "that", "these", "those", "i", "me",
    "my", "we", "our", "you", "your", "he", "she", "they", "them", "their", "his", "her", "do", "does", "did", "so",
    "than", "then", "there", "here", "what", "which", "who", "whom", "whose", "when", "where", "how", "can",
    "could", "would", "should", "will", "shall", "may", "might", "must", "please", "also", "just", "into", "onto",
    "about", "up", "down", "out", "over", "under", "again", "any", "all", "some", "each", "no", "not", "only",
    "very", "too", "i'm", "i'd", "i've", "let's", "it's", "that's",
})


@dataclass(frozen=True, slots=True)
class Atom:
    """A candidate value found in text: its text, kind, position, and the words just before and after."""

    text: str
    kind: str
    start: int
    before: str = ""
    after: str = ""
    number: float | None = None
    date: dt.date | dt.time | None = None
    """The date (a datetime too) or time of day the atom stands for, if it is one."""


@functools.lru_cache(maxsize=1 << 14)
def normalize_word(word: str) -> str:
    """Lower-case a word and strip a plural or possessive ending: the form used for cue and topic words."""
    word = word.lower().strip("'-_")
    if word.endswith("'s"):
        word = word[:-2]
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def words(text: str) -> list[str]:
    """The normalised words of ``text``, in order (stopwords kept)."""
    return list(map(normalize_word, _WORD.findall(text)))


def content_words(text: str) -> set[str]:
    """The distinct normalised words of ``text`` that are not stopwords or bare numbers."""
    return {w for w in words(text) if w and w not in STOPWORDS and not w.isdigit()}


@functools.lru_cache(maxsize=1024)
def message_words(text: str) -> frozenset[str]:
    """:func:`content_words` of a message, remembered (every step of a turn reads the same message)."""
    return frozenset(content_words(text))


def name_words(name: str) -> set[str]:
    """Words in an identifier: ``post_tweet`` and ``postTweet`` both give ``{'post', 'tweet'}``."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name).replace("_", " ").replace("-", " ")
    return {normalize_word(w) for w in spaced.split() if w}


def parse_number(text: str) -> float | None:
    """The number written in ``text`` (``"20,000"``, ``"$25.50"``, ``"15%"``, ``"twelve"``), if it is one."""
    cleaned = text.strip().lower().replace(",", "").lstrip("$").rstrip("%").strip()
    if cleaned in _NUMBER_WORDS:
        return float(_NUMBER_WORDS[cleaned])
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None


def _neighbours(text: str, start: int, end: int) -> tuple[str, str]:
    """The words just before and after ``text[start:end]`` (within NEIGHBOUR_CHARS), normalised."""
    before = _WORD.findall(text, max(0, start - NEIGHBOUR_CHARS), start)
    after = _WORD.search(text, end, min(len(text), end + NEIGHBOUR_CHARS))
    return (normalize_word(before[-1]) if before else "", normalize_word(after.group(0)) if after else "")


def _word_neighbours(text: str, spans: Sequence[tuple[int, int]], words: Sequence[str], i: int) -> tuple[str, str]:
    """:func:`_neighbours` of the i-th word of ``text`` (``spans`` and ``words``: all its words, in order):
    the words next to it, read from the lists when they lie wholly within reach, else from the text."""
    start, end = spans[i]
    if i > 0 and spans[i - 1][0] < start - NEIGHBOUR_CHARS:
        return _neighbours(text, start, end)
    following = spans[i + 1:i + 2]
    reach = end + NEIGHBOUR_CHARS
    if following and following[0][0] < reach < following[0][1] and reach < len(text):
        return _neighbours(text, start, end)
    before = normalize_word(words[i - 1]) if i > 0 else ""
    after = normalize_word(words[i + 1]) if following and following[0][0] < reach else ""
    return before, after


def _date_spans(text: str) -> Iterator[tuple[int, int, dt.date]]:
    if not _YEAR.search(text):  # every date pattern has a four-digit year
        return
    for pattern, order in _DATES:
        for match in pattern.finditer(text):
            parts = dict(zip(order, match.groups(), strict=True))
            try:
                month = _MONTHS[parts["M"].lower().rstrip(".")] if "M" in parts else int(parts["m"])
                yield match.start(), match.end(), dt.date(int(parts["y"]), month, int(parts["d"]))
            except (KeyError, ValueError):
                continue


@functools.lru_cache(maxsize=256)
def first_date(text: str) -> dt.date | None:
    """The first date written with its year in ``text`` (the earliest-listed spelling that has one)."""
    for _, _, date in _date_spans(text):
        return date
    return None


_Found = dict[tuple[str, int, str], tuple[int, int, int, int, float | None, dt.date | None]]
"""(kind, start, text) -> (kind rank, start, order found, end, number, date): the atoms found so far,
without their neighbours; sorting the values orders them as :func:`text_atoms` does."""


def _add(found: _Found, kind: str, start: int, end: int, value: str, number: float | None = None,
         date: dt.date | None = None) -> None:
    value = value.strip()
    if value and len(value) <= MAX_ATOM_CHARS and (kind, start, value) not in found:
        found[(kind, start, value)] = (_KIND_RANK[kind], start, len(found), end, number, date)


def _scan(text: str, words: Sequence[str], spans: Sequence[tuple[int, int]], lowered: Sequence[str],
          numbers: bool = True) -> _Found:
    """The atoms of ``text`` other than compounds, proper nouns and plain words (without ``numbers``, the
    number atoms' values are left None: :func:`parse_number` of their text gives them)."""
    found: _Found = {}
    for pattern in _QUOTED:
        for m in pattern.finditer(text):
            _add(found, "quoted", m.start(), m.end(), m.group(1))
    # Each pattern below runs only on a text holding the characters every match of it needs.
    for m in _FILE.finditer(text) if _FILE_HINT.search(text) else ():
        if not m.group(1).split(".")[-1].isdigit():
            _add(found, "file", m.start(1), m.end(1), m.group(1))
    for m in _NUMBER.finditer(text):
        _add(found, "number", m.start(), m.end(), m.group(0), parse_number(m.group(0)) if numbers else None)
    for (start, end), word, low in zip(spans, words, lowered, strict=True):
        if low in _NUMBER_WORDS:
            _add(found, "number", start, end, word, float(_NUMBER_WORDS[low]) if numbers else None)
    for m in _ID.finditer(text):
        _add(found, "id", m.start(1), m.end(1), m.group(1))
    for m in _TAG.finditer(text) if "#" in text or "@" in text else ():
        _add(found, "hashtag" if m.group(1).startswith("#") else "mention", m.start(1), m.end(1), m.group(1))
    for m in _EMAIL.finditer(text) if "@" in text else ():
        _add(found, "email", m.start(1), m.end(1), m.group(1))
    for m in _URL.finditer(text) if "://" in text else ():
        _add(found, "url", m.start(), m.end(), m.group(0))
    for m in _PATH.finditer(text) if "/" in text else ():
        if "://" not in text[max(0, m.start() - 3):m.end()]:
            _add(found, "path", m.start(1), m.end(1), m.group(1))
    for start, end, date in _date_spans(text):
        _add(found, "date", start, end, text[start:end], date=date)
    return found


def _words(text: str) -> tuple[list[str], list[tuple[int, int]], list[str]]:
    words = _WORD.findall(text)
    return words, list(map(re.Match.span, _WORD.finditer(text))), list(map(str.lower, words))


def output_atoms(text: str, exclude: str, first: int, last: int
                 ) -> dict[str, tuple[int, tuple[tuple[int, Atom], ...]]]:
    """The atoms of ``text`` that an output's rules can name, by kind: how many there are of the kind (as
    :func:`text_atoms` without words finds them, ``exclude`` left out) and the first ``first`` and last
    ``last`` of them, each with its place among them (from 0). Atoms here have no neighbours (``""``):
    rules read an output's atoms by kind and place only. Only the atoms kept are built, so a text dense
    with atoms costs little more than its scan."""
    words, spans, lowered = _words(text)
    by_kind: dict[str, list[tuple[int, int, int, str, int, float | None, dt.date | None]]] = {}
    for (kind, start, value), (_, _, order, end, number, date) in _scan(text, words, spans, lowered, False).items():
        if value != exclude:
            by_kind.setdefault(kind, []).append((start, order, end, value, start, number, date))
    out: dict[str, tuple[int, tuple[tuple[int, Atom], ...]]] = {}
    for kind, entries in by_kind.items():
        entries.sort()
        count = len(entries)
        places = range(count) if count <= first + last else (*range(first), *range(count - last, count))
        numbers = kind == "number"
        out[kind] = (count, tuple((i, Atom(entries[i][3], kind, entries[i][4], "", "",
                                           parse_number(entries[i][3]) if numbers else entries[i][5], entries[i][6]))
                                  for i in places))
    return out


_NOT_SPACE = re.compile(r"\S+")
_REST_OF_NAME = re.compile(r"\S+\s+(?:(?:of|the|de)\s+)*([A-Z].*)$")
"""A run of capitalised words without its first word (and the connectors after it)."""


def _name_pieces(value: str, start: int) -> Iterator[tuple[int, str]]:
    """The parts of a run of capitalised words that may be names, with their offsets: the pronoun "I" is
    never part of one ("Before I start" gives no "Before I"; "I" alone is not a name)."""
    if "I" not in value.split():
        yield start, value
        return
    run: list[re.Match[str]] = []
    for word in [*_NOT_SPACE.finditer(value), None]:
        if word is None or word.group() == "I":
            while run and not run[-1].group()[0].isupper():
                run.pop()  # a connector ("of", "the") left at either end
            while run and not run[0].group()[0].isupper():
                run.pop(0)
            if run:
                yield start + run[0].start(), value[run[0].start():run[-1].end()]
            run = []
        else:
            run.append(word)


def text_atoms(text: str, words_too: bool = True) -> list[Atom]:
    """All atoms of ``text``, ordered by kind (as in :data:`ATOM_KINDS`) and then by position (without
    proper nouns and plain words unless ``words_too``)."""
    words, spans, lowered = _words(text)
    found = _scan(text, words, spans, lowered)

    def atoms() -> list[Atom]:
        out = []
        for (kind, start, value), (_, _, _, end, number, date) in sorted(found.items(), key=lambda kv: kv[1]):
            if kind == "word":
                out.append(Atom(value, kind, start, *_word_neighbours(text, spans, words, end), None, None))
            else:
                out.append(Atom(value, kind, start, *_neighbours(text, start, end), number, date))
        return out

    if not words_too:
        return atoms()
    for m in _COMPOUND.finditer(text) if ", " in text else ():
        _add(found, "compound", m.start(1), m.end(1), m.group(1))
    for m in _PROPER.finditer(text):
        for start, value in _name_pieces(m.group(1).rstrip("."), m.start(1)):
            opens = _opens_sentence(text, start)
            if " " not in value and opens:
                continue  # one capitalised word opening a sentence ("Could", "Please"): not a name
            _add(found, "proper", start, start + len(value), value)
            if opens:
                # "Send Ana Ortiz a note": the sentence's first word may be a verb; the name is also offered
                # without it (a rule learns which of the two a parameter takes).
                rest = _REST_OF_NAME.match(value)
                if rest is not None:
                    _add(found, "proper", start + rest.start(1), start + len(value), rest.group(1))
    word_rank = _KIND_RANK["word"]
    for i, ((start, _), word, low) in enumerate(zip(spans, words, lowered, strict=True)):
        if low in STOPWORDS:
            continue
        # _add("word", ...), written out: this is the loop over every word of the text. A word's "end" is
        # its place among the words (its neighbours are read from the lists).
        value = word.strip("'-").strip()
        if not value or len(value) > MAX_ATOM_CHARS or ("word", start, value) in found:
            continue
        found[("word", start, value)] = (word_rank, start, len(found), i, None, None)
    return atoms()
