"""Micro-batching: MicroBatcher, and @cached_prediction(batch=True) over a real cache."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any

import pytest

from asyncache import DecisionCache, cached_prediction
from asyncache.decorator._batching import MicroBatcher
from asyncache.errors import OffloadError
from asyncache.offload import ProcessOffload, ThreadOffload

from ..offload import offload_workers as workers


class Recorder:
    """A batch 'model' that records each call: its items and the thread it ran on."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.threads: set[str] = set()
        self.lock = threading.Lock()

    def __call__(self, items: list[str]) -> list[object]:
        with self.lock:
            self.calls.append(list(items))
            self.threads.add(threading.current_thread().name)
        if any(item == "crash" for item in items):
            raise RuntimeError("the forward pass failed")
        # An exception instance in a slot fails that item only.
        return [
            ValueError(f"cannot read {item!r}") if item.startswith("bad") else item.upper()
            for item in items
        ]

    @property
    def items(self) -> list[str]:
        return [item for call in self.calls for item in call]


async def _gathered(*calls: Awaitable[Any]) -> list[Any]:
    return list(await asyncio.gather(*calls))


# -- MicroBatcher --------------------------------------------------------------


def _batcher(
    log: list[list[str]], *, gate: asyncio.Event | None = None, **options: float | int | None
) -> MicroBatcher[str, str]:
    async def run(items: list[str]) -> Sequence[str | BaseException]:
        log.append(list(items))
        if gate is not None:
            await gate.wait()
        if "crash" in items:
            raise RuntimeError("the forward pass failed")
        return [ValueError(item) if item.startswith("bad") else item.upper() for item in items]

    return MicroBatcher(run, **options)  # type: ignore[arg-type]


async def test_concurrent_items_share_one_call() -> None:
    log: list[list[str]] = []
    batcher = _batcher(log, max_batch_size=64, max_wait_ms=20)
    items = [f"item{i}" for i in range(10)]
    results = await asyncio.gather(*(batcher.submit(item) for item in items))
    assert results == [item.upper() for item in items]
    assert log == [items]


async def test_a_full_batch_goes_at_once_and_the_rest_after_the_wait() -> None:
    log: list[list[str]] = []
    batcher = _batcher(log, max_batch_size=4, max_wait_ms=10)
    items = [f"i{i}" for i in range(10)]
    assert await _gathered(*(batcher.submit(i) for i in items)) == [i.upper() for i in items]
    assert [len(call) for call in log] == [4, 4, 2]
    assert [i for call in log for i in call] == items


async def test_a_failing_call_fails_only_its_own_batch() -> None:
    log: list[list[str]] = []
    batcher = _batcher(log, max_batch_size=2, max_wait_ms=10)
    outcomes = await asyncio.gather(
        *(batcher.submit(i) for i in ("a", "crash", "c", "d")), return_exceptions=True
    )
    assert log == [["a", "crash"], ["c", "d"]]
    assert [type(o) for o in outcomes[:2]] == [RuntimeError, RuntimeError]
    assert outcomes[2:] == ["C", "D"]


async def test_an_exception_in_a_slot_fails_only_that_item() -> None:
    log: list[list[str]] = []
    batcher = _batcher(log, max_wait_ms=10)
    outcomes = await asyncio.gather(
        *(batcher.submit(i) for i in ("a", "bad-b", "c")), return_exceptions=True
    )
    assert len(log) == 1
    assert outcomes[0] == "A" and outcomes[2] == "C"
    assert isinstance(outcomes[1], ValueError) and str(outcomes[1]) == "bad-b"


async def test_a_wrong_number_of_results_fails_the_batch_clearly() -> None:
    async def short(items: list[str]) -> list[str]:
        return items[:-1]

    batcher: MicroBatcher[str, str] = MicroBatcher(short, max_wait_ms=5)
    outcomes = await asyncio.gather(
        batcher.submit("a"), batcher.submit("b"), return_exceptions=True
    )
    assert all(isinstance(o, ValueError) and "1 results for 2 items" in str(o) for o in outcomes)

    async def not_a_list(items: list[str]) -> str:
        return "AB"

    other: MicroBatcher[str, str] = MicroBatcher(not_a_list, max_wait_ms=5)
    with pytest.raises(TypeError, match="one result per item"):
        await other.submit("a")


