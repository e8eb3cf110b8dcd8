"""Learned patterns in Redis: the PatternStore protocol, merged additively and idempotently by one Lua script.

:class:`RedisPatternStore` implements :class:`~forethought.predictors.patterns.store.PatternStore` so every
worker on every machine learns into one model. The protocol is synchronous (a predictor saves from its
own synchronous ``flush``), so this uses redis-py's synchronous client; the calls are short and bounded
by socket timeouts.

Layout per fingerprint (one Cluster hash slot, through the hash tag ``{ft:pat:<fingerprint>}``):

* ``{ft:pat:F}:meta``   hash ``clock``, ``epoch``, ``version``
* ``{ft:pat:F}:counts`` hash counter -> stored (epoch-scaled) number
* ``{ft:pat:F}:done:ID`` a marker per applied merge, kept ``DONE_TTL_S``

A merge is one Lua script (plain HGET / HSET of ``%.17g`` numbers: ``HINCRBYFLOAT`` would round its result
to 17 digits after the decimal point, which loses small decayed numbers): it applies the batch only if
its marker is new (so a retry after a lost reply
never counts twice), rescales decaying deltas from the writer's epoch to the stored one, advances the
clock, and rebases when the stored numbers have grown past ``REBASE_AFTER_HALF_LIVES`` half-lives; the same
arithmetic as :class:`~forethought.predictors.patterns.store.SqlitePatternStore`.

Loading never trusts what Redis holds to be a number: a counter that is not a finite number (text written
by another program, NaN, an infinity) is left out (``skipped`` counts them), as the merge script reads it
as 0 (so the next merge that touches it repairs it); a clock or epoch that is not one makes the load fail
with :class:`~forethought.stores.errors.StoreIntegrityError`, which
:class:`~forethought.stores.fallback.FallbackPatternStore` answers from its local mirror (the next merge
starts the clock afresh).
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from forethought.predictors.patterns.counts import PLAIN_PREFIX, REBASE_AFTER_HALF_LIVES, CountsState
from forethought.predictors.patterns.store import CountsChanges, split_mark, storable_key
from forethought.stores.errors import (
    StoreIntegrityError,
    StoreTimeoutError,
    StoreUnavailableError,
    mapped_redis_errors,
)

DONE_TTL_S = 86_400
"""How long a merge's marker is kept: a retry of the same batch within this time is a no-op."""
SOCKET_TIMEOUT_S = 0.5
RETRIES = 2
"""Extra attempts of one merge (with the same marker) after a connection error (never after a timeout)."""

_WHOLE = """
local function whole(v)  -- a change number or floor Redis holds: a whole number, or nil when it is not one
  local n = tonumber(v or '')
  if n == nil or n ~= n or n < 0 or n > 1e13 or n ~= math.floor(n) then return nil end
  return n
end
"""

_MERGE = _WHOLE + """
for i = 11, #ARGV, 2 do
  local d = tonumber(ARGV[i])
  if d == nil or d ~= d or d == math.huge or d == -math.huge then
    return redis.error_reply('non-finite delta')  -- checked before any write: scripts do not roll back
  end
end
if redis.call('SET', KEYS[3], '1', 'NX', 'EX', tonumber(ARGV[6])) == false then return 0 end
local ticks, epoch = tonumber(ARGV[1]), tonumber(ARGV[2])
local hl = nil
if ARGV[3] ~= '' then hl = tonumber(ARGV[3]) end
local rebase_after, plain, kept = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[9])
local function finite(v)
  if type(v) ~= 'string' then return nil end
  if not (string.match(v, '^%-?%d+%.?%d*$') or string.match(v, '^%-?%d+%.?%d*[eE][%+%-]?%d+$')) then
    return nil
  end
  local n = tonumber(v)
  if n == nil or n ~= n or n == math.huge or n == -math.huge then return nil end
  return n
end
local meta = redis.call('HMGET', KEYS[1], 'clock', 'epoch')
local clock, stored = finite(meta[1]), finite(meta[2])
if clock == nil or stored == nil then
  clock, stored = 0, epoch
  redis.call('HSET', KEYS[1], 'version', ARGV[7])
end
local kind = redis.call('TYPE', KEYS[4])['ok']
local seq = whole(redis.call('HGET', KEYS[1], 'seq'))
if seq == nil or whole(redis.call('HGET', KEYS[1], 'floor') or '0') == nil
    or redis.call('HGET', KEYS[1], 'gen') == false or (kind ~= 'zset' and kind ~= 'none') then
  -- no change marks to trust (a new store, or what is there is not ours): a new generation starts them afresh
  redis.call('DEL', KEYS[4])
  redis.call('HSET', KEYS[1], 'gen', ARGV[8], 'seq', 0, 'floor', 0)
  seq = 0
end
seq = seq + 1
redis.call('HSET', KEYS[1], 'seq', seq)
local factor = 1
if hl ~= nil and epoch ~= stored then factor = 2 ^ ((epoch - stored) / hl) end
local chunk = 2000
for first = 10, #ARGV, chunk do
  local last = math.min(#ARGV, first + chunk - 1)
  local names = {}
  for i = first, last, 2 do names[#names + 1] = ARGV[i] end
  local old = redis.call('HMGET', KEYS[2], unpack(names))
  local sets, marks = {}, {}
  for j = 1, #names do
    local key, delta = names[j], tonumber(ARGV[first + 2 * j - 1])
    if string.sub(key, 1, #plain) ~= plain then delta = delta * factor end
    sets[#sets + 1] = key
    sets[#sets + 1] = string.format('%.17g', (finite(old[j]) or 0) + delta)
    marks[#marks + 1] = seq
    marks[#marks + 1] = key
  end
  redis.call('HSET', KEYS[2], unpack(sets))
  redis.call('ZADD', KEYS[4], unpack(marks))
end
clock = clock + ticks
if hl ~= nil and (clock - stored) / hl > rebase_after then
  local down = 2 ^ ((stored - clock) / hl)
  local all = redis.call('HGETALL', KEYS[2])
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, #plain) ~= plain then
      redis.call('HSET', KEYS[2], all[i], string.format('%.17g', (finite(all[i + 1]) or 0) * down))
    end
  end
  stored = clock
  redis.call('HSET', KEYS[1], 'floor', seq)  -- every number changed: older marks get everything
end
if seq % 64 == 0 and seq > kept then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', seq - kept)
  local floor = whole(redis.call('HGET', KEYS[1], 'floor') or '0')
  if floor == nil or floor < seq - kept then redis.call('HSET', KEYS[1], 'floor', seq - kept) end
end
redis.call('HSET', KEYS[1], 'clock', string.format('%.17g', clock), 'epoch', string.format('%.17g', stored))
return 1
"""

