"""The decorator: how a call becomes a key, and what hits, misses and stampedes do."""

import asyncio

from asyncache import DecisionCache, cached_prediction

cache = DecisionCache(fingerprint="sentiment-v2")  # a MemoryStore by default
forward_passes = 0


@cached_prediction(cache, ignore=("request_id",))
async def sentiment(text: str, threshold: float = 0.5, request_id: str = "") -> dict:
    global forward_passes
    forward_passes += 1
    await asyncio.sleep(0.05)  # the model's forward pass
    score = min(len(text) / 40, 1.0)
    return {"label": "positive" if score >= threshold else "negative", "score": score}


async def main() -> None:
    # Arguments are bound to the signature with defaults applied: one key for all three.
    first = await sentiment("the update fixed my problem", request_id="a1")
    await sentiment("the update fixed my problem", 0.5, request_id="b2")
    await sentiment(text="the update fixed my problem", threshold=0.5)
    print("result:", first)
    print(
        "same key:",
        sentiment.key("the update fixed my problem")
        == sentiment.key(text="the update fixed my problem", threshold=0.5, request_id="zz"),
    )
    print("forward passes after 3 calls:", forward_passes)

    # 100 concurrent identical misses run the model once.
    answers = await asyncio.gather(*(sentiment("a stampede of one request") for _ in range(100)))
    print("forward passes after 100 concurrent calls:", forward_passes)
    print("identical answers:", all(answer == answers[0] for answer in answers))

    # uncached() runs the function without reading or writing the cache.
    await sentiment.uncached("the update fixed my problem")
    print("forward passes after uncached():", forward_passes)

    stats = cache.stats()
    print({name: stats[name] for name in ("hits", "misses", "coalesced", "stores")})
    await cache.aclose()


asyncio.run(main())
