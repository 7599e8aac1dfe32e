"""A miss answers what a later hit gives: equal values of the same types, objects of its own.

``Engine.winner`` skips decoding the value it just stored when the result decodes as
itself (a string, a number, a short list of strings); these pin that the skip changes
nothing a caller can see.
"""

from __future__ import annotations

from typing import Any

from asyncache import DecisionCache, cached_prediction
from asyncache.stores import MemoryStore


async def test_a_miss_answers_as_a_hit_does() -> None:
    kept = ["a", "b"]
    results: dict[int, Any] = {
        0: kept,
        1: ("a", "b"),
        2: "text",
        3: 2**70,
        4: float("nan"),
        5: {"answers": [True, False]},
        6: ["x"] * 100,
    }
    async with DecisionCache(MemoryStore()) as cache:

        @cached_prediction(cache)
        async def predict(n: int) -> Any:
            return results[n]

        for n in results:
            miss = await predict(n)
            hit = await predict(n)
            assert type(miss) is type(hit), n
            if n != 4:
                assert miss == hit, n
    async with DecisionCache(MemoryStore()) as other:

        @cached_prediction(other)
        async def again(n: int) -> Any:
            return results[n]

        answer = await again(0)  # a miss
        assert answer == kept and answer is not kept, "the model's own list is not the caller's"
