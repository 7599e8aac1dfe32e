"""One cache shared by several threads, each running an event loop of its own.

Flights are per event loop: the identical misses of one loop run the model
once, each loop coalesces its own callers, and the store's ``add`` (first
decision wins) settles what every loop keeps. No caller of one loop waits on a
flight of another loop, whose event it could never be woken by.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from asyncache import DecisionCache, MemoryStore, cached_prediction
from asyncache.stores import DecisionStore

from ..support import GENEROUS_REDIS_TIMEOUTS

THREADS = 8
CALLERS = 5  # concurrent callers per thread, all for the same keys
KEYS = ["refund", "invoice", "upgrade"]
# Far longer than any test here: a thread stuck on another loop's flight would wait this.
COALESCE_TIMEOUT = 300.0
JOIN = 60.0  # seconds the threads may take in all before one counts as stuck


def _memory(tmp_path: Path, redis_url: Callable[[], str]) -> DecisionStore:
    return MemoryStore()


def _sqlite(tmp_path: Path, redis_url: Callable[[], str]) -> DecisionStore:
    from asyncache.stores.sqlite import SQLiteStore

    return SQLiteStore(tmp_path / "cache.db")


def _redis(tmp_path: Path, redis_url: Callable[[], str]) -> DecisionStore:
    from asyncache.stores.redis import RedisStore

    return RedisStore.from_url(
        f"{redis_url()}/0?prefix=loops-{tmp_path.name}:&{GENEROUS_REDIS_TIMEOUTS}"
    )


@pytest.fixture(params=[_memory, _sqlite, _redis], ids=["memory", "sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DecisionStore]:
    def redis_url() -> str:
        url: str = request.getfixturevalue("redis_url")
        return url

    yield request.param(tmp_path, redis_url)


def _run_threads(target: Callable[[int], None]) -> list[BaseException]:
    """Run ``target(i)`` in ``THREADS`` threads at once; the failures, and any thread stuck."""
    failures: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def run(i: int) -> None:
        try:
            start.wait(JOIN)
            target(i)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + JOIN
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [thread.name for thread in threads if thread.is_alive()]
    if stuck:
        failures.append(AssertionError(f"threads stuck on another loop's flight: {stuck}"))
    return failures


@pytest.mark.timeout(150)
def test_threads_each_running_a_loop_share_one_cache(store: DecisionStore) -> None:
    cache = DecisionCache(store, ttl=3600, coalesce_timeout=COALESCE_TIMEOUT)
    runs: dict[str, int] = dict.fromkeys(KEYS, 0)
    lock = threading.Lock()
    answers: list[tuple[int, str, str]] = []

    @cached_prediction(cache)
    async def predict(text: str) -> str:
        with lock:
            runs[text] += 1
        await asyncio.sleep(0.05)
        return text.upper()

    def one_thread(i: int) -> None:
        async def main() -> None:
            async def ask(text: str) -> None:
                answer = await predict(text)
                with lock:
                    answers.append((i, text, answer))

            await asyncio.gather(*(ask(text) for text in KEYS for _ in range(CALLERS)))
            # Every key is stored by now (here or by another loop): a hit.
            assert await predict(KEYS[0]) == KEYS[0].upper()

        asyncio.run(main())

    failures = _run_threads(one_thread)
    asyncio.run(cache.aclose())
    assert failures == []
    assert sorted(answers) == sorted(
        (i, text, text.upper()) for i in range(THREADS) for text in KEYS for _ in range(CALLERS)
    )
    # Each loop coalesced its own callers: at most one run per key per loop.
    assert all(1 <= count <= THREADS for count in runs.values()), runs
    assert cache.stats()["errors"] == 0


def test_a_trio_loop_is_told_apart_by_its_own_token() -> None:
    """``current_loop`` under trio is trio's token, on every anyio from the floor (4.0,
    where ``current_token()`` is the token itself) to the newest (an ``EventLoopToken``
    wrapping it): a flight belongs to one loop, and two trio runs are two loops."""
    import trio

    from asyncache._runtime import current_loop

    seen: list[object] = []

    async def main() -> None:
        seen.append(current_loop())
        assert seen[-1] is trio.lowlevel.current_trio_token()

    trio.run(main)
    trio.run(main)
    assert seen[0] is not seen[1]
    with pytest.raises(RuntimeError, match="no event loop"):
        current_loop()


@pytest.mark.timeout(150)
def test_loops_that_evict_while_others_read_raise_nothing() -> None:
    """More keys than the store and the hit memories hold, read in shuffled orders by
    eight loops at once: the LRU and the memories evict all the time under each
    other's reads (a short switch interval makes the threads interleave inside them)."""
    import random
    import sys

    from asyncache.engine._memo import ENTRIES
    from asyncache.keys import RECENT_KEYS

    keys = max(ENTRIES, RECENT_KEYS) * 2
    cache = DecisionCache(MemoryStore(max_entries=keys // 4))

    @cached_prediction(cache)
    async def predict(text: str) -> dict[str, list[bool]]:
        return {"answers": [len(text) % 2 == 0, True]}

    errors: list[BaseException] = []

    def one_thread(i: int) -> None:
        async def main() -> None:
            order = random.Random(i)
            texts = [f"question {n}" for n in range(keys)]
            for call in range(6_000):
                text = texts[order.randrange(keys)]
                try:
                    assert await predict(text) == {"answers": [len(text) % 2 == 0, True]}
                except Exception as exc:
                    errors.append(exc)
                if call % 64 == 0:
                    await asyncio.sleep(0)

        asyncio.run(main())

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        failures = _run_threads(one_thread)
    finally:
        sys.setswitchinterval(interval)
    assert failures == [] and errors == []
    store = cache.store
    assert isinstance(store, MemoryStore) and len(store) <= keys // 4
    recent = cache.engine.recent
    assert len(recent.records) <= ENTRIES
    assert recent.held == sum(record.held for record in recent.records.values())
