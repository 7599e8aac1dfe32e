"""Tiers in front of one Redis drop their copies when any of them clears or deletes.

Two ``TieredStore`` replicas over one redis-server, each with a ``RedisStore``
of its own, stand for two processes. Waits poll with a bounded number of looks;
nothing asserts on wall time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import pytest

from asyncache.stores import Entry
from asyncache.stores.memory import MemoryStore
from asyncache.stores.tiered import TieredStore

from ..servers import RedisServer
from ..support import IN_CI, key, until

try:
    from redis.asyncio import Redis

    from asyncache.stores.redis import RedisStore
except ImportError:  # pragma: no cover - depends on the environment
    if IN_CI:
        raise
    pytest.skip("redis-py is not installed", allow_module_level=True)

HOUR_TTL = 3600.0

# On redis-server and on Valkey (tests/conftest.py).
pytestmark = pytest.mark.engines


def replica(url: str, prefix: str) -> TieredStore:
    """One process's tier: its own memory L1 and its own RedisStore."""
    return TieredStore(MemoryStore(), RedisStore.from_url(url, prefix=prefix), l1_ttl=HOUR_TTL)


async def subscribed(url: str, channel: bytes, count: int) -> None:
    admin = Redis.from_url(url)
    try:

        async def enough() -> bool:
            return int((await admin.pubsub_numsub(channel))[0][1]) >= count

        await until(enough, f"{count} subscriptions to {channel!r}")
    finally:
        await admin.aclose()


async def copied(tier: TieredStore, k: bytes, value: bytes) -> None:
    """Read ``k`` through ``tier`` until its L1 holds a copy of ``value``."""

    async def held() -> bool:
        entry = await tier.get(k)
        assert entry is not None and entry.value == value
        copy = tier.l1.get_now(k)
        return copy is not None and copy.value == value

    await until(held, f"an L1 copy of {value!r}")


async def served(tier: TieredStore, k: bytes, value: bytes) -> None:
    async def now_serves() -> bool:
        entry = await tier.get(k)
        return entry is not None and entry.value == value

    await until(now_serves, f"the tier to serve {value!r}")


@pytest.fixture
async def replicas(redis_url: str, redis_prefix: str) -> AsyncIterator[list[TieredStore]]:
    tiers = [replica(redis_url, redis_prefix) for _ in range(2)]
    try:
        yield tiers
    finally:
        await tiers[0].clear()
        for tier in tiers:
            await tier.aclose()


async def test_a_clear_on_one_replica_reaches_the_copies_of_another(
    replicas: list[TieredStore], redis_url: str, redis_prefix: str
) -> None:
    first, second = replicas
    await first.add(key(1), b"first", None)
    await first.add(key(2), b"kept apart", None)
    for tier in replicas:
        await copied(tier, key(1), b"first")
    await subscribed(redis_url, (redis_prefix + "invalidated").encode(), 2)
    for tier in replicas:  # the subscriptions' own clean sweep may have dropped them
        await copied(tier, key(1), b"first")

    await first.clear()
    assert await first.add(key(1), b"second", None) == Entry(b"second", None)
    # Before: the other replica served "first" from L1 for up to l1_ttl (an hour here).
    await served(second, key(1), b"second")
    assert second.l1.get_now(key(2)) is None
    assert second.stats()["invalidations"] > 0


async def test_a_delete_on_one_replica_reaches_the_copies_of_another(
    replicas: list[TieredStore], redis_url: str, redis_prefix: str
) -> None:
    first, second = replicas
    await first.add(key(1), b"first", None)
    await first.add(key(2), b"other", None)
    await second.get(key(0))  # starts its subscription
    await subscribed(redis_url, (redis_prefix + "invalidated").encode(), 1)
    await copied(second, key(1), b"first")
    await copied(second, key(2), b"other")

    await first.delete(key(1))
    await first.add(key(1), b"recomputed", None)
    await served(second, key(1), b"recomputed")
    assert second.l1.get_now(key(2)) is not None  # a delete drops only its own key


async def test_an_eviction_the_server_announces_reaches_the_copies(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    admin = Redis.from_url(redis_server.url)
    tier = replica(redis_server.url, redis_prefix)
    try:
        await admin.config_set("notify-keyspace-events", "Ee")
        await tier.add(key(1), b"evicted", None)
        await tier.get(key(0))  # starts the subscription
        await subscribed(redis_server.url, (redis_prefix + "invalidated").encode(), 1)
        await copied(tier, key(1), b"evicted")
        # Memory pressure: Redis evicts keys until this one is gone.
        used = int((await admin.info("memory"))["used_memory"])
        await admin.config_set("maxmemory-policy", "allkeys-random")
        await admin.config_set("maxmemory", str(used + 200_000))
        name = redis_prefix.encode() + key(1)
        for n in range(20_000):
            await admin.set(f"filler:{n}", b"x" * 1000)
            if not await admin.exists(name):
                break
        assert not await admin.exists(name), "Redis never evicted the entry"

        async def dropped() -> bool:
            return tier.l1.get_now(key(1)) is None

        await until(dropped, "the eviction to reach L1")
    finally:
        await tier.aclose()
        await admin.aclose()


class _AnnouncingStore(MemoryStore):
    """An L2 that announces invalidations, and can announce one in the middle of a read."""

    def __init__(self) -> None:
        super().__init__()
        self.callbacks: list[Callable[[bytes | None], Awaitable[object]]] = []
        self.announce_during_read: bytes | None = None

    def subscribe_invalidations(
        self, callback: Callable[[bytes | None], Awaitable[object]]
    ) -> Callable[[], None]:
        self.callbacks.append(callback)
        return lambda: self.callbacks.remove(callback)

    async def _announce(self) -> None:
        if self.announce_during_read is not None:
            for callback in self.callbacks:
                await callback(self.announce_during_read or None)

    async def get(self, key: bytes) -> Entry | None:
        entry = await super().get(key)
        await self._announce()
        return entry

    async def get_many(self, keys: Sequence[bytes]) -> list[Entry | None]:
        entries = await super().get_many(keys)
        await self._announce()
        return entries


async def test_a_read_that_spans_an_invalidation_is_not_copied() -> None:
    l2 = _AnnouncingStore()
    tier = TieredStore(MemoryStore(), l2, l1_ttl=None)
    await l2.add(key(1), b"read before the clear", None)
    l2.announce_during_read = b""  # a clear lands while the read is in flight
    assert await tier.get(key(1)) == Entry(b"read before the clear", None)
    assert await tier.get_many([key(1)]) == [Entry(b"read before the clear", None)]
    assert tier.l1.get_now(key(1)) is None
    l2.announce_during_read = None
    await tier.get(key(1))
    assert tier.l1.get_now(key(1)) is not None
    await l2.callbacks[0](key(1))  # a delete elsewhere
    assert tier.l1.get_now(key(1)) is None
    await tier.aclose()
    assert l2.callbacks == []  # aclose unsubscribes
