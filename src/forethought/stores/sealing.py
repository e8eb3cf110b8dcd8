"""Sealed values: what a worker may put into (and take out of) a shared result store.

A shared value is a tool output built only of JSON's own types (dict with str keys, list, str, int,
finite float, bool, None), so decoding gives back exactly the value serial execution produced (a tuple, a
set or a custom object would come back as something else: such outputs are never shared). The payload is
JSON with the value's own key order (a served dict renders to the same JSON text as the one serial
execution returned), sealed with HMAC-SHA256 under the deployment secret over the storage key, the
value's expiry and the payload, so a value written by anyone without the secret, copied to another key,
or put back after its expiry (Redis's TTL is not covered by any MAC: a writer can re-store an old value
without one) is refused before it is served. Expiry is wall-clock time, so the workers' clocks must agree
to much better than a value's TTL. Storage keys are keyed digests of the tenant and the call key: Redis
never sees arguments.

Layout of a sealed value: ``MAC (32 bytes) | expiry (8 bytes, IEEE-754 double, seconds since the epoch,
big-endian; +inf: never) | payload``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import struct
from typing import Any

from forethought.stores.errors import StoreExpiredError, StoreIntegrityError

MAC_BYTES = 32
EXPIRY_BYTES = 8
NEVER = math.inf
"""The expiry of a value sealed without one."""
_EXPIRY = struct.Struct(">d")
DIGEST_BYTES = 16
MIN_SECRET_BYTES = 16
_MAX_DEPTH = 64


class NotShareable(ValueError):
    """A value that would not decode to itself (not built of JSON's own types only)."""


def _check(value: Any, depth: int = 0) -> None:
    if depth > _MAX_DEPTH:
        raise NotShareable("nested too deeply")
    kind = type(value)
    if value is None or kind is str or kind is bool or kind is int:
        return
    if kind is float:
        if not math.isfinite(value):
            raise NotShareable("non-finite float")
        return
    if kind is list:
        for item in value:
            _check(item, depth + 1)
        return
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise NotShareable("a non-string key")
            _check(item, depth + 1)
        return
    raise NotShareable(f"type {kind.__name__}")


def encode(value: Any) -> bytes:
    """Compact JSON of ``value``, dict keys in the value's own order (decoding gives them back in it);
    raises :class:`NotShareable` if decoding would not give the value back."""
    _check(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8", "surrogatepass")


def decode(payload: bytes) -> Any:
    """A fresh copy of the value in ``payload`` (each caller gets its own)."""
    return json.loads(payload.decode("utf-8", "surrogatepass"))


class Sealer:
    """Seals and opens values and names storage keys, under one deployment secret."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < MIN_SECRET_BYTES:
            raise ValueError(f"the deployment secret must have at least {MIN_SECRET_BYTES} bytes")
        self._secret = secret

    def digest(self, text: str) -> str:
        """A keyed digest of ``text`` (a tenant or a call key), safe to show to Redis."""
        mac = hmac.new(self._secret, text.encode("utf-8", "surrogatepass"), hashlib.sha256)
        return mac.hexdigest()[:DIGEST_BYTES * 2]

    def _mac(self, key: str, sealed_body: bytes) -> bytes:
        return hmac.new(self._secret, key.encode("utf-8", "surrogatepass") + b"\0" + sealed_body,
                        hashlib.sha256).digest()

    def seal(self, key: str, payload: bytes, expires_at: float = NEVER) -> bytes:
        """``payload`` with its expiry (wall-clock seconds; :data:`NEVER` by default) and a MAC over both for
        storage key ``key``."""
        if math.isnan(expires_at):
            raise ValueError("a sealed value's expiry must be a number")
        body = _EXPIRY.pack(expires_at) + payload
        return self._mac(key, body) + body

    def open(self, key: str, sealed: bytes, now: float | None = None) -> bytes:
        """The payload of ``sealed`` if its MAC is right for ``key`` (:class:`StoreIntegrityError` otherwise)
        and, when ``now`` (wall-clock seconds) is given, it has not expired by then
        (:class:`~forethought.stores.errors.StoreExpiredError`)."""
        if len(sealed) < MAC_BYTES + EXPIRY_BYTES:
            raise StoreIntegrityError("a shared value too short to carry a MAC and an expiry")
        mac, body = sealed[:MAC_BYTES], sealed[MAC_BYTES:]
        if not hmac.compare_digest(mac, self._mac(key, body)):
            raise StoreIntegrityError("a shared value failed its authentication")
        (expires_at,) = _EXPIRY.unpack_from(body)
        if now is not None and not now < expires_at:
            raise StoreExpiredError("a shared value past its sealed expiry (put back after it expired?)")
        return body[EXPIRY_BYTES:]