async def test_items_gather_while_every_slot_is_busy() -> None:
    log: list[list[str]] = []
    gate = asyncio.Event()
    batcher = _batcher(log, gate=gate, max_batch_size=64, max_wait_ms=1, max_concurrent_batches=1)
    first = asyncio.ensure_future(batcher.submit("first"))
    for _ in range(1000):  # until the first batch is running
        if log:
            break
        await asyncio.sleep(0.001)
    later = [asyncio.ensure_future(batcher.submit(f"later{i}")) for i in range(5)]
    await asyncio.sleep(0.02)  # well past max_wait: the later items are due, but the slot is busy
    assert len(log) == 1
    gate.set()
    assert await first == "FIRST"
    assert await _gathered(*later) == [f"LATER{i}" for i in range(5)]
    assert log == [["first"], [f"later{i}" for i in range(5)]]


async def test_a_caller_that_gave_up_is_left_out_of_the_batch() -> None:
    log: list[list[str]] = []
    batcher = _batcher(log, max_wait_ms=10)
    gone = asyncio.ensure_future(batcher.submit("gone"))
    kept = asyncio.ensure_future(batcher.submit("kept"))
    await asyncio.sleep(0)
    gone.cancel()
    assert await kept == "KEPT"
    assert log == [["kept"]]


async def test_aclose_sends_what_is_queued_and_refuses_more() -> None:
    log: list[list[str]] = []
    batcher = _batcher(log, max_wait_ms=60_000)
    waiting = asyncio.ensure_future(batcher.submit("x"))
    await asyncio.sleep(0)
    await batcher.aclose()
    assert await waiting == "X"
    with pytest.raises(OffloadError, match="closed"):
        await batcher.submit("y")


def test_batcher_options_are_checked() -> None:
    async def run(items: list[str]) -> list[str]:
        return items

    with pytest.raises(ValueError, match="max_batch_size"):
        MicroBatcher(run, max_batch_size=0)
    with pytest.raises(ValueError, match="max_wait_ms"):
        MicroBatcher(run, max_wait_ms=-1)
    with pytest.raises(ValueError, match="max_concurrent_batches"):
        MicroBatcher(run, max_concurrent_batches=0)


# -- @cached_prediction(batch=True) ---------------------------------------------


@pytest.fixture
async def offload() -> AsyncIterator[ThreadOffload]:
    pool = ThreadOffload(2)
    yield pool
    await pool.aclose()


async def test_single_callers_are_batched_off_the_loop(offload: ThreadOffload) -> None:
    model = Recorder()
    predict = cached_prediction(DecisionCache(), batch=True, max_wait_ms=20, offload=offload)(model)
    items = [f"s{i}" for i in range(12)]
    assert await _gathered(*(predict(i) for i in items)) == [i.upper() for i in items]
    assert model.calls == [items]  # one forward pass
    assert threading.current_thread().name not in model.threads
    assert offload.stats()["submitted"] == 1


async def test_hits_are_answered_before_batching(offload: ThreadOffload) -> None:
    model = Recorder()
    cache = DecisionCache()
    warm = cached_prediction(cache, batch=True, max_wait_ms=5, offload=offload)(model)
    assert await warm.many(["a", "b"]) == ["A", "B"]
    # Same function over the same cache: same keys. A miss here would wait a minute for company.
    slow = cached_prediction(cache, batch=True, max_wait_ms=60_000, offload=offload)(model)
    assert await asyncio.wait_for(slow("a"), 5) == "A"
    assert await asyncio.wait_for(_gathered(slow("b"), slow("a")), 5) == ["B", "A"]
    assert model.calls == [["a", "b"]]
    assert offload.stats()["submitted"] == 1
    assert cache.stats()["hits"] == 3


async def test_items_that_share_a_key_are_computed_once(offload: ThreadOffload) -> None:
    model = Recorder()
    cache = DecisionCache()
    predict = cached_prediction(cache, batch=True, max_wait_ms=20, offload=offload)(model)
    results = await _gathered(predict("a"), predict("a"), predict("b"), predict("a"))
    assert results == ["A", "A", "B", "A"]
    assert sorted(model.items) == ["a", "b"]
    assert cache.stats()["coalesced"] == 2


