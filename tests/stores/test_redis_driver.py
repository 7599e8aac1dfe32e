"""The store's view of redis-py (``stores/redis/driver.py``) matches the installed release.

Run at both ends of the supported range (CI: redis-py 5.0.1 and the newest): each
feature check must name what this release has, and the store must work through it.
"""

from __future__ import annotations

import inspect

import pytest

from ..support import IN_CI

try:
    import redis
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster
    from redis.asyncio.connection import ConnectionPool

    from asyncache.stores.redis import RedisStore, driver
except ImportError:  # pragma: no cover - depends on the environment
    if IN_CI:
        raise
    pytest.skip("redis-py is not installed", allow_module_level=True)

VERSION = tuple(int(part) for part in redis.__version__.split(".")[:2])


def test_the_pool_check_names_what_get_connection_takes() -> None:
    parameter = inspect.signature(ConnectionPool.get_connection).parameters.get("command_name")
    required = parameter is not None and parameter.default is inspect.Parameter.empty
    assert driver.POOL_NEEDS_COMMAND is required
    if VERSION < (6, 0):
        assert driver.POOL_NEEDS_COMMAND


def test_the_refresh_check_names_what_the_cluster_client_has() -> None:
    has = (
        all(hasattr(RedisCluster, name) for name in ("_initialize_due", "_request_refresh"))
        and "topology_refresh_min_interval" in inspect.signature(RedisCluster.__init__).parameters
    )
    assert driver.BACKGROUND_REFRESH is has
    options = driver.cluster_options()
    assert ("topology_refresh_min_interval" in options) is driver.BACKGROUND_REFRESH
    if VERSION <= (8, 1):
        assert not driver.BACKGROUND_REFRESH


def test_a_cluster_client_opens_on_this_release() -> None:
    # redis-py 5.0.1 and 8.1.0 refused the cluster URL at once (issue 32).
    store = RedisStore.from_url("redis+cluster://127.0.0.1:7000,127.0.0.1:7001")
    assert isinstance(store.client, driver.Cluster)


async def test_a_lone_get_takes_its_own_connection_on_this_release(
    redis_url: str, redis_prefix: str
) -> None:
    # On 5.0.1 every get failed: get_connection() missing 'command_name' (issue 32).
    store = RedisStore.from_url(redis_url, prefix=redis_prefix)
    try:
        assert isinstance(store.client, Redis)
        assert await store.get(b"absent") is None
        await store.add(b"k", b"v", None)
        entry = await store.get(b"k")
        assert entry is not None and entry.value == b"v"
        await store.clear()
    finally:
        await store.aclose()


async def test_a_held_connection_is_taken_as_this_release_wants(redis_url: str) -> None:
    pool = ConnectionPool.from_url(redis_url)
    try:
        connection = await driver.take_connection(pool)
        await connection.send_command("PING")
        assert await connection.read_response() in (b"PONG", "PONG", True)
        await pool.release(connection)
    finally:
        await pool.disconnect()
