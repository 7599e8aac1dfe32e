"""deadlines.py: store calls share one timer per tick, and keep a timeout each.

Through ``StoreGuard`` (the engine's one way to its store), on asyncio.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from asyncache.engine._guard import Deadlines, StoreGuard
from asyncache.stats import CacheStats, RateLimitedLog


class Store:
    """Answers after one turn of the loop, or never when ``hang`` is set."""

    def __init__(self) -> None:
        self.hang = False
        self.started = 0

    async def get(self) -> str:
        self.started += 1
        if self.hang:
            await asyncio.Event().wait()
        await asyncio.sleep(0)
        return "answer"


def guard_of(store: object, stats: CacheStats, timeout: float) -> StoreGuard:
    return StoreGuard(
        store,
        timeout=timeout,
        failure_threshold=10_000,
        failure_cooldown=1.0,
        stats=stats,
        log=RateLimitedLog(logging.getLogger("test_deadlines")),
    )


def count_timers(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The delays of the timers the running loop schedules from now on."""
    loop = asyncio.get_running_loop()
    scheduled: list[float] = []
    call_at = loop.call_at

    def counting(when: float, callback: Any, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        scheduled.append(when - loop.time())
        return call_at(when, callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_at", counting)
    return scheduled


async def test_calls_of_one_tick_share_one_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    store, stats = Store(), CacheStats()
    guard = guard_of(store, stats, timeout=10.0)
    assert await guard.call("get", store.get) == "answer"  # learns that the store waits
    timers = count_timers(monkeypatch)
    for _ in range(200):
        assert await guard.call("get", store.get) == "answer"
    assert (
        await asyncio.gather(*(guard.call("get", store.get) for _ in range(200)))
        == ["answer"] * 200
    )
    # asyncio.timeout would have scheduled 400; one tick is 10 / 16 s.
    assert len(timers) <= 2
    assert stats.errors == 0


async def test_every_waiting_call_times_out_and_is_counted() -> None:
    store, stats = Store(), CacheStats()
    guard = guard_of(store, stats, timeout=0.05)
    assert await guard.call("get", store.get) == "answer"
    store.hang = True
    results = await asyncio.gather(*(guard.call("get", store.get) for _ in range(20)))
    assert results == [None] * 20
    assert stats.errors == 20 and guard.reads.failures == 20
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    store, stats = Store(), CacheStats()
    guard = guard_of(store, stats, timeout=10.0)
    assert await guard.call("get", store.get) == "answer"
    store.hang = True
    waiting = asyncio.ensure_future(guard.call("get", store.get))
    await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert stats.errors == 0  # not counted as a store failure


async def test_a_call_that_answers_in_time_is_not_stopped() -> None:
    class Slow:
        async def get(self) -> str:
            await asyncio.sleep(0.05)
            return "slow"

    store, stats = Slow(), CacheStats()
    guard = guard_of(store, stats, timeout=2.0)
    assert await asyncio.gather(*(guard.call("get", store.get) for _ in range(10))) == ["slow"] * 10
    assert stats.errors == 0


def test_short_timeouts_get_a_timer_each_and_ticks_are_a_sixteenth() -> None:
    assert not Deadlines(0.01).shared
    shared = Deadlines(1.0)
    assert shared.shared and shared.tick == 1.0 / 16
