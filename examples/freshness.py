"""Freshness: serve stale while refreshing, serve stale on error, cache errors, spread expiries."""

import asyncio

from asyncache import DecisionCache, cached_prediction

runs = 0
down = False


async def model(text: str) -> str:
    global runs
    runs += 1
    await asyncio.sleep(0.05)  # a forward pass
    if down:
        raise ConnectionError("the model server is down")
    if not text:
        raise ValueError("empty input")
    return f"{text}: positive (run {runs})"


cache = DecisionCache(
    ttl=0.2,  # fresh for 0.2 s (seconds here; minutes or hours in a service)...
    stale_while_revalidate=2,  # ...then served at once while one refresh runs...
    stale_if_error=60,  # ...then served only when the model fails...
    jitter=0.1,  # each ttl drawn from [0.18, 0.2] s, so expiries spread
    cache_errors=(ValueError,),  # bad input: remembered, raised again without the model
    error_ttl=5,
)


@cached_prediction(cache)
async def classify(text: str) -> str:
    return await model(text)


async def main() -> None:
    print(await classify("great film"))  # a miss: the model runs
    await asyncio.sleep(0.3)  # past the ttl: stale, within stale-while-revalidate
    answers = await asyncio.gather(*(classify("great film") for _ in range(100)))
    print("stale answers:", set(answers), "model runs:", runs)  # at once, one refresh started
    while cache.stats()["in_flight"]:  # noqa: ASYNC110 - the refresh lands
        await asyncio.sleep(0.01)
    print("refreshed:", await classify("great film"))

    global down
    down = True
    await asyncio.sleep(2.5)  # past both the ttl and the revalidate window
    print("model down, stale if error:", await classify("great film"))

    down = False
    for _ in range(2):
        try:
            await classify("")
        except ValueError as exc:
            print("cached error:", exc, "model runs:", runs)

    stats = cache.stats()
    print({name: stats[name] for name in ("stale_hits", "refreshes", "stale_if_error_hits")})
    print("error hits:", stats["error_hits"])
    await cache.aclose()


asyncio.run(main())
