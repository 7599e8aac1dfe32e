"""Leases: replicas that share a store compute each key once between them.

Two caches stand for two replicas: each has its own in-process coalescing, and
only the lease in the shared SQLite file keeps the second from running the
model too. With Redis, the same code takes ``redis://host:6379``.
"""

import asyncio
from typing import Any

from asyncache import DecisionCache, cached_prediction, open_store

URL = "sqlite:///fleet.sqlite"
runs: list[str] = []


def replica(name: str) -> tuple[DecisionCache, Any]:
    cache = DecisionCache(open_store(URL), leases=True, lease_ttl=2.0, fingerprint="v1")

    @cached_prediction(cache, namespace="classify")
    async def classify(text: str) -> str:
        runs.append(name)
        await asyncio.sleep(0.2)  # the forward pass
        return "refund" if "money back" in text else "other"

    return cache, classify


async def main() -> None:
    (cache_a, classify_a), (cache_b, classify_b) = replica("a"), replica("b")

    # A hot request reaches both replicas at once: 20 callers on each.
    answers = await asyncio.gather(
        *[classify_a("I want my money back") for _ in range(20)],
        *[classify_b("I want my money back") for _ in range(20)],
    )
    print("model runs:", len(runs), "answers:", set(answers))
    waits = cache_a.stats()["lease_waits"] + cache_b.stats()["lease_waits"]
    print("lease waits:", waits)

    # A replica took the lease on a key and died before storing a decision: the
    # lease expires after lease_ttl, and exactly one waiter takes over.
    store = open_store(URL)
    dead_key = classify_a.key("where is my parcel")
    await store.acquire_lease(dead_key, b"a replica that crashed", 2.0)
    await store.aclose()
    answers = await asyncio.gather(
        classify_a("where is my parcel"),
        classify_b("where is my parcel"),
    )
    takeovers = cache_a.stats()["lease_takeovers"] + cache_b.stats()["lease_takeovers"]
    print("after a dead owner: model runs:", len(runs), "takeovers:", takeovers, set(answers))
    await cache_a.aclose()
    await cache_b.aclose()


asyncio.run(main())
