"""Coalescing: one computation per key, whoever asks, whoever leaves, whatever fails."""

import asyncio

from asyncache import DecisionCache

cache = DecisionCache(fingerprint="demo")
runs: dict[str, int] = {}


async def model(item: str) -> str:
    runs[item] = runs.get(item, 0) + 1
    await asyncio.sleep(0.05)
    if item == "bad":
        raise ValueError("the model rejected the input")
    return item.upper()


async def batch(items: list[str]) -> list[str]:
    async def compute(indices: list[int]) -> list[str]:
        return [await model(items[i]) for i in indices]

    keys = [cache.key(item) for item in items]
    return await cache.get_or_compute_many(keys, compute, inputs=items)


async def main() -> None:
    key = cache.key("a")

    # A caller that gives up (a client disconnected) does not cancel the others' work.
    leader = asyncio.create_task(cache.get_or_compute(key, lambda: model("a")))
    followers = [cache.get_or_compute(key, lambda: model("a")) for _ in range(9)]
    await asyncio.sleep(0.01)
    leader.cancel()
    print("followers got:", set(await asyncio.gather(*followers)), "runs of 'a':", runs["a"])

    # Two batches claim overlapping keys in opposite orders: neither waits on the other
    # forever, and each key runs once.
    left, right = await asyncio.gather(batch(["b", "c", "d"]), batch(["d", "c", "b", "e"]))
    print("batches:", left, right)
    print("runs:", dict(sorted(runs.items())))

    # A failure goes to every caller of that flight and stores nothing; the next call retries.
    bad = cache.key("bad")
    outcomes = await asyncio.gather(
        *(cache.get_or_compute(bad, lambda: model("bad")) for _ in range(5)),
        return_exceptions=True,
    )
    print("failed callers:", sum(isinstance(o, ValueError) for o in outcomes), "runs:", runs["bad"])
    await asyncio.gather(cache.get_or_compute(bad, lambda: model("bad")), return_exceptions=True)
    print("after a retry, runs of 'bad':", runs["bad"])
    stats = cache.stats()
    print({name: stats[name] for name in ("hits", "misses", "coalesced", "stores", "in_flight")})
    await cache.aclose()


asyncio.run(main())
