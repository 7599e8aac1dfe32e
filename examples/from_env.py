"""Configuration from the environment: the deployment picks the store, the ttl and the switch.

Run it as is (memory store), or for instance:

    ASYNCACHE_STORE_URL=sqlite:///decisions.sqlite ASYNCACHE_TTL=3600 python examples/from_env.py
    ASYNCACHE_ENABLED=false python examples/from_env.py
"""

import asyncio

from asyncache import cached_prediction

# isort: split
# --8<-- [start:from_env]
from asyncache import DecisionCache

# Keyword arguments win over the environment: code keeps what must not change.
cache = DecisionCache.from_env(fingerprint="intent-v3")
# --8<-- [end:from_env]
runs = 0


@cached_prediction(cache)
async def classify(text: str) -> str:
    global runs
    runs += 1
    return "refund" if "refund" in text else "other"


async def main() -> None:
    print("store:", type(cache.store).__name__, "ttl:", cache.ttl, "enabled:", cache.enabled)
    for _ in range(3):
        await classify("where is my refund?")
    print("model runs for 3 identical calls:", runs)
    print("entries in the store:", await cache.store.count())
    await cache.aclose()


asyncio.run(main())
