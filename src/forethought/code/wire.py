"""Data, never code, across the shadow boundary: a typed JSON encoding and length-prefixed frames.

Values keep the Python types a tool can tell apart: ``None``, ``bool``, ``int`` (any size, exact), ``float``
(``nan``/``inf`` included), ``str``, ``bytes``, ``list``, ``tuple``, ``dict`` (any encodable hashable keys, in
order), ``set`` and ``frozenset``. Anything else is not data and is refused with :class:`NotData`. JSON
arrays are lists; every other container is a one-key object naming its type, so nothing a sender writes
can be mistaken for another type. Decoding is strict (unknown tags, wrong shapes, unhashable set members,
too deep or too many nodes: :class:`NotData`) and builds fresh objects, so a decoded value shares nothing
with anyone. No pickle, no object reconstruction by name: a hostile sender can make the receiver build
only these types.

Decoding costs time linear in the frame whatever a hostile sender puts in it: :func:`token_bound` bounds
the number of JSON values of a frame in one pass over its bytes before it is parsed, and set members and
dict keys whose hashes repeat (integers chosen to collide, which make a hash table quadratic) are refused
before any table is built (:data:`MAX_SAME_HASH`).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import struct
from typing import Any

MAX_DEPTH = 100
MAX_NODES = 200_000
MAX_SAME_HASH = 8
"""Set members (or dict keys) of one container sharing one hash value, at most: honest data has distinct
values whose hashes rarely coincide; a hostile sender's colliding members would make building the table
quadratic."""
_SEPARATORS = (b"[", b"{", b",", b":")
_HEADER = struct.Struct("!I")
_SCALARS = (str, bool, type(None))


class NotData(ValueError):
    """A value that is not plain data (or a frame that is not well-formed)."""


def encode(value: Any, max_nodes: int = MAX_NODES, max_bytes: int | None = None) -> Any:
    """``value`` as a JSON-compatible structure (see the module docstring); raises :class:`NotData` (also past
    ``max_nodes`` values or, when given, ``max_bytes`` bytes of strings and bytes)."""
    budget = [max_nodes, max_bytes if max_bytes is not None else -1]
    return _encode(value, budget, 0, set())


def _spend_bytes(budget: list[int], size: int) -> None:
    if budget[1] >= 0:
        budget[1] -= size
        if budget[1] < 0:
            raise NotData("too many bytes")


def _encode(value: Any, budget: list[int], depth: int, active: set[int]) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise NotData("too many values")
    kind = type(value)
    if kind is str:
        _spend_bytes(budget, len(value))
        return value
    if kind in _SCALARS:
        return value
    if kind is int:
        return value
    if kind is float:
        return value if math.isfinite(value) else {"float": repr(value)}
    if kind is bytes:
        _spend_bytes(budget, len(value) * 4 // 3)
        return {"bytes": base64.b64encode(value).decode("ascii")}
    if kind not in (list, tuple, dict, set, frozenset):
        raise NotData(f"{kind.__name__} is not data")
    if depth >= MAX_DEPTH:
        raise NotData("nested too deeply")
    if id(value) in active:
        raise NotData("a container holds itself")
    active.add(id(value))
    try:
        if kind is dict:
            return {"dict": [[_encode(k, budget, depth + 1, active), _encode(v, budget, depth + 1, active)]
                             for k, v in value.items()]}
        items = [_encode(item, budget, depth + 1, active) for item in value]
    finally:
        active.discard(id(value))
    if kind is list:
        return items
    return {"tuple": items} if kind is tuple else {"set" if kind is set else "frozenset": items}


def decode(data: Any, max_nodes: int = MAX_NODES) -> Any:
    """The value ``data`` (from :func:`encode`) stands for; raises :class:`NotData` on anything else."""
    return _decode(data, [max_nodes], 0)


def _decode(data: Any, budget: list[int], depth: int) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise NotData("too many values")
    kind = type(data)
    if kind in _SCALARS or kind is int:
        return data
    if kind is float:
        return data
    if depth >= MAX_DEPTH:
        raise NotData("nested too deeply")
    if kind is list:
        return [_decode(item, budget, depth + 1) for item in data]
    if kind is not dict or len(data) != 1:
        raise NotData(f"not an encoded value: {kind.__name__}")
    ((tag, body),) = data.items()
    if tag == "float" and body in ("nan", "inf", "-inf"):
        return float(body)
    if tag == "bytes" and type(body) is str:
        try:
            return base64.b64decode(body.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise NotData("bad bytes") from None
    if type(body) is not list:
        raise NotData(f"bad {tag!r} value")
    if tag == "dict":
        pairs: list[tuple[Any, Any]] = []
        for pair in body:
            if type(pair) is not list or len(pair) != 2:
                raise NotData("bad dict item")
            pairs.append((_decode(pair[0], budget, depth + 1), _decode(pair[1], budget, depth + 1)))
        _spread(key for key, _ in pairs)
        return dict(pairs)
    items = [_decode(item, budget, depth + 1) for item in body]
    if tag == "tuple":
        return tuple(items)
    if tag in ("set", "frozenset"):
        _spread(items)
        return set(items) if tag == "set" else frozenset(items)
    raise NotData(f"unknown tag {tag!r}")


def _spread(members: Any) -> None:
    """Refuse unhashable members, and members whose hashes repeat more than :data:`MAX_SAME_HASH` times
    (counted in a table keyed by the hash values themselves, which do not collide)."""
    seen: dict[int, int] = {}
    for member in members:
        try:
            code = hash(member)
        except TypeError:
            raise NotData(f"unhashable {type(member).__name__} as a key or set member") from None
        count = seen.get(code, 0) + 1
        if count > MAX_SAME_HASH:
            raise NotData("set members or dict keys chosen to collide in hash")
        seen[code] = count


def copy_data(value: Any) -> Any:
    """A fresh copy of plain data through the encoding (the shadow's rule for what is data)."""
    return decode(encode(value))


# --- frames ---------------------------------------------------------------------------------------


def frame(message: dict[str, Any]) -> bytes:
    """One message as a length-prefixed UTF-8 JSON frame."""
    body = json.dumps(message, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return _HEADER.pack(len(body)) + body


HEADER_SIZE = _HEADER.size


def token_bound(body: bytes) -> int:
    """An upper bound on the JSON values in a frame body, in one pass over its bytes (separators inside
    strings count too): what parsing it can cost, known before it is parsed."""
    return sum(body.count(separator) for separator in _SEPARATORS) + 1


def frame_length(header: bytes, limit: int) -> int:
    """The body length a frame header announces; raises :class:`NotData` past ``limit``."""
    (length,) = _HEADER.unpack(header)
    if length > limit:
        raise NotData(f"a {length}-byte message exceeds the {limit}-byte limit")
    return int(length)


def parse(body: bytes) -> dict[str, Any]:
    """A frame body as a message object; raises :class:`NotData`."""
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise NotData(f"not a JSON message: {type(exc).__name__}") from None
    if type(message) is not dict or type(message.get("op")) is not str:
        raise NotData("a message is an object with an 'op'")
    return message
