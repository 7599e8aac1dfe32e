"""A fleet on Redis: replicas share decisions, and each keeps hot ones in memory.

    REDIS_URL=redis://127.0.0.1:6379/0 python examples/tiered_redis.py

Everything it writes is under the key prefix ``asyncache-example:``, which it
clears at the start and at the end; nothing else in that database is touched.
"""

import asyncio
import os
import sys

from asyncache import DecisionCache, cached_prediction, open_store

REDIS_URL = os.environ.get("REDIS_URL")
if not REDIS_URL:
    sys.exit("set REDIS_URL, e.g. REDIS_URL=redis://127.0.0.1:6379/0")

# l1_* options configure the memory tier; the rest (prefix) go to the RedisStore.
STORE_URL = f"tiered+{REDIS_URL}?prefix=asyncache-example:&l1_max_entries=10000&l1_ttl=30"
model_runs: list[str] = []


def replica(name: str) -> tuple[DecisionCache, object]:
    """One service replica: its own cache and memory tier, the shared Redis behind."""
    cache = DecisionCache(open_store(STORE_URL), fingerprint="triage-v2", ttl=3600)

    @cached_prediction(cache, namespace="triage")
    async def triage(text: str) -> str:
        model_runs.append(name)
        await asyncio.sleep(0.05)  # the model's forward pass
        return "urgent" if "outage" in text else "normal"

    return cache, triage


async def main() -> None:
    # Start from an empty prefix before any replica listens: a clear tells every
    # memory tier listening to drop its copies, and that message would reach the
    # replicas a moment later, in the middle of what follows.
    leftovers = open_store(f"{REDIS_URL}?prefix=asyncache-example:")
    await leftovers.clear()
    await leftovers.aclose()
    (cache_a, triage_a), (cache_b, triage_b) = replica("a"), replica("b")
    text = "full outage in eu-west since 09:12"

    print("replica a:", await triage_a(text), "(computed)")
    print("replica b:", await triage_b(text), "(from Redis)")
    for _ in range(100):
        await triage_b(text)  # from replica b's memory tier
    print("model runs:", model_runs)
    store_stats = cache_b.store.stats()
    print("replica b tiers: l1 hits", store_stats["l1_hits"], "l2 hits", store_stats["l2_hits"])

    # Both replicas miss the same new request at the same moment: each runs the model
    # (coalescing is per process; leases extend it to the fleet), and the first
    # decision stored wins, so both answer the same.
    model_runs.clear()
    answers = await asyncio.gather(triage_a("login page slow"), triage_b("login page slow"))
    print("race:", answers, "model runs:", sorted(model_runs))
    conflicts = cache_a.stats()["conflicts"] + cache_b.stats()["conflicts"]
    print("replicas that found another's decision already stored:", conflicts)
    print("entries in Redis:", await cache_a.store.count())

    await cache_a.store.clear()
    await cache_a.aclose()
    await cache_b.aclose()


asyncio.run(main())
