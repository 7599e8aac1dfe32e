"""One RedisStore used from several event loops, one after another and side by side.

A redis-py client belongs to the loop its connections were made on; the store
keeps one per loop. Each test here runs its own loops (``asyncio.run`` in this
thread or another), as a script or a test suite with a loop per test would.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from asyncache.errors import StoreError
from asyncache.stores import Entry, TieredStore, open_store

from ..support import IN_CI, key

try:
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster

    from asyncache.stores.redis import RedisStore
except ImportError:  # pragma: no cover - depends on the environment
    if IN_CI:
        raise
    pytest.skip("redis-py is not installed", allow_module_level=True)


def in_thread(work: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """``asyncio.run(work())`` on a thread of its own (its own loop); its result."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = asyncio.run(work())
        except BaseException as exc:  # handed to the caller
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the thread's loop did not finish"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def sweep(url: str, prefix: str) -> None:
    async def clear() -> None:
        async with RedisStore.from_url(url, prefix=prefix) as sweeper:
            await sweeper.clear()

    asyncio.run(clear())


async def visit(store: RedisStore, n: int) -> list[Entry | None]:
    """Add entry ``n`` and read entries 0..n: what this loop and the earlier ones added."""
    assert await store.add(key(n), b"v%d" % n, None) == Entry(b"v%d" % n, None)
    return await store.get_many([key(i) for i in range(n + 1)])


def expected(n: int) -> list[Entry | None]:
    return [Entry(b"v%d" % i, None) for i in range(n + 1)]


def test_one_store_serves_asyncio_run_after_asyncio_run_and_a_thread(
    redis_url: str, redis_prefix: str
) -> None:
    store = RedisStore.from_url(redis_url, prefix=redis_prefix)
    try:
        assert asyncio.run(visit(store, 0)) == expected(0)
        assert asyncio.run(visit(store, 1)) == expected(1)  # was: "Event loop is closed"
        assert in_thread(lambda: visit(store, 2)) == expected(2)
        assert asyncio.run(store.get(key(2))) == Entry(b"v2", None)
        assert asyncio.run(store.count()) == 3
        assert store.stats()["in_flight"] == 0
    finally:
        asyncio.run(store.aclose())
        sweep(redis_url, redis_prefix)


def test_loops_side_by_side_each_get_a_client(redis_url: str, redis_prefix: str) -> None:
    store = RedisStore.from_url(redis_url, prefix=redis_prefix)

    async def main() -> None:
        assert await store.add(key(0), b"main", None) == Entry(b"main", None)
        main_client = store.client
        # Another loop, in a thread, while this one runs.
        seen = await asyncio.to_thread(in_thread, lambda: visit(store, 1))
        assert seen == [Entry(b"main", None), Entry(b"v1", None)]
        assert store.client is main_client
        assert await store.get(key(1)) == Entry(b"v1", None)
        await store.aclose()

    try:
        asyncio.run(main())
    finally:
        sweep(redis_url, redis_prefix)


def test_a_lent_redis_client_serves_its_loop_and_a_copy_serves_the_next(
    redis_url: str, redis_prefix: str
) -> None:
    client = Redis.from_url(redis_url)
    store = RedisStore(client, prefix=redis_prefix)

    async def first() -> None:
        assert await visit(store, 0) == expected(0)
        assert store.client is client
        await client.aclose()  # the lender closes its client on its loop

    async def second() -> None:
        assert await visit(store, 1) == expected(1)
        copy = store.client
        assert isinstance(copy, Redis) and copy is not client
        settings = ("host", "port", "db", "socket_timeout")
        mine, lent = (
            copy.connection_pool.connection_kwargs,
            client.connection_pool.connection_kwargs,
        )
        assert [mine.get(name) for name in settings] == [lent.get(name) for name in settings]
        await store.aclose()  # closes the copy, which the store owns

    try:
        asyncio.run(first())
        asyncio.run(second())
    finally:
        sweep(redis_url, redis_prefix)


def test_a_cluster_store_from_a_url_serves_every_loop(
    redis_cluster_url: str, redis_prefix: str
) -> None:
    store = RedisStore.from_url(redis_cluster_url, prefix=redis_prefix)
    try:
        assert asyncio.run(visit(store, 0)) == expected(0)
        assert asyncio.run(visit(store, 1)) == expected(1)
        assert in_thread(lambda: visit(store, 2)) == expected(2)
    finally:
        asyncio.run(store.aclose())
        sweep(redis_cluster_url, redis_prefix)


