"""flight.py and the engine's coalescing: identical misses run once, whoever gives up."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from asyncache import DecisionCache, MemoryStore
from asyncache.engine._flights import Flight, FlightTable

from ..support import until

K1, K2, K3, K4 = (bytes([i]) * 16 for i in range(1, 5))


class Model:
    """A model whose calls block until ``release()``; counts its calls."""

    def __init__(self, result: Any = None) -> None:
        self.calls = 0
        self.gate = asyncio.Event()
        self.result = {"label": "spam", "scores": [0.25, 0.75]} if result is None else result
        self.error: BaseException | None = None

    def release(self) -> None:
        self.gate.set()

    async def __call__(self) -> Any:
        self.calls += 1
        await self.gate.wait()
        if self.error is not None:
            raise self.error
        return self.result


# -- FlightTable -----------------------------------------------------------


async def test_flight_table_finishes_every_flight_whatever_the_work_does() -> None:
    table: FlightTable[int] = FlightTable()
    ok, forgotten, failing = table.claim(K1), table.claim(K2), table.claim(K3)

    async def records() -> None:
        ok.set_result(1)

    async def forgets() -> None:
        return None

    async def raises() -> None:
        raise KeyError("model broke")

    table.start([K1], [ok], records())
    table.start([K2], [forgotten], forgets())
    table.start([K3], [failing], raises())
    assert len(table) == 3
    for flight in (ok, forgotten, failing):
        assert await flight.wait(1.0)
    assert ok.outcome() == 1
    with pytest.raises(RuntimeError, match="without a result"):
        forgotten.outcome()
    with pytest.raises(KeyError):
        failing.outcome()
    assert len(table) == 0 and table.get(K1) is None


async def test_flight_wait_times_out_without_finishing_the_flight() -> None:
    flight: Flight[int] = Flight()
    assert await flight.wait(0.001) is False
    flight.set_result(3)
    assert await flight.wait(0.001) is True
    assert flight.outcome() == 3


async def test_flight_table_aclose_cancels_running_work_and_wakes_waiters() -> None:
    table: FlightTable[int] = FlightTable()
    flight = table.claim(K1)
    never = asyncio.Event()

    async def stuck() -> None:
        await never.wait()

    table.start([K1], [flight], stuck())
    await asyncio.sleep(0)
    await table.aclose()
    assert flight.done.is_set()
    with pytest.raises(asyncio.CancelledError):
        flight.outcome()


# -- coalescing in the engine ---------------------------------------------


async def test_a_thousand_identical_misses_run_the_model_once() -> None:
    cache = DecisionCache(MemoryStore())
    model = Model()
    callers = [asyncio.create_task(cache.get_or_compute(K1, model)) for _ in range(1000)]
    await until(lambda: cache.stats()["coalesced"] == 999)
    assert cache.stats()["in_flight"] == 1
    model.release()
    results = await asyncio.gather(*callers)
    assert model.calls == 1
    assert all(result == model.result for result in results)
    # Each caller gets its own object: one caller mutating its answer hurts no other.
    assert len({id(result) for result in results}) == 1000
    stats = cache.stats()
    assert (stats["misses"], stats["coalesced"], stats["stores"], stats["in_flight"]) == (
        1000,
        999,
        1,
        0,
    )
    assert await cache.get_or_compute(K1, model) == model.result
    assert model.calls == 1 and cache.stats()["hits"] == 1


@pytest.mark.parametrize("cancelled", ["leader", "follower", "everyone"])
async def test_a_cancelled_caller_cancels_neither_the_flight_nor_the_others(
    cancelled: str,
) -> None:
    store = MemoryStore()
    cache = DecisionCache(store)
    model = Model()
    leader = asyncio.create_task(cache.get_or_compute(K1, model))
    await until(lambda: model.calls == 1)
    followers = [asyncio.create_task(cache.get_or_compute(K1, model)) for _ in range(3)]
    await until(lambda: cache.stats()["coalesced"] == 3)
    gone = {"leader": [leader], "follower": [followers[0]], "everyone": [leader, *followers]}
    for task in gone[cancelled]:
        task.cancel()
    await asyncio.sleep(0)
    model.release()
    for task in [leader, *followers]:
        if task in gone[cancelled]:
            with pytest.raises(asyncio.CancelledError):
                await task
        else:
            assert await task == model.result
    # The decision is stored even when no caller is left to receive it.
    await until(lambda: len(store) == 1)
    assert cache.stats()["stores"] == 1
    assert await cache.get_or_compute(K1, model) == model.result
    assert model.calls == 1


async def test_an_exception_goes_to_that_flights_callers_and_nothing_is_stored() -> None:
    store = MemoryStore()
    cache = DecisionCache(store)
    model = Model()
    model.error = ValueError("model broke")
    callers = [asyncio.create_task(cache.get_or_compute(K1, model)) for _ in range(5)]
    await until(lambda: cache.stats()["coalesced"] == 4)
    model.release()
    outcomes = await asyncio.gather(*callers, return_exceptions=True)
    assert all(isinstance(outcome, ValueError) for outcome in outcomes)
    assert model.calls == 1
    assert len(store) == 0 and cache.stats()["stores"] == 0
    assert cache.stats()["in_flight"] == 0
    # The next call computes again.
    model.error = None
    assert await cache.get_or_compute(K1, model) == model.result
    assert model.calls == 2 and len(store) == 1


async def test_a_waiter_past_coalesce_timeout_computes_by_itself() -> None:
    cache = DecisionCache(MemoryStore(), coalesce_timeout=0.01)
    slow = Model({"from": "slow"})
    leader = asyncio.create_task(cache.get_or_compute(K1, slow))
    await until(lambda: slow.calls == 1)
    quick_calls = 0

    async def quick() -> Any:
        nonlocal quick_calls
        quick_calls += 1
        return {"from": "quick"}

    # The leader's model is stuck behind its gate; the follower stops waiting.
    assert await cache.get_or_compute(K1, quick) == {"from": "quick"}
    assert quick_calls == 1
    assert cache.stats()["coalesce_timeouts"] == 1
    slow.release()
    # The follower's decision was stored first: the slow leader gets it too.
    assert await leader == {"from": "quick"}
    stats = cache.stats()
    assert (stats["stores"], stats["conflicts"]) == (1, 1)


async def test_coalesce_false_runs_every_caller() -> None:
    cache = DecisionCache(MemoryStore(), coalesce=False)
    model = Model()
    callers = [asyncio.create_task(cache.get_or_compute(K1, model)) for _ in range(5)]
    await until(lambda: model.calls == 5)
    model.release()
    results = await asyncio.gather(*callers)
    assert all(result == model.result for result in results)
    stats = cache.stats()
    assert stats["coalesced"] == 0 and stats["misses"] == 5
    assert stats["stores"] + stats["conflicts"] == 5 and stats["stores"] >= 1


async def test_different_keys_fly_separately() -> None:
    cache = DecisionCache(MemoryStore())
    model = Model()
    callers = [asyncio.create_task(cache.get_or_compute(key, model)) for key in (K1, K2, K3)]
    await until(lambda: model.calls == 3)
    assert cache.stats()["in_flight"] == 3
    model.release()
    await asyncio.gather(*callers)


# -- batches ---------------------------------------------------------------


class BatchModel:
    """A batch model over named items; blocks until released; records each call's items."""

    def __init__(self, items: list[str], *, gated: bool = False) -> None:
        self.items = items
        self.seen: list[list[str]] = []
        self.gate = asyncio.Event()
        if not gated:
            self.gate.set()

    async def __call__(self, indices: list[int]) -> list[Any]:
        chosen = [self.items[i] for i in indices]
        self.seen.append(chosen)
        await self.gate.wait()
        return [{"item": item} for item in chosen]


