"""guard.py: the timer a store call runs under, the stores that are not timed again, and
the one store timeout a request pays.

Failures, the cool-down and hanging stores are tested through the cache in test_cache.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

from asyncache import DecisionCache, cached_prediction
from asyncache.engine._guard import StoreGuard, new_request
from asyncache.stats import CacheStats, RateLimitedLog
from asyncache.stores.redis import RedisStore

from ..servers import RedisServer
from ..support import GENEROUS_REDIS_TIMEOUTS


class SlowStore:
    """Answers after a few turns of the event loop: later than a zero timeout allows."""

    def __init__(self, *, enforces_timeouts: bool) -> None:
        self.enforces_timeouts = enforces_timeouts

    async def get(self) -> str:
        for _ in range(3):
            await asyncio.sleep(0)
        return "late"


def guard_of(store: object, stats: CacheStats) -> StoreGuard:
    return StoreGuard(
        store,
        timeout=0.0,  # expires at the call's first suspension
        failure_threshold=2,
        failure_cooldown=3600.0,
        stats=stats,
        log=RateLimitedLog(logging.getLogger("test_guard")),
    )


async def test_a_store_that_suspends_is_timed() -> None:
    stats = CacheStats()
    store = SlowStore(enforces_timeouts=False)
    guard = guard_of(store, stats)
    assert await guard.call("get", store.get) is None
    assert stats.errors == 1 and guard.reads.failures == 1 and not guard.cooling("get")


async def test_a_store_that_enforces_its_timeouts_is_not_timed_again() -> None:
    stats = CacheStats()
    store = SlowStore(enforces_timeouts=True)
    guard = guard_of(store, stats)
    assert await guard.call("get", store.get) == "late"
    assert stats.errors == 0
    # Read when the guard takes the store on, like the cache's store.
    store.enforces_timeouts = False
    assert await guard.call("get", store.get) == "late"
    guard.use(store)
    assert await guard.call("get", store.get) is None
    assert stats.errors == 1


async def test_only_a_true_flag_counts() -> None:
    store = SlowStore(enforces_timeouts=False)
    store.enforces_timeouts = "yes"  # type: ignore[assignment]
    guard = guard_of(store, CacheStats())
    assert await guard.call("get", store.get) is None


async def test_the_cooldown_skips_the_call_and_a_success_resets_the_count() -> None:
    stats = CacheStats()
    timed = SlowStore(enforces_timeouts=False)
    guard = guard_of(timed, stats)
    made: list[str] = []

    async def quick() -> str:
        made.append("quick")
        return "now"

    assert await guard.call("get", timed.get) is None
    assert guard.reads.failures == 1
    assert await guard.call("get", quick) == "now"
    assert guard.reads.failures == 0
    assert await guard.call("get", timed.get) is None
    assert await guard.call("get", timed.get) is None
    assert guard.cooling("get") and stats.errors == 3
    assert await guard.call("get", quick) is None  # the store is cooling down
    assert made == ["quick"] and stats.errors == 3


async def test_a_store_of_parts_that_fail_alone_never_cools_its_writes_as_a_whole() -> None:
    """A cluster's writes each go to their key's node: a dead primary's keys failing
    must not stop every other node's writes (whose decisions would then go unstored)."""
    stats = CacheStats()
    timed = SlowStore(enforces_timeouts=False)
    timed.isolates_failures = True  # type: ignore[attr-defined]
    guard = guard_of(timed, stats)

    async def stored() -> str:
        return "stored"

    for _ in range(5):
        new_request()  # each its own request: one that timed out skips its later writes
        assert await guard.call("add", timed.get) is None  # each one times out
    assert stats.errors == 5 and not guard.cooling("add")
    new_request()
    assert await guard.call("add", stored) == "stored"


async def test_a_request_pays_one_store_timeout(redis_server: RedisServer) -> None:
    """A stalled store costs a miss one timeout, not one per store call on its path.

    The miss path with leases makes three calls (get, acquire_lease, add): once
    the get timed out, the lease step and the add skip the store.
    """
    store = RedisStore.from_url(f"{redis_server.url}?{GENEROUS_REDIS_TIMEOUTS}", prefix="budget:")
    cache = DecisionCache(store, leases=True, store_timeout=0.3, failure_threshold=1000)
    runs: list[int] = []

    @cached_prediction(cache)
    async def predict(n: int) -> int:
        runs.append(n)
        return n * 2

    assert await predict(0) == 0  # connected
    assert redis_server.process is not None
    os.kill(redis_server.process.pid, signal.SIGSTOP)
    try:
        assert await predict(1) == 2
        assert cache.stats()["errors"] == 1  # the get timed out; nothing after it was tried
        # The next request has a budget of its own: its get is tried (and times out) again.
        assert await predict(2) == 4
        assert cache.stats()["errors"] == 2
    finally:
        os.kill(redis_server.process.pid, signal.SIGCONT)
    assert runs == [0, 1, 2]
    await cache.aclose()
    await store.aclose()
