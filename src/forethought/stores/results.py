"""The shared-result seam: where workers publish speculative results of ``shared`` tools for each other.

:class:`SharedResults` is a small asynchronous protocol over opaque, already-sealed bytes (see
:mod:`~forethought.stores.sealing`): ``get`` a value, ``lead`` (become the one worker that runs a call:
single flight across workers, with a lease), ``publish`` (store with a TTL and end the lease) and
``release`` (end the lease without a value). :class:`~forethought.stores.redis_results.RedisSharedResults`
is the real backend; :class:`MemorySharedResults` is the fake, on an injectable clock.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from forethought._core.clock import SYSTEM_CLOCK, Clock


@runtime_checkable
class SharedResults(Protocol):
    """Sealed values by storage key, with TTLs and single-flight leases. Every method may raise
    :class:`~forethought.stores.errors.StoreUnavailableError`."""

    async def get(self, key: str) -> bytes | None:
        """The sealed value under ``key``, or ``None`` (absent or expired)."""

    async def lead(self, key: str, token: str, lease_s: float) -> bool:
        """Take the lease of ``key`` for ``lease_s`` unless another holder has it (or a value is there)."""

    async def get_or_lead(self, key: str, token: str, lease_s: float) -> tuple[bytes | None, bool]:
        """In one round trip: the value under ``key`` if there is one, else whether the lease was taken."""

    async def publish(self, key: str, sealed: bytes, ttl_s: float, token: str) -> None:
        """Store ``sealed`` under ``key`` for ``ttl_s`` and end ``token``'s lease."""

    async def release(self, key: str, token: str) -> None:
        """End ``token``'s lease of ``key`` without a value (other workers may run the call)."""

    async def close(self) -> None:
        """Release connections."""


class MemorySharedResults:
    """A :class:`SharedResults` in a dict, for tests and one-process runs (one event loop)."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._values: dict[str, tuple[bytes, float]] = {}
        self._leases: dict[str, tuple[str, float]] = {}
        self.operations = 0

    def _live(self, table: dict[str, tuple[object, float]], key: str) -> bool:
        item = table.get(key)
        if item is None:
            return False
        if item[1] <= self._clock.monotonic():
            del table[key]
            return False
        return True

    async def get(self, key: str) -> bytes | None:
        self.operations += 1
        return self._values[key][0] if self._live(self._values, key) else None  # type: ignore[arg-type]

    async def lead(self, key: str, token: str, lease_s: float) -> bool:
        self.operations += 1
        if self._live(self._values, key) or self._live(self._leases, key):  # type: ignore[arg-type]
            return False
        self._leases[key] = (token, self._clock.monotonic() + lease_s)
        return True

    async def get_or_lead(self, key: str, token: str, lease_s: float) -> tuple[bytes | None, bool]:
        value = await self.get(key)
        if value is not None:
            return value, False
        return None, await self.lead(key, token, lease_s)

    async def publish(self, key: str, sealed: bytes, ttl_s: float, token: str) -> None:
        self.operations += 1
        self._values[key] = (sealed, self._clock.monotonic() + ttl_s)
        await self.release(key, token)

    async def release(self, key: str, token: str) -> None:
        lease = self._leases.get(key)
        if lease is not None and lease[0] == token:
            del self._leases[key]

    def peek(self, key: str) -> bytes | None:
        """The sealed bytes under ``key`` as a reader of the backend sees them, live or not (for tests)."""
        item = self._values.get(key)
        return None if item is None else item[0]

    def tamper(self, key: str, sealed: bytes) -> None:
        """Overwrite a value as an attacker with write access (but no secret) would (for tests)."""
        expiry = self._values[key][1] if key in self._values else self._clock.monotonic() + 60.0
        self._values[key] = (sealed, expiry)

    async def close(self) -> None:
        """Nothing to release."""
