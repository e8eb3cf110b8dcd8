"""Gateway response scopes in Redis: the commands, each one Lua script (one round trip, atomic).

The serve-side store (:class:`~forethought.gateway.replicas.RedisScopeStore`) seals what it writes;
this module moves opaque bytes. Keys of one response share the hash tag ``{<response id>}``, so they live
in one Cluster slot and every script touches one slot:

* ``<prefix>:{R}:meta``    the sealed scope (token digest, the request's tools), with the response's TTL
* ``<prefix>:{R}:state``   hash ``seg`` (current message), ``posts`` (accepted posts) and ``bytes`` (bytes of
  outputs and arguments held for the current message), with what is left of the response's TTL
* ``<prefix>:{R}:entries`` list of sealed entries posted for the current segment
* ``<prefix>:{R}:done``    marker of a finished response (late posts get 410)

Result codes of :meth:`RedisScopeBackend.append`: the new post count (>= 1), or :data:`UNKNOWN`,
:data:`FINISHED`, :data:`MOVED_ON` (the segment changed), :data:`TOO_MANY`, :data:`TOO_BIG`. A key of the wrong
type, or a count that is not a whole number from 0 to 2**53 - 1, is found before anything is written and raises
:class:`~forethought.stores.errors.StoreIntegrityError` (that response's state is garbled; Redis is fine).
:meth:`advance` names the segment it moves to, so sending it again (after a failed round trip) changes
nothing. Redis errors leave as
:class:`~forethought.stores.errors.StoreUnavailableError` (:mod:`~forethought.stores.errors`).
"""

from __future__ import annotations

from typing import Any

from forethought.stores.errors import StoreIntegrityError, mapped_redis_errors

SOCKET_TIMEOUT_S = 0.25
UNKNOWN, FINISHED, MOVED_ON, TOO_MANY, TOO_BIG, GARBLED = -1, -2, -3, -4, -5, -6

_CHECK = """
local function wrong(key, want)
  local t = redis.call('TYPE', key).ok
  return t ~= 'none' and t ~= want
end
local function whole(v)
  local n = tonumber(v or '0')
  if n == nil or n ~= math.floor(n) or n < 0 or n > 9007199254740991 then return nil end
  return n
end
"""
_TYPES = "if wrong(KEYS[1], 'string') or wrong(KEYS[2], 'hash') or wrong(KEYS[3], 'list') then return -6 end\n"
_CREATE = """
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('DEL', KEYS[3], KEYS[4])
redis.call('HSET', KEYS[2], 'seg', 0, 'posts', 0, 'bytes', 0)
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1
"""
_LOOKUP = _CHECK + """
if wrong(KEYS[1], 'string') or wrong(KEYS[2], 'hash') then return {false, -6, 0} end
local meta = redis.call('GET', KEYS[1])
if not meta then
  if redis.call('EXISTS', KEYS[4]) == 1 then return {false, -2, 0} end
  return {false, -1, 0}
end
local st = redis.call('HMGET', KEYS[2], 'seg', 'posts')
local seg, posts = whole(st[1]), whole(st[2])
if not seg or not posts then return {false, -6, 0} end
return {meta, seg, posts}
"""
_APPEND = _CHECK + _TYPES + """
if redis.call('EXISTS', KEYS[1]) == 0 then
  if redis.call('EXISTS', KEYS[4]) == 1 then return -2 end
  return -1
end
local st = redis.call('HMGET', KEYS[2], 'seg', 'posts', 'bytes')
if not st[1] then return -1 end
local seg, posts, bytes = whole(st[1]), whole(st[2]), whole(st[3])
if not seg or not posts or not bytes then return -6 end
if seg ~= tonumber(ARGV[1]) then return -3 end
if redis.call('LLEN', KEYS[3]) + #ARGV - 4 > tonumber(ARGV[2]) then return -4 end
if bytes + tonumber(ARGV[4]) > tonumber(ARGV[3]) then return -5 end
for i = 5, #ARGV do redis.call('RPUSH', KEYS[3], ARGV[i]) end
redis.call('HSET', KEYS[2], 'bytes', bytes + tonumber(ARGV[4]), 'posts', posts + 1)
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[3], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return posts + 1
"""
_SNAPSHOT = _CHECK + """
if wrong(KEYS[1], 'hash') or wrong(KEYS[2], 'list') then return {-6, {}} end
local posts = whole(redis.call('HGET', KEYS[1], 'posts'))
if not posts then return {-6, {}} end
return {posts, redis.call('LRANGE', KEYS[2], 0, -1)}
"""
_ADVANCE = _CHECK + _TYPES + """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local seg = -1
local raw = redis.call('HGET', KEYS[2], 'seg')
if raw then
  seg = whole(raw)
  if not seg then return -6 end
end
local target = tonumber(ARGV[1])
if seg < target then
  redis.call('DEL', KEYS[3])
  redis.call('HSET', KEYS[2], 'seg', target, 'bytes', 0)
  seg = target
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
return seg
"""
_FORGET = """
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return 1
"""
_FINISH = """
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('SET', KEYS[4], '1', 'PX', ARGV[1])
return 1
"""


def _intact(code: int, what: str) -> int:
    """``code``, unless it says the response's keys in Redis are garbled (:data:`GARBLED`)."""
    if code == GARBLED:
        raise StoreIntegrityError(f"{what} gateway scope: a key of the response in Redis is of the wrong type "
                                  "or holds a count that is not a whole number from 0 up")
    return code


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


