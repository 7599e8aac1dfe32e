"""Using ShelfStore: import the module that registers shelf://, then open it by URL."""

import asyncio

import shelf_store  # noqa: F401 (registers shelf://)

from asyncache import DecisionCache, cached_prediction, open_store

cache = DecisionCache(open_store("shelf://"), fingerprint="length-v1", ttl=3600)


@cached_prediction(cache)
async def classify(text: str) -> str:
    return "long" if len(text) > 10 else "short"


async def main() -> None:
    print(await classify("where is my refund?"), await classify("where is my refund?"))
    print(f"hits: {cache.stats()['hits']} entries: {await cache.store.count()}")
    await cache.aclose()


asyncio.run(main())
