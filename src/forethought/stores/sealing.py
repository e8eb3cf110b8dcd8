"""Sealed values: what a worker may put into (and take out of) a shared result store.

A shared value is a tool output built only of JSON's own types (dict with str keys, list, str, int,
finite float, bool, None), so decoding gives back exactly the value serial execution produced (a tuple, a
set or a custom object would come back as something else: such outputs are never shared). The payload is
canonical JSON, sealed with HMAC-SHA256 under the deployment secret over the storage key and the payload,
so a value written by anyone without the secret, or copied to another key, is refused before it is
served. Storage keys are keyed digests of the tenant and the call key: Redis never sees arguments.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
from typing import Any

from forethought.stores.errors import StoreIntegrityError

MAC_BYTES = 32
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
    """Canonical JSON of ``value``; raises :class:`NotShareable` if decoding would not give it back."""
    _check(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
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

    def _mac(self, key: str, payload: bytes) -> bytes:
        return hmac.new(self._secret, key.encode() + b"\0" + payload, hashlib.sha256).digest()

    def seal(self, key: str, payload: bytes) -> bytes:
        """``payload`` with its MAC for storage key ``key``."""
        return self._mac(key, payload) + payload

    def open(self, key: str, sealed: bytes) -> bytes:
        """The payload of ``sealed`` if its MAC is right for ``key``; :class:`StoreIntegrityError` otherwise."""
        if len(sealed) < MAC_BYTES:
            raise StoreIntegrityError("a shared value too short to carry a MAC")
        mac, payload = sealed[:MAC_BYTES], sealed[MAC_BYTES:]
        if not hmac.compare_digest(mac, self._mac(key, payload)):
            raise StoreIntegrityError("a shared value failed its authentication")
        return payload
