"""Shadow mode: every call computes; the cache is filled and judged, never served."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from asyncache import DecisionCache, cached_prediction, open_store


class Model:
    def __init__(self) -> None:
        self.answer = "approve"
        self.runs = 0
        self.returned: list[Any] = []

    async def __call__(self, x: int) -> dict[str, Any]:
        self.runs += 1
        result = {"x": x, "decision": self.answer}
        self.returned.append(result)
        return result


def _cached(cache: DecisionCache, model: Model) -> Any:
    @cached_prediction(cache, namespace="model")
    async def predict(x: int) -> Any:
        return await model(x)

    return predict


async def test_every_call_computes_and_the_caller_gets_the_fresh_result() -> None:
    model = Model()
    async with DecisionCache(mode="shadow") as cache:
        predict = _cached(cache, model)
        results = [await predict(1) for _ in range(3)]
        assert model.runs == 3
        # The very objects the model returned, not copies decoded from the store.
        assert all(got is made for got, made in zip(results, model.returned, strict=True))
        stats = cache.stats()
        assert stats["misses"] == 1  # the first call found nothing and filled the store
        assert stats["shadow_would_hit"] == 2
        assert stats["shadow_agreed"] == 2
        assert stats["shadow_mismatched"] == 0
        assert stats["hits"] == 0
        assert stats["stores"] == 1


async def test_a_disagreement_is_counted_reported_and_not_served() -> None:
    model = Model()
    seen: list[tuple[Any, Any, Any]] = []
    async with DecisionCache(mode="shadow", on_mismatch=lambda *args: seen.append(args)) as cache:
        predict = _cached(cache, model)
        await predict(2)
        model.answer = "deny"
        assert await predict(2) == {"x": 2, "decision": "deny"}
        stats = cache.stats()
        assert (stats["shadow_agreed"], stats["shadow_mismatched"]) == (0, 1)
        assert seen == [({"x": 2}, {"x": 2, "decision": "approve"}, {"x": 2, "decision": "deny"})]


async def test_shadow_fills_a_store_that_live_mode_then_serves(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shadow.db'}"
    model = Model()
    async with DecisionCache(open_store(url), mode="shadow") as shadow:
        predict = _cached(shadow, model)
        for x in range(5):
            await predict(x)
    assert model.runs == 5
    async with DecisionCache(open_store(url)) as live:
        predict = _cached(live, model)
        assert [await predict(x) for x in range(5)] == [
            {"x": x, "decision": "approve"} for x in range(5)
        ]
        assert model.runs == 5
        assert live.stats()["hits"] == 5


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="mode"):
        DecisionCache(mode="dry-run")  # type: ignore[arg-type]
