"""Shared speculative results in Redis: sealed values with TTLs, single-flight leases, tenant-scoped keys.

Keys (built by :class:`~forethought.stores.shared_tools.SharedSpeculation`) are
``<prefix>:{<tenant digest>:<call digest>}:v`` for the value and ``...:lease`` for the lease; the hash tag
keeps both in one Cluster slot and spreads calls over the cluster. ``get_or_lead`` (the one round trip of a
speculation) returns the value, or else takes the lease with ``SET NX PX``, in a single script so a value
published in between is seen; ``lead`` is the same without the value;
``publish`` is ``SET PX`` plus a compare-and-delete of the lease (one script); ``release`` is the
compare-and-delete alone. Values are opaque sealed bytes: Redis never sees arguments or unsealed outputs.
"""

from __future__ import annotations

from typing import Any

from forethought.stores.errors import mapped_redis_errors

SOCKET_TIMEOUT_S = 0.25

_LEAD = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
"""
_GET_OR_LEAD = """
local value = redis.call('GET', KEYS[1])
if value then return {value, 0} end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {false, 1} end
return {false, 0}
"""
_PUBLISH = """
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if redis.call('GET', KEYS[2]) == ARGV[3] then redis.call('DEL', KEYS[2]) end
return 1
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def lease_key(key: str) -> str:
    """The lease key that goes with value key ``key`` (same hash tag)."""
    return key[:-2] + ":lease" if key.endswith(":v") else key + ":lease"


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


class RedisSharedResults:
    """A :class:`~forethought.stores.results.SharedResults` on a ``redis.asyncio.Redis`` client."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._lead = client.register_script(_LEAD)
        self._get_or_lead = client.register_script(_GET_OR_LEAD)
        self._publish = client.register_script(_PUBLISH)
        self._release = client.register_script(_RELEASE)
        self.operations = 0

    @classmethod
    def from_url(cls, url: str, socket_timeout_s: float = SOCKET_TIMEOUT_S) -> RedisSharedResults:
        """A backend on a new asyncio client for ``url`` whose every call gives up after ``socket_timeout_s``."""
        import redis.asyncio

        return cls(redis.asyncio.Redis.from_url(url, socket_timeout=socket_timeout_s,
                                                socket_connect_timeout=socket_timeout_s, retry_on_timeout=False))

    async def get(self, key: str) -> bytes | None:
        self.operations += 1
        with mapped_redis_errors("get shared result"):
            value: bytes | None = await self._client.get(key)
        return value

    async def lead(self, key: str, token: str, lease_s: float) -> bool:
        self.operations += 1
        with mapped_redis_errors("lead shared result"):
            return bool(await self._lead(keys=[key, lease_key(key)], args=[token, _ms(lease_s)]))

    async def get_or_lead(self, key: str, token: str, lease_s: float) -> tuple[bytes | None, bool]:
        self.operations += 1
        with mapped_redis_errors("get or lead shared result"):
            value, leading = await self._get_or_lead(keys=[key, lease_key(key)], args=[token, _ms(lease_s)])
        return value, bool(leading)

    async def publish(self, key: str, sealed: bytes, ttl_s: float, token: str) -> None:
        self.operations += 1
        with mapped_redis_errors("publish shared result"):
            await self._publish(keys=[key, lease_key(key)], args=[sealed, _ms(ttl_s), token])

    async def release(self, key: str, token: str) -> None:
        self.operations += 1
        with mapped_redis_errors("release shared result"):
            await self._release(keys=[lease_key(key)], args=[token])

    async def close(self) -> None:
        with mapped_redis_errors("close"):
            await self._client.aclose()