async def test_many_computes_only_its_misses(offload: ThreadOffload) -> None:
    model = Recorder()
    predict = cached_prediction(
        DecisionCache(), batch=True, max_batch_size=3, max_wait_ms=20, offload=offload
    )(model)
    assert await predict("b") == "B"
    items = ["a", "b", "c", "a", "d", "e", "f"]
    assert await predict.many(items) == [i.upper() for i in items]
    # b was a hit, the repeated a was computed once, and misses go in calls of at most 3.
    assert model.calls[0] == ["b"]
    assert sorted(model.items[1:]) == ["a", "c", "d", "e", "f"]
    # The two calls run on the offload's two threads at once: either may record first.
    assert sorted(len(call) for call in model.calls[1:]) == [2, 3]
    assert await predict.many([]) == []


async def test_per_item_errors_fail_only_those_items(offload: ThreadOffload) -> None:
    model = Recorder()
    cache = DecisionCache()
    predict = cached_prediction(cache, batch=True, max_wait_ms=20, offload=offload)(model)
    outcomes = await asyncio.gather(predict("good"), predict("bad-1"), return_exceptions=True)
    assert outcomes[0] == "GOOD"
    assert isinstance(outcomes[1], ValueError) and "bad-1" in str(outcomes[1])
    assert len(model.calls) == 1
    # The good item was stored, the failed one was not: asking again computes only it.
    with pytest.raises(ValueError, match="bad-1"):
        await predict("bad-1")
    assert await predict("good") == "GOOD"
    assert model.calls[1:] == [["bad-1"]]
    # many() raises the first failed item's error after storing the others.
    with pytest.raises(ValueError, match="bad-2"):
        await predict.many(["x", "bad-2", "y"])
    assert await predict.many(["x", "y"]) == ["X", "Y"]
    assert model.calls[2:] == [["x", "bad-2", "y"]]


async def test_a_failing_forward_pass_fails_only_the_callers_of_that_batch(
    offload: ThreadOffload,
) -> None:
    model = Recorder()
    cache = DecisionCache()
    predict = cached_prediction(
        cache, batch=True, max_batch_size=2, max_wait_ms=20, offload=offload
    )(model)
    outcomes = await asyncio.gather(
        *(predict(i) for i in ("p", "crash", "q", "r")), return_exceptions=True
    )
    assert [type(o) for o in outcomes[:2]] == [RuntimeError, RuntimeError]
    assert outcomes[2:] == ["Q", "R"]
    assert await predict("p") == "P"  # nothing of the failed batch was stored
    assert model.calls[-1] == ["p"]


async def test_key_and_scope_take_one_item(offload: ThreadOffload) -> None:
    model = Recorder()
    cache = DecisionCache()
    predict = cached_prediction(
        cache,
        batch=True,
        max_wait_ms=5,
        offload=offload,
        key=lambda item: item.strip(),
        scope=lambda item: "tenant-b" if item.endswith(" ") else "tenant-a",
    )(model)
    assert predict.key("a") != predict.key("a ")  # same key input, different scopes
    assert predict.key(" a") == predict.key("a")
    assert await predict("a") == "A"
    assert await predict(" a") == "A"  # hit: same key and scope
    assert await predict("a ") == "A "  # miss: another tenant's entry is never read
    assert model.items == ["a", "a "]


async def test_async_batch_functions_and_uncached_calls() -> None:
    calls: list[list[int]] = []

    async def double(items: list[int]) -> list[int]:
        calls.append(items)
        return [2 * i for i in items]

    predict = cached_prediction(DecisionCache(), batch=True, max_wait_ms=5)(double)
    assert await _gathered(predict(1), predict(2)) == [2, 4]
    assert await predict.uncached(1) == 2
    assert calls == [[1, 2], [1]]
    assert predict.namespace.endswith("double")


async def test_batched_prediction_in_worker_processes() -> None:
    async with ProcessOffload(1) as pool:
        predict = cached_prediction(DecisionCache(), batch=True, max_wait_ms=20, offload=pool)(
            workers.batch_lengths
        )
        assert await _gathered(predict("ab"), predict("abcd")) == [2, 4]
        assert await predict.many(["xyz", "ab"]) == [3, 2]
        assert pool.stats()["submitted"] == 2


def test_batch_mode_checks_the_function_and_options() -> None:
    cache = DecisionCache()

    def two_lists(a: list[str], b: list[str]) -> list[str]:
        return a

    with pytest.raises(TypeError, match="one list of items"):
        cached_prediction(cache, batch=True, offload="thread")(two_lists)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="is not async"):
        cached_prediction(cache, batch=True)(workers.batch_lengths)
    with pytest.raises(ValueError, match="ignore="):
        cached_prediction(cache, batch=True, offload="thread", ignore=["x"])  # type: ignore[call-overload]