class RedisScopeBackend:
    """The Redis side of gateway scopes, on a ``redis.asyncio.Redis`` client."""

    def __init__(self, client: Any, prefix: str = "ft:gw") -> None:
        self._client = client
        self._prefix = prefix
        self._create = client.register_script(_CREATE)
        self._lookup = client.register_script(_LOOKUP)
        self._append = client.register_script(_APPEND)
        self._snapshot = client.register_script(_SNAPSHOT)
        self._advance = client.register_script(_ADVANCE)
        self._finish = client.register_script(_FINISH)
        self._forget = client.register_script(_FORGET)
        self.operations = 0

    @classmethod
    def from_url(cls, url: str, socket_timeout_s: float = SOCKET_TIMEOUT_S, prefix: str = "ft:gw") -> RedisScopeBackend:
        """A backend on a new asyncio client for ``url``: calls give up after ``socket_timeout_s``; one retry after a
        connection error (a connection Redis closed, e.g. after a restart), none after a timeout."""
        import redis.asyncio
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        client = redis.asyncio.Redis.from_url(url, socket_timeout=socket_timeout_s,
                                              socket_connect_timeout=socket_timeout_s, retry_on_timeout=False,
                                              retry=Retry(NoBackoff(), 1))
        return cls(client, prefix)

    def key(self, response_id: str, part: str) -> str:
        """The Redis key of one part (``meta``, ``state``, ``entries``, ``done``) of a response."""
        return f"{self._prefix}:{{{response_id}}}:{part}"

    def _keys(self, response_id: str) -> list[str]:
        return [self.key(response_id, part) for part in ("meta", "state", "entries", "done")]

    async def create(self, response_id: str, meta: bytes, ttl_s: float) -> None:
        """Register a response: its sealed scope, segment 0, no posts, for ``ttl_s``."""
        self.operations += 1
        with mapped_redis_errors("create gateway scope"):
            await self._create(keys=self._keys(response_id), args=[meta, _ms(ttl_s)])

    async def lookup(self, response_id: str) -> tuple[bytes | None, int, int]:
        """(sealed scope, segment, posts); the scope is ``None`` with segment ``UNKNOWN`` or ``FINISHED``."""
        self.operations += 1
        with mapped_redis_errors("look up gateway scope"):
            meta, segment, posts = await self._lookup(keys=self._keys(response_id))
        _intact(int(segment), "look up")
        return meta, int(segment), int(posts)

    async def append(self, response_id: str, segment: int, entries: list[bytes], limit: int, max_bytes: int = 1 << 62,
                     size: int = 0) -> int:
        """Append sealed entries for ``segment`` whole or not at all (at most ``limit`` entries and ``max_bytes``
        of output per segment, the post's own output being ``size`` bytes); the post count, or a negative code."""
        self.operations += 1
        with mapped_redis_errors("post to gateway scope"):
            code = int(await self._append(keys=self._keys(response_id), args=[segment, limit, max_bytes, size,
                                                                               *entries]))
        return _intact(code, "post to")

    async def snapshot(self, response_id: str) -> tuple[int, list[bytes]]:
        """(posts, sealed entries of the current segment)."""
        self.operations += 1
        keys = self._keys(response_id)
        with mapped_redis_errors("read gateway scope"):
            posts, entries = await self._snapshot(keys=[keys[1], keys[2]])
        return _intact(int(posts), "read"), list(entries)

    async def posts(self, response_id: str) -> int:
        """Accepted posts so far (0 for an unknown response)."""
        self.operations += 1
        with mapped_redis_errors("read gateway posts"):
            value = await self._client.hget(self.key(response_id, "state"), "posts")
        try:
            return int(value or 0)
        except (TypeError, ValueError):  # written by something else: a miss, never a dropped stream
            raise StoreIntegrityError("a gateway response's post count in Redis is not a number") from None

    async def advance(self, response_id: str, segment: int) -> int:
        """Move the response on to ``segment`` (dropping the entries of the one before) unless it is there already;
        the segment it is at (``UNKNOWN`` if the response is gone)."""
        self.operations += 1
        with mapped_redis_errors("advance gateway scope"):
            code = int(await self._advance(keys=self._keys(response_id), args=[segment]))
        return _intact(code, "advance")

    async def forget(self, response_id: str) -> None:
        """Delete a response's scope, state and entries, leaving no ``done`` marker (posts then get 404)."""
        self.operations += 1
        with mapped_redis_errors("forget gateway scope"):
            await self._forget(keys=self._keys(response_id))

    async def finish(self, response_id: str, remember_s: float) -> None:
        """Forget a response; its ``done`` marker lives ``remember_s``."""
        self.operations += 1
        with mapped_redis_errors("finish gateway scope"):
            await self._finish(keys=self._keys(response_id), args=[_ms(remember_s)])

    async def close(self) -> None:
        with mapped_redis_errors("close"):
            await self._client.aclose()


def probe(url: str, timeout_s: float = 2.0) -> None:
    """Check that the Redis at ``url`` answers PING; :class:`StoreUnavailableError` (one line) if not."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    try:
        with mapped_redis_errors(f"the Redis at {url} does not answer"):
            client.ping()
    finally:
        client.close()
