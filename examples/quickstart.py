"""The README's quickstart: a cached classifier on the embedded SQLite store."""

import asyncio

from asyncache import DecisionCache, cached_prediction
from asyncache.stores.sqlite import SQLiteStore

cache = DecisionCache(SQLiteStore("decisions.sqlite"), fingerprint="intent-v3", ttl=86_400)


@cached_prediction(cache)
async def classify(text: str, labels: list[str]) -> str:
    await asyncio.sleep(0.2)  # the model's forward pass
    return labels[len(text) % len(labels)]


async def main() -> None:
    print(await classify("where is my refund?", ["refund", "shipping"]))  # runs the model
    print(await classify("where is my refund?", ["refund", "shipping"]))  # a hit
    print(cache.stats()["hits"])
    await cache.aclose()


asyncio.run(main())
