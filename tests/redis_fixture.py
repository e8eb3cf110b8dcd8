"""A real ``redis-server`` for tests: started on 127.0.0.1 on a free port, stopped afterwards.

``redis_server`` (module scope) yields a :class:`~forethought.stores.server.RedisServer` that tests may stop
and start again on the same port (the fault tests do). Tests skip, saying why, when no ``redis-server``
binary is installed (``make redis-server`` installs it) or the redis-py client is missing.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from forethought.stores.server import RedisServer, free_port, redis_binary

__all__ = ["RedisServer", "free_port", "redis_server", "redis_url"]


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A running redis-server for the module's tests (skips when the binary or redis-py is missing)."""
    pytest.importorskip("redis", reason="redis-py is not installed (pip install 'forethought[redis]')")
    if redis_binary() is None:
        pytest.skip("redis-server is not installed (run `make redis-server`: Debian package redis-server)")
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """The server's URL, with every key deleted before the test."""
    import redis

    if redis_server.process is None:
        redis_server.start()
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    yield redis_server.url
