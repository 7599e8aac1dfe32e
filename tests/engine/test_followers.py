"""What the followers of a flight receive: values they can own, short exceptions, a new leader.

Each test attacks a promise of docs/design.md: "the result is returned"
(even one the codec cannot store or copy), "a flight that raises hands the
exception (with a short traceback) to the callers", and "a cancelled leader is
replaced by one new leader".
"""

from __future__ import annotations

import asyncio
import threading
import traceback
from typing import Any

import pytest

from asyncache import DecisionCache, cached_prediction

CALLERS = 5


class Holder:
    """A result the codec cannot encode and ``copy.deepcopy`` cannot copy (it holds a lock)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.lock = threading.Lock()


async def test_followers_get_a_result_that_cannot_be_encoded_or_copied() -> None:
    cache = DecisionCache()
    runs = 0

    # Annotated Any: an annotation of Holder is refused at decoration (it cannot be rebuilt).
    @cached_prediction(cache)
    async def predict(text: str) -> Any:
        nonlocal runs
        runs += 1
        await asyncio.sleep(0.05)
        return Holder(text.upper())

    results = await asyncio.gather(*(predict("a") for _ in range(CALLERS)))
    assert runs == 1
    assert [r.label for r in results] == ["A"] * CALLERS
    assert cache.stats()["unencodable"] == 1
    await cache.aclose()


async def test_a_batch_with_a_result_that_cannot_be_encoded_answers_every_item() -> None:
    cache = DecisionCache()

    @cached_prediction(cache, batch=True)
    async def predict(texts: list[str]) -> list[Any]:
        return [Holder(t) if t == "lock" else t.upper() for t in texts]

    assert [getattr(r, "label", r) for r in await predict.many(["lock", "b", "lock"])] == [
        "lock",
        "B",
        "lock",
    ]
    together = await asyncio.gather(predict("lock"), predict("lock"), predict("c"))
    assert [getattr(r, "label", r) for r in together] == ["lock", "lock", "C"]
    await predict.aclose()
    await cache.aclose()


async def test_a_shared_exception_keeps_a_short_traceback_for_every_waiter() -> None:
    cache = DecisionCache()
    gate = asyncio.Event()

    @cached_prediction(cache)
    async def predict(text: str) -> str:
        await gate.wait()
        raise ValueError(f"the model rejected {text}")

    waiters = [asyncio.ensure_future(predict("x")) for _ in range(1000)]
    await asyncio.sleep(0.01)
    gate.set()
    outcomes = await asyncio.gather(*waiters, return_exceptions=True)
    assert all(isinstance(o, ValueError) and "rejected x" in str(o) for o in outcomes)
    depths = [len(traceback.extract_tb(o.__traceback__)) for o in outcomes]  # type: ignore[union-attr]
    # Today's frames (the model, the engine's flight, the waiter's own few), never one
    # per earlier waiter.
    assert max(depths) < 15, max(depths)
    logged = "".join(traceback.format_exception(outcomes[-1]))  # type: ignore[arg-type]
    assert len(logged) < 10_000
    await cache.aclose()


async def test_a_leader_whose_model_raises_cancelled_error_is_replaced_by_one_new_leader() -> None:
    cache = DecisionCache()
    runs = 0
    gate = asyncio.Event()

    @cached_prediction(cache)
    async def predict(text: str) -> str:
        nonlocal runs
        runs += 1
        await gate.wait()
        if runs == 1:
            raise asyncio.CancelledError  # a model (or its pool) that was cancelled
        return text.upper()

    leader = asyncio.ensure_future(predict("x"))
    await asyncio.sleep(0)
    followers = [asyncio.ensure_future(predict("x")) for _ in range(20)]
    await asyncio.sleep(0.01)
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await leader
    assert await asyncio.gather(*followers) == ["X"] * 20
    assert runs == 2  # one failed leader, one new leader; not one run per follower
    assert cache.stats()["in_flight"] == 0
    await cache.aclose()
