"""RedisStore's auto-pipelining (adapters/redis/batches.py) on real servers and a real cluster.

Concurrent gets of one loop turn go out as one ``MGET`` (one per hash slot on
a cluster), concurrent adds as one pipeline, a lone get as a ``GET``; and each
caller keeps its own timeout, cancellation and failure accounting. What
reaches the server is counted by the server itself (``INFO commandstats``,
``INFO stats``), never by the client.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from asyncache import DecisionCache
from asyncache.errors import StoreError
from asyncache.stores import Entry

from ..servers import RedisServer
from ..support import IN_CI, key
from ..support.stores import command_calls

try:
    from redis.asyncio import Redis
    from redis.cluster import key_slot  # type: ignore[attr-defined]

    from asyncache.stores.redis import RedisStore
except ImportError:  # pragma: no cover - depends on the environment
    if IN_CI:
        raise
    pytest.skip("redis-py is not installed", allow_module_level=True)

HOUR = 3600.0


async def connections_received(client: Redis) -> int:
    return int((await client.info("stats"))["total_connections_received"])


@pytest.fixture
async def server_store(redis_server: RedisServer) -> AsyncIterator[tuple[RedisStore, Redis]]:
    """A store on a server of this test's own, and a client that counts what reached it."""
    store = RedisStore.from_url(redis_server.url, prefix="batches:")
    counter = Redis.from_url(redis_server.url)
    try:
        yield store, counter
    finally:
        await store.aclose()
        await counter.aclose()


async def connect(store: RedisStore) -> None:
    """Open the store's connections first: their handshakes are not what is counted."""
    await store.get(key(10_000))
    await asyncio.gather(*(store.get(key(10_000 + n)) for n in range(4)))
    await store.add(key(10_000), b"warm", time.time() + HOUR)
    await asyncio.gather(*(store.add(key(10_000 + n), b"warm", None) for n in range(4)))


class TestGets:
    async def test_concurrent_gets_of_one_turn_are_one_mget(
        self, server_store: tuple[RedisStore, Redis]
    ) -> None:
        store, counter = server_store
        expires_at = time.time() + HOUR
        await store.add_many([(key(n), b"v%d" % n, expires_at) for n in range(64)])
        await connect(store)
        await counter.config_resetstat()
        opened = await connections_received(counter)
        entries = await asyncio.gather(*(store.get(key(n)) for n in range(64)))
        assert entries == [Entry(b"v%d" % n, expires_at) for n in range(64)]
        calls = await command_calls(counter)
        # The first went out alone; the 63 that arrived while it was in flight, together.
        assert calls.get("get") == 1 and calls.get("mget") == 1
        assert await connections_received(counter) == opened  # no connection per get

    async def test_a_lone_get_is_a_get(self, server_store: tuple[RedisStore, Redis]) -> None:
        store, counter = server_store
        await store.add(key(1), b"one", None)
        await connect(store)
        await counter.config_resetstat()
        for _ in range(3):
            assert await store.get(key(1)) == Entry(b"one", None)
        calls = await command_calls(counter)
        assert calls.get("get") == 3 and "mget" not in calls

    async def test_a_hot_key_asked_for_by_many_is_read_once(
        self, server_store: tuple[RedisStore, Redis]
    ) -> None:
        store, counter = server_store
        await store.add(key(1), b"hot", None)
        await connect(store)
        await counter.config_resetstat()
        entries = await asyncio.gather(*(store.get(key(1)) for _ in range(50)))
        assert entries == [Entry(b"hot", None)] * 50
        calls = await command_calls(counter)
        assert calls.get("get") == 1 and calls.get("mget") == 1
        mget = (await counter.info("commandstats"))["cmdstat_mget"]
        assert mget["calls"] == 1

    async def test_a_caller_that_stops_waiting_leaves_the_others_their_answers(
        self, server_store: tuple[RedisStore, Redis]
    ) -> None:
        store, _ = server_store
        await store.add_many([(key(n), b"v%d" % n, None) for n in range(8)])
        await connect(store)
        tasks = [asyncio.ensure_future(store.get(key(n))) for n in range(8)]
        await asyncio.sleep(0)  # every task joined: the first alone, seven in a batch
        tasks[3].cancel()
        done = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(done[3], asyncio.CancelledError)
        assert [d for i, d in enumerate(done) if i != 3] == [
            Entry(b"v%d" % n, None) for n in range(8) if n != 3
        ]