def test_a_lent_cluster_client_on_another_loop_says_what_to_do(
    redis_cluster_url: str, redis_prefix: str
) -> None:
    nodes = redis_cluster_url.removeprefix("redis+cluster://").split(",")
    host, port = nodes[0].rsplit(":", 1)

    async def first() -> None:
        client = RedisCluster(host=host, port=int(port))
        store = RedisStore(client, prefix=redis_prefix)
        assert await store.get(key(0)) is None
        await client.aclose()
        with pytest.raises(StoreError, match="give RedisStore a function"):
            in_thread(lambda: store.get(key(0)))
        await store.aclose()

    asyncio.run(first())

    made: list[RedisCluster] = []

    def factory() -> RedisCluster:
        made.append(RedisCluster(host=host, port=int(port)))
        return made[-1]

    store = RedisStore(factory, prefix=redis_prefix)
    assert asyncio.run(visit(store, 0)) == expected(0)
    assert asyncio.run(visit(store, 1)) == expected(1)
    assert len(made) == 2  # one client per loop
    asyncio.run(store.aclose())
    sweep(redis_cluster_url, redis_prefix)


def test_a_closed_store_refuses_calls(redis_url: str, redis_prefix: str) -> None:
    store = RedisStore.from_url(redis_url, prefix=redis_prefix)

    async def use_then_close() -> None:
        await store.get(key(0))
        await store.aclose()
        with pytest.raises(StoreError, match="closed"):
            await store.get(key(0))

    asyncio.run(use_then_close())
    with pytest.raises(StoreError, match="closed"):
        asyncio.run(store.add(key(0), b"v", None))


def test_a_tier_over_redis_serves_every_loop(redis_url: str, redis_prefix: str) -> None:
    tier = open_store(f"tiered+{redis_url}?prefix={redis_prefix}")
    assert isinstance(tier, TieredStore)
    try:
        asyncio.run(tier.add(key(0), b"tiered", None))
        assert in_thread(lambda: tier.l2.get(key(0))) == Entry(b"tiered", None)
        assert asyncio.run(tier.get(key(0))) == Entry(b"tiered", None)
    finally:
        asyncio.run(tier.aclose())
        sweep(redis_url, redis_prefix)


# A loop that ends while its tier is still subscribing: asyncio.run cancels the
# listener once, redis-py 8.1 can swallow that cancellation inside SUBSCRIBE, and
# the listener went on forever, so asyncio.run (and the process) never returned.
# It took a handful of rounds to hit; forty make it near certain.
ROUNDS_SCRIPT = """
import asyncio, sys
from asyncache.stores import open_store
for i in range(40):
    tier = open_store(f"tiered+{sys.argv[1]}?prefix={sys.argv[2]}{i}:")
    asyncio.run(tier.get(b"k" * 32))
print("ended")
"""


def test_loops_that_end_while_their_tier_subscribes_each_return(
    redis_url: str, redis_prefix: str
) -> None:
    try:
        ended = subprocess.run(
            [sys.executable, "-c", ROUNDS_SCRIPT, redis_url, redis_prefix],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"an asyncio.run did not return: {exc.stdout!r}")
    assert ended.stdout.strip() == "ended", ended.stderr


# -- a store shared by tests, each with a loop of its own (pytest-asyncio's default)


@pytest.fixture(scope="module")
def shared_store(redis_url: str) -> Iterator[RedisStore]:
    prefix = f"asyncache-test:{uuid.uuid4().hex[:12]}:"
    store = RedisStore.from_url(redis_url, prefix=prefix)
    try:
        yield store
    finally:
        asyncio.run(store.aclose())
        sweep(redis_url, prefix)


async def test_a_shared_store_in_one_test(shared_store: RedisStore) -> None:
    await shared_store.add(key(100), b"first test", None)
    assert await shared_store.get(key(100)) == Entry(b"first test", None)


async def test_a_shared_store_in_the_next_test(shared_store: RedisStore) -> None:
    await shared_store.add(key(101), b"next test", None)
    assert await shared_store.get(key(101)) == Entry(b"next test", None)
