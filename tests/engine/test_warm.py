"""Pre-warming: known requests computed ahead of traffic, with bounded concurrency."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from asyncache import DecisionCache, cached_prediction, open_store
from asyncache.engine._warm import WarmSummary, call_arguments


class Model:
    def __init__(self) -> None:
        self.runs: list[tuple[str, int]] = []
        self.running = 0
        self.most = 0

    async def __call__(self, text: str, n: int = 1) -> dict[str, Any]:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await asyncio.sleep(0.001)
            if text == "boom":
                raise ValueError("cannot score boom")
            self.runs.append((text, n))
            return {"text": text, "n": n}
        finally:
            self.running -= 1


def _cached(cache: DecisionCache, model: Model) -> Any:
    @cached_prediction(cache, namespace="score")
    async def score(text: str, n: int = 1) -> dict[str, Any]:
        return await model(text, n)

    return score


async def test_warm_computes_what_is_missing_and_reports(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'warm.db'}"
    model = Model()
    seen: list[int] = []
    async with DecisionCache(open_store(url)) as cache:
        score = _cached(cache, model)
        await score("a")
        await score("b", 2)
        inputs: list[Any] = [
            {"text": "a"},  # already cached (same key as score("a"))
            ["b", 2],  # already cached
            "c",
            ("d", 3),
            {"text": "e", "n": 4},
            {"text": "boom"},
            *[{"text": f"t{i}"} for i in range(4)],
        ]
        summary = await cache.warm(
            score, inputs, concurrency=3, progress=lambda s: seen.append(s.done)
        )
    assert (summary.computed, summary.cached, summary.failed) == (7, 2, 1)
    assert summary.total == 10 and summary.done == 10
    assert summary.errors == ["{'text': 'boom'}: ValueError: cannot score boom"]
    assert seen == list(range(1, 11))
    assert model.most <= 3
    # Another process sharing the file replays every warmed decision.
    replay = Model()
    async with DecisionCache(open_store(url)) as cache:
        score = _cached(cache, replay)
        assert await score("d", 3) == {"text": "d", "n": 3}
        assert await score(text="e", n=4) == {"text": "e", "n": 4}
        assert await score("c") == {"text": "c", "n": 1}
        assert replay.runs == []


async def test_concurrency_is_bounded_and_used() -> None:
    model = Model()
    async with DecisionCache() as cache:
        score = _cached(cache, model)
        summary = await cache.warm(score, [f"x{i}" for i in range(24)], concurrency=4)
    assert summary.computed == 24
    assert model.most == 4


async def test_generators_and_async_iterables_are_read_lazily() -> None:
    model = Model()
    pulled: list[int] = []

    def lazy() -> Any:
        for i in range(6):
            pulled.append(i)
            yield f"g{i}"

    async def stream() -> AsyncIterator[str]:
        for i in range(3):
            await asyncio.sleep(0)
            yield f"s{i}"

    async with DecisionCache() as cache:
        score = _cached(cache, model)
        first = await cache.warm(score, lazy(), concurrency=2)
        second = await cache.warm(score, stream())
    assert first.total is None and first.computed == 6
    assert second.computed == 3
    assert pulled == list(range(6))


async def test_warm_refuses_foreign_functions() -> None:
    async with DecisionCache() as cache, DecisionCache() as other:
        score = _cached(other, Model())
        with pytest.raises(ValueError, match="this DecisionCache"):
            await cache.warm(score, ["a"])

        async def plain(text: str) -> str:
            return text

        with pytest.raises(TypeError, match="cached_prediction"):
            await cache.warm(plain, ["a"])
        with pytest.raises(ValueError, match="concurrency"):
            await cache.warm(_cached(cache, Model()), ["a"], concurrency=0)


def test_call_arguments() -> None:
    assert call_arguments({"a": 1}) == ((), {"a": 1})
    assert call_arguments([1, 2]) == ((1, 2), {})
    assert call_arguments((1,)) == ((1,), {})
    assert call_arguments("text") == (("text",), {})
    assert WarmSummary(computed=1, cached=2, failed=3).done == 6
