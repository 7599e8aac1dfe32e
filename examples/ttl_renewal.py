"""TTL and renewal: how long a decision lives, and which decisions are not kept at all."""

import asyncio
import time

from asyncache import DecisionCache, MemoryStore, cached_prediction


def ttl(inputs: dict, result: dict) -> float:
    # Confident decisions live longer; an abstention is not stored (ttl <= 0).
    if result["label"] == "unsure":
        return 0
    return 3600.0 if result["confidence"] >= 0.9 else 60.0


def admit(inputs: dict, result: dict) -> bool:
    # A degraded answer (the model timed out and a fallback answered) is never kept.
    return not result.get("fallback", False)


store = MemoryStore()
cache = DecisionCache(store, fingerprint="moderation-v4", ttl=ttl, admit=admit)


@cached_prediction(cache)
async def moderate(text: str) -> dict:
    if "timeout" in text:
        return {"label": "allow", "confidence": 0.0, "fallback": True}
    if "?" in text:
        return {"label": "unsure", "confidence": 0.5}
    confidence = 0.95 if "spam" in text else 0.7
    return {"label": "block" if "spam" in text else "allow", "confidence": confidence}


async def remaining(text: str) -> str:
    entry = await store.get(moderate.key(text))
    if entry is None:
        return "not stored"
    return "no expiry" if entry.expires_at is None else f"{entry.expires_at - time.time():.0f} s"


async def main() -> None:
    for text in ("buy spam now", "hello there", "is this ok?", "timeout"):
        await moderate(text)
        print(f"{text!r:16} expires in: {await remaining(text)}")
    stats = cache.stats()
    print("stores:", stats["stores"], "not admitted:", stats["not_admitted"])

    # renew_on_hit: a hit pushes the expiry out by the decision's ttl, at most once
    # every ttl/16, in a background task (the hit itself does not wait for it).
    renewing = DecisionCache(MemoryStore(), fingerprint="moderation-v4", ttl=1.0, renew_on_hit=True)

    @cached_prediction(renewing)
    async def lookup(text: str) -> str:
        return text.upper()

    await lookup("hot key")
    for _ in range(4):
        await asyncio.sleep(0.35)  # 1.4 s in all: past the 1 s ttl
        await lookup("hot key")
    await asyncio.sleep(0)  # let the last renewal run
    stats = renewing.stats()
    print("hot key: hits", stats["hits"], "misses", stats["misses"], "renewals", stats["renewals"])
    await renewing.aclose()
    await cache.aclose()


asyncio.run(main())