def keys_of(items: list[str]) -> list[bytes]:
    return [item.encode().ljust(16, b".") for item in items]


async def test_overlapping_concurrent_batches_do_not_deadlock() -> None:
    cache = DecisionCache(MemoryStore())
    first = BatchModel(["a", "b", "c"], gated=True)
    second = BatchModel(["c", "b", "d"], gated=True)
    one = asyncio.create_task(cache.get_or_compute_many(keys_of(first.items), first))
    await until(lambda: len(first.seen) == 1)
    two = asyncio.create_task(cache.get_or_compute_many(keys_of(second.items), second))
    await until(lambda: len(second.seen) == 1)
    # The second batch computes only its unclaimed key and waits on the first for the rest.
    assert second.seen == [["d"]]
    second.gate.set()  # released first: it must not wait on itself
    await asyncio.sleep(0)
    first.gate.set()
    async with asyncio.timeout(10):
        got_one, got_two = await asyncio.gather(one, two)
    assert first.seen == [["a", "b", "c"]]
    assert got_one == [{"item": "a"}, {"item": "b"}, {"item": "c"}]
    assert got_two == [{"item": "c"}, {"item": "b"}, {"item": "d"}]
    assert got_two[0] is not got_one[2]  # shared decisions are handed out as copies


async def test_batches_wait_on_single_flights_and_the_reverse() -> None:
    cache = DecisionCache(MemoryStore())
    single = Model({"item": "b"})
    alone = asyncio.create_task(cache.get_or_compute(keys_of(["b"])[0], single))
    await until(lambda: single.calls == 1)
    batch = BatchModel(["a", "b"], gated=True)
    many = asyncio.create_task(cache.get_or_compute_many(keys_of(batch.items), batch))
    await until(lambda: len(batch.seen) == 1)
    follower = asyncio.create_task(cache.get_or_compute(keys_of(["a"])[0], single))
    await until(lambda: cache.stats()["coalesced"] == 2)
    single.release()
    batch.gate.set()
    async with asyncio.timeout(10):
        assert await many == [{"item": "a"}, {"item": "b"}]
        assert await alone == {"item": "b"}
        assert await follower == {"item": "a"}
    assert batch.seen == [["a"]] and single.calls == 1


async def test_aclose_finishes_running_and_unstarted_flights() -> None:
    cache = DecisionCache(MemoryStore())
    model = Model()
    running = asyncio.create_task(cache.get_or_compute(K1, model))
    await until(lambda: model.calls == 1)
    unstarted = asyncio.create_task(cache.get_or_compute(K2, model))
    await asyncio.sleep(0)  # its caller launched the flight's task, which has not run yet
    assert model.calls == 1 and cache.stats()["in_flight"] == 2
    await cache.aclose()
    async with asyncio.timeout(10):  # nobody is left waiting forever
        for caller in (running, unstarted):
            with pytest.raises(asyncio.CancelledError):
                await caller
    assert model.calls == 1
    assert cache.stats()["in_flight"] == 0
