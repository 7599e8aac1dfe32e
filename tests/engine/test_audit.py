"""Audit sampling: sampled hits are recomputed off the caller's path and compared."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from asyncache import DecisionCache, cached_prediction
from asyncache.engine._audit import same_decision


class Model:
    """A model whose answer the test can change, to plant a disagreement."""

    def __init__(self) -> None:
        self.answer: Any = "approve"
        self.runs = 0
        self.gate: asyncio.Event | None = None

    async def __call__(self, x: int) -> Any:
        self.runs += 1
        if self.gate is not None:
            await self.gate.wait()
        return {"x": x, "decision": self.answer}


def _cached(cache: DecisionCache, model: Model) -> Any:
    @cached_prediction(cache, namespace="model")
    async def predict(x: int) -> Any:
        return await model(x)

    return predict


async def test_a_planted_disagreement_is_counted_and_reported() -> None:
    model = Model()
    mismatches: list[tuple[Any, Any, Any]] = []
    cache = DecisionCache(audit_rate=1.0, on_mismatch=lambda *seen: mismatches.append(seen))
    predict = _cached(cache, model)
    assert await predict(1) == {"x": 1, "decision": "approve"}
    model.answer = "deny"  # the model changed; the cache still serves the old decision
    served = [await predict(1) for _ in range(3)]
    # The response is what was stored, never the audit's fresh answer.
    assert served == [{"x": 1, "decision": "approve"}] * 3
    await cache.aclose()  # waits for the background audits
    stats = cache.stats()
    assert stats["audits"] == 3
    assert stats["audit_mismatched"] == 3
    assert stats["audit_agreed"] == 0
    assert (
        mismatches
        == [({"x": 1}, {"x": 1, "decision": "approve"}, {"x": 1, "decision": "deny"})] * 3
    )
    assert model.runs == 4


async def test_agreement_is_counted() -> None:
    model = Model()
    async with DecisionCache(audit_rate=1.0) as cache:
        predict = _cached(cache, model)
        for _ in range(5):
            await predict(2)
    stats = cache.stats()
    assert (stats["audits"], stats["audit_agreed"], stats["audit_mismatched"]) == (4, 4, 0)


async def test_the_caller_never_waits_for_an_audit_and_excess_audits_are_dropped() -> None:
    model = Model()
    cache = DecisionCache(audit_rate=1.0, audit_concurrency=1)
    predict = _cached(cache, model)
    await predict(3)
    model.gate = asyncio.Event()  # every recomputation now blocks until released
    hits = [await predict(3) for _ in range(5)]
    # Five hits answered while the first audit's computation is still blocked.
    assert hits == [{"x": 3, "decision": "approve"}] * 5
    while True:  # the audit task starts on the next loop iterations
        if model.runs == 2:
            break
        await asyncio.sleep(0)
    assert model.runs == 2
    assert cache.stats()["audits_dropped"] == 4
    assert cache.stats()["audits"] == 0
    model.gate.set()
    await cache.aclose()
    assert cache.stats()["audits"] == 1


async def test_a_coroutine_hook_is_awaited_and_a_failing_one_is_contained() -> None:
    model = Model()
    seen: list[Any] = []

    async def record(inputs: Any, stored: Any, fresh: Any) -> None:
        await asyncio.sleep(0)
        seen.append(fresh["decision"])

    cache = DecisionCache(audit_rate=1.0, on_mismatch=record)
    predict = _cached(cache, model)
    await predict(4)
    model.answer = "deny"
    assert await predict(4) == {"x": 4, "decision": "approve"}
    await cache.aclose()
    assert seen == ["deny"]

    def explode(*_: Any) -> None:
        raise RuntimeError("hook bug")

    model.answer = "approve"
    cache = DecisionCache(audit_rate=1.0, on_mismatch=explode)
    predict = _cached(cache, model)
    await predict(5)
    model.answer = "deny"
    assert await predict(5) == {"x": 5, "decision": "approve"}
    await cache.aclose()
    assert cache.stats()["audit_mismatched"] == 1


async def test_a_failing_recomputation_is_counted_not_raised() -> None:
    calls = 0

    async def flaky(x: int) -> int:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise RuntimeError("model went away")
        return x

    cache = DecisionCache(audit_rate=1.0)
    predict = cached_prediction(cache, namespace="flaky")(flaky)
    assert await predict(1) == 1
    assert await predict(1) == 1
    await cache.aclose()
    assert cache.stats()["audit_errors"] == 1
    assert cache.stats()["audits"] == 0


async def test_a_custom_comparison_decides_agreement() -> None:
    answers = iter([0.5, 0.5000001, 0.7])

    async def score(x: int) -> float:
        return next(answers)

    cache = DecisionCache(audit_rate=1.0, audit=lambda a, b: math.isclose(a, b, rel_tol=1e-3))
    predict = cached_prediction(cache, namespace="score")(score)
    assert [await predict(1) for _ in range(3)] == [0.5, 0.5, 0.5]
    await cache.aclose()
    # Within the tolerance, one agrees; 0.7 does not. The default would reject both.
    assert (cache.stats()["audit_agreed"], cache.stats()["audit_mismatched"]) == (1, 1)
    assert not same_decision(0.5, 0.5000001)


async def test_sampling_follows_the_rate() -> None:
    model = Model()
    async with DecisionCache(audit_rate=0.5, audit_concurrency=1000) as cache:
        predict = _cached(cache, model)
        await predict(6)
        for _ in range(400):
            await predict(6)
    audited = cache.stats()["audits"]
    # Binomial(400, 0.5): 10 standard deviations either side.
    assert 100 < audited < 300


async def test_no_audits_without_a_rate() -> None:
    model = Model()
    async with DecisionCache() as cache:
        predict = _cached(cache, model)
        for _ in range(20):
            await predict(7)
    assert model.runs == 1
    assert cache.stats()["audits"] == cache.stats()["audits_dropped"] == 0


def test_bad_rates_are_refused() -> None:
    with pytest.raises(ValueError, match="audit_rate"):
        DecisionCache(audit_rate=1.5)
    with pytest.raises(ValueError, match="audit_concurrency"):
        DecisionCache(audit_rate=0.1, audit_concurrency=0)


def test_the_default_comparison() -> None:
    assert same_decision({"a": [1, 2]}, {"a": [1, 2]})
    assert not same_decision({"a": 1}, {"a": 1.0})
    assert same_decision(float("nan"), float("nan"))
    assert not same_decision("approve", "deny")
    numpy = pytest.importorskip("numpy")
    assert same_decision(numpy.arange(4.0), numpy.arange(4.0))
    assert not same_decision(numpy.arange(4.0), numpy.arange(4.0) + 1e-9)
    assert not same_decision(numpy.arange(4.0), numpy.arange(4.0).astype("float32"))


async def test_numpy_results_are_audited_bit_exactly() -> None:
    numpy = pytest.importorskip("numpy")
    offsets = iter([0.0, 0.0, 1e-6])

    async def embed(x: int) -> Any:
        return numpy.full(8, float(x)) + next(offsets)

    cache = DecisionCache(audit_rate=1.0)
    predict = cached_prediction(cache, namespace="embed")(embed)
    await predict(1)
    await predict(1)  # audit: identical array
    await predict(1)  # audit: drifted by 1e-6
    await cache.aclose()
    stats = cache.stats()
    assert (stats["audit_agreed"], stats["audit_mismatched"]) == (1, 1)