_SINCE = _WHOLE + """
local meta = redis.call('HMGET', KEYS[1], 'clock', 'epoch', 'gen', 'seq', 'floor')
local seq, floor, since = whole(meta[4]), whole(meta[5] or '0'), whole(ARGV[2])
local kind = redis.call('TYPE', KEYS[3])['ok']
local head = {meta[1], meta[2], meta[3], tostring(seq or 0)}
if seq == nil or floor == nil or (kind ~= 'zset' and kind ~= 'none') then
  head[3] = false  -- marks not ours to trust: give none (the next merge starts a new generation)
end
if head[3] == false or meta[3] ~= ARGV[1] or since == nil or since < floor or since > seq then
  head[5] = 'all'
  head[6] = redis.call('HGETALL', KEYS[2])
  return head
end
local keys = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. ARGV[2], '+inf')
local values = {}
for first = 1, #keys, 1000 do
  local got = redis.call('HMGET', KEYS[2], unpack(keys, first, math.min(#keys, first + 999)))
  for j = 1, #got do values[#values + 1] = got[j] end
end
head[5] = 'since'
head[6] = keys
head[7] = values
return head
"""

KEPT_MERGES = 4096
"""Change marks of this many merges are kept in Redis; a sync whose mark is older loads everything."""

SCHEMA_VERSION = 1


_NUMBER = re.compile(rb"-?[0-9]+\.?[0-9]*(?:[eE][+-]?[0-9]+)?")
"""What the merge script writes (``%.17g``) and reads back (its ``finite``): the same rule on both sides."""


def _number(raw: bytes | None, absent: float | None) -> float | None:
    """The finite number Redis holds in ``raw`` (``absent`` when there is none); ``None`` when ``raw`` is
    anything else (text, hex, NaN, an infinity), so one bad value never fails a load."""
    if raw is None:
        return absent
    if not isinstance(raw, bytes) or _NUMBER.fullmatch(raw) is None:
        return None
    value = float(raw)
    return value if math.isfinite(value) else None


def pattern_keys(fingerprint: str, prefix: str = "ft:pat") -> tuple[str, str, str, str]:
    """The meta key, the counts key, the prefix of merge markers and the change marks of ``fingerprint`` (one
    hash slot)."""
    tag = f"{{{prefix}:{fingerprint}}}"
    return f"{tag}:meta", f"{tag}:counts", f"{tag}:done:", f"{tag}:changes"