class TestAdds:
    async def test_concurrent_adds_are_one_pipeline_and_the_first_writer_wins(
        self, server_store: tuple[RedisStore, Redis]
    ) -> None:
        store, counter = server_store
        await connect(store)
        await counter.config_resetstat()
        opened = await connections_received(counter)
        conflicts = store.stats()["conflicts"]
        expires_at = time.time() + HOUR
        winners = await asyncio.gather(
            *(store.add(key(n % 16), b"w%d" % n, expires_at) for n in range(64))
        )
        # Each key's first add won; every later one got that winner back.
        assert winners == [Entry(b"w%d" % (n % 16), expires_at) for n in range(64)]
        assert (await command_calls(counter)).get("set") == 64
        # 64 commands at once over at most two connections: the lone add's and the batch's.
        assert await connections_received(counter) == opened
        assert store.stats()["conflicts"] - conflicts == 48


class TestPerCall:
    async def test_a_paused_server_times_out_each_caller_alone(
        self, redis_server: RedisServer
    ) -> None:
        store = RedisStore.from_url(redis_server.url, prefix="paused:")
        admin = Redis.from_url(redis_server.url)
        cache = DecisionCache(store, store_timeout=0.1, failure_threshold=10_000)
        computed = 0

        async def compute() -> str:
            nonlocal computed
            computed += 1
            return "computed"

        try:
            await connect(store)
            await admin.client_pause(1500)
            results = await asyncio.gather(
                *(cache.get_or_compute(key(n), compute) for n in range(32))
            )
            assert results == ["computed"] * 32 and computed == 32
            stats = cache.stats()
            assert stats["misses"] == 32 and stats["hits"] == 0
            assert stats["errors"] >= 32  # every read timed out (and the writes too)
        finally:
            await admin.client_unpause()
            await cache.aclose()
            await store.aclose()
            await admin.aclose()

    async def test_a_killed_server_makes_every_batched_get_a_miss(
        self, redis_server: RedisServer
    ) -> None:
        store = RedisStore.from_url(redis_server.url, prefix="killed:", retries=0)
        cache = DecisionCache(store, failure_threshold=10_000)

        async def compute() -> str:
            return "computed"

        try:
            await connect(store)
            redis_server.kill()
            results = await asyncio.gather(
                *(cache.get_or_compute(key(n), compute) for n in range(16))
            )
            assert results == ["computed"] * 16
            stats = cache.stats()
            assert stats["misses"] == 16 and stats["errors"] >= 16
            with pytest.raises(StoreError):
                await asyncio.gather(*(store.get(key(n)) for n in range(4)))
        finally:
            await cache.aclose()
            await store.aclose()


class TestCluster:
    async def test_concurrent_gets_are_one_mget_per_slot(
        self, redis_cluster_url: str, redis_prefix: str
    ) -> None:
        store = RedisStore.from_url(redis_cluster_url, prefix=redis_prefix)
        nodes = redis_cluster_url.removeprefix("redis+cluster://").split(",")
        counters = [Redis.from_url(f"redis://{node}") for node in nodes]
        try:
            expires_at = time.time() + HOUR
            await store.add_many([(key(n), b"c%d" % n, expires_at) for n in range(40)])
            await store.get(key(0))
            for counter in counters:
                await counter.config_resetstat()
            entries = await asyncio.gather(*(store.get(key(n)) for n in range(40)))
            assert entries == [Entry(b"c%d" % n, expires_at) for n in range(40)]
            calls = await command_calls(*counters)
            # On a cluster even the first is gathered (so that reads go out per node:
            # test_redis_cluster_faults): one MGET per slot the keys fall in.
            slots = {key_slot(redis_prefix.encode() + key(n)) for n in range(40)}
            assert calls.get("get") is None
            assert calls.get("mget") == len(slots)
        finally:
            await store.clear()
            await store.aclose()
            for counter in counters:
                await counter.aclose()
