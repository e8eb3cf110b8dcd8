"""Errors of shared stores, in the project's one family, and the mapping of redis-py's errors onto them.

Redis errors never leave :mod:`forethought.stores`: :func:`mapped_redis_errors` turns a command Redis
refused (``redis.ResponseError``) into :class:`StoreError`, and every other ``redis.RedisError`` (and the
socket errors beneath them) into :class:`StoreUnavailableError` (:class:`StoreTimeoutError` for timeouts).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from forethought.errors import ForethoughtError


class StoreError(ForethoughtError):
    """A shared store (Redis) could not do what was asked."""


class StoreUnavailableError(StoreError):
    """The shared store is unreachable, timed out, or answered with an error; callers fall back to local."""


class StoreTimeoutError(StoreUnavailableError):
    """The shared store did not answer within its socket timeout (it may still have applied the command)."""


class StoreIntegrityError(StoreError):
    """A value read from the shared store failed its authentication (HMAC) or could not be decoded."""


class StoreExpiredError(StoreIntegrityError):
    """A sealed value read past the expiry its seal carries (someone put it back without its TTL)."""


@contextlib.contextmanager
def mapped_redis_errors(what: str) -> Iterator[None]:
    """Map redis-py's errors (and OS socket errors) raised inside to :class:`StoreUnavailableError`."""
    import redis

    try:
        yield
    except (redis.TimeoutError, TimeoutError) as exc:
        raise StoreTimeoutError(f"{what}: timed out: {exc}") from exc
    except redis.ResponseError as exc:
        raise StoreError(f"{what}: refused: {exc}") from exc
    except (redis.RedisError, OSError) as exc:
        raise StoreUnavailableError(f"{what}: {type(exc).__name__}: {exc}") from exc