class RedisPatternStore:
    """A :class:`~forethought.predictors.patterns.store.PatternStore` in Redis, shared by every worker.

    ``client`` is a synchronous ``redis.Redis`` (``from_url`` builds one with short timeouts). Errors reaching
    Redis raise :class:`~forethought.stores.errors.StoreUnavailableError`; wrap the store in
    :class:`~forethought.stores.fallback.FallbackPatternStore` to keep learning locally meanwhile.
    """

    def __init__(self, client: Any, prefix: str = "ft:pat", retries: int = RETRIES) -> None:
        self._client = client
        self._prefix = prefix
        self._retries = retries
        self._merge = client.register_script(_MERGE)
        self._since = client.register_script(_SINCE)
        self.merges = 0
        self.round_trips = 0
        self.skipped = 0
        """Counters left out of loads because Redis held no finite number (or no UTF-8 name) for them."""

    @classmethod
    def from_url(cls, url: str, socket_timeout_s: float = SOCKET_TIMEOUT_S,
                 prefix: str = "ft:pat") -> RedisPatternStore:
        """A store on a new client for ``url`` whose every call gives up after ``socket_timeout_s``."""
        import redis

        client = redis.Redis.from_url(url, socket_timeout=socket_timeout_s, socket_connect_timeout=socket_timeout_s,
                                      retry_on_timeout=False)
        return cls(client, prefix)

    def load_since(self, fingerprint: str, mark: str | None) -> CountsChanges:
        """The counters merged since ``mark`` (one round trip: a Lua script reads the change marks and the
        numbers together); everything, ``complete``, when the mark is of another generation (the store
        started empty again), older than the marks kept (:data:`KEPT_MERGES`) or from before a rebase."""
        meta_key, counts_key, _, changes_key = pattern_keys(fingerprint, self._prefix)
        parsed = split_mark(mark)
        generation, since = parsed if parsed is not None else ("", -1)
        with mapped_redis_errors("load patterns"):
            reply = self._since(keys=[meta_key, counts_key, changes_key], args=[generation, str(since)])
            self.round_trips += 1
        clock, epoch = _number(reply[0], 0.0), _number(reply[1], 0.0)
        if clock is None or epoch is None:
            raise StoreIntegrityError(f"load patterns: the clock or epoch of {fingerprint} is not a finite number")
        generation_now = reply[2].decode("ascii", "replace") if isinstance(reply[2], bytes) else ""
        new_mark = f"{generation_now}:{int(reply[3])}"
        values = self._numbers(zip(reply[5][::2], reply[5][1::2], strict=True) if reply[4] == b"all"
                               else zip(reply[5], reply[6], strict=True))
        if reply[4] == b"all":
            return CountsChanges(clock, epoch, new_mark, {k: v for k, v in values.items() if v is not None}, True)
        return CountsChanges(clock, epoch, new_mark, values, False)

    def _numbers(self, pairs: Iterable[tuple[bytes, bytes | None]]) -> dict[str, float | None]:
        """The counters of ``(name, stored)`` pairs: ``None`` for one Redis does not hold (any more) or holds
        no finite number for (counted in :attr:`skipped`: the merge script reads it as 0, and its next merge
        repairs it); a name that is not UTF-8 is left out (and counted)."""
        values: dict[str, float | None] = {}
        for raw_key, raw_value in pairs:
            value = _number(raw_value, None)
            try:
                key = raw_key.decode("utf-8")
            except UnicodeDecodeError:
                self.skipped += 1
                continue
            if value is None and raw_value is not None:
                self.skipped += 1
            values[key] = value
        return values

    def load(self, fingerprint: str) -> CountsState:
        meta_key, counts_key, _, _ = pattern_keys(fingerprint, self._prefix)
        with mapped_redis_errors("load patterns"):
            pipe = self._client.pipeline(transaction=True)
            pipe.hmget(meta_key, "clock", "epoch")
            pipe.hgetall(counts_key)
            meta, counts = pipe.execute()
            self.round_trips += 1
        clock, epoch = _number(meta[0], 0.0), _number(meta[1], 0.0)
        if clock is None or epoch is None:
            raise StoreIntegrityError(f"load patterns: the clock or epoch of {fingerprint} is not a finite number")
        loaded = self._numbers(counts.items())
        values = {key: value for key, value in loaded.items() if value is not None}
        return CountsState(clock, epoch, values)

    def merge(self, fingerprint: str, deltas: Mapping[str, float], ticks: float, epoch: float,
              half_life: float | None, merge_id: str | None = None) -> None:
        """Add a batch atomically; ``merge_id`` (new by default) makes a repeat of the same batch a no-op. A
        counter whose name UTF-8 cannot encode (a lone surrogate) is left out, never failing the batch."""
        meta_key, counts_key, done_prefix, changes_key = pattern_keys(fingerprint, self._prefix)
        marker = done_prefix + (merge_id or uuid.uuid4().hex)
        args: list[Any] = [repr(float(ticks)), repr(float(epoch)), "" if half_life is None else repr(float(half_life)),
                           repr(REBASE_AFTER_HALF_LIVES), PLAIN_PREFIX, DONE_TTL_S, SCHEMA_VERSION,
                           uuid.uuid4().hex, KEPT_MERGES]  # the generation, if this merge is the store's first
        for key, delta in deltas.items():
            if storable_key(key):  # a name UTF-8 cannot encode is left out (the rest is merged)
                args += [key, repr(float(delta))]
        for attempt in range(self._retries + 1):
            try:
                with mapped_redis_errors("merge patterns"):
                    self._merge(keys=[meta_key, counts_key, marker, changes_key], args=args)
                    self.round_trips += 1
                break
            except StoreTimeoutError:
                raise  # a slow store is not retried: the caller falls back at once
            except StoreUnavailableError:
                if attempt == self._retries:
                    raise
        self.merges += 1

    def close(self) -> None:
        self._client.close()
