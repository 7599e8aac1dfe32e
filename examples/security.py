"""Security: tenant scoping, signed entries, and what a forged or altered entry does."""

import asyncio
import logging
import time

from asyncache import DecisionCache, Entry, MemoryStore, cached_prediction
from asyncache.codec import encode

logging.basicConfig(format="log: %(message)s")

store = MemoryStore()  # stands in for a shared SQLite file or Redis
SECRET = "load-me-from-a-secret-manager"
cache = DecisionCache(store, fingerprint="fraud-v9", secret=SECRET)
runs: list[str] = []


def tenant_of(account: str, amount: float, *, tenant: str) -> str:
    return tenant


# The tenant is the scope, not an input: the scope alone keeps the entries apart.
@cached_prediction(cache, scope=tenant_of, ignore=("tenant",))
async def score(account: str, amount: float, *, tenant: str) -> float:
    runs.append(tenant)
    return round(min(amount / 10_000, 1.0), 3)


async def main() -> None:
    # Same inputs, two tenants: two keys, two computations, nothing shared.
    await score("acct-42", 1250.0, tenant="acme")
    await score("acct-42", 1250.0, tenant="globex")
    await score("acct-42", 1250.0, tenant="acme")  # a hit inside acme's scope
    print("model runs per tenant:", runs)
    print(
        "keys differ by scope:",
        score.key("acct-42", 1250.0, tenant="acme")
        != score.key("acct-42", 1250.0, tenant="globex"),
    )

    # Someone with write access to the store plants a decision without the secret.
    key = score.key("acct-42", 1250.0, tenant="acme")
    forged = encode(0.0, ttl=None, created_at=time.time(), compute_seconds=0.0, key=key)
    store.put_now(key, Entry(forged, None))
    print("after forging:", await score("acct-42", 1250.0, tenant="acme"))

    # Change one digit of a signed entry: the HMAC check fails, the entry is dropped.
    entry = await store.get(key)
    assert entry is not None
    value = entry.value
    store.put_now(key, Entry(value[:-2] + bytes([value[-2] ^ 1]) + value[-1:], entry.expires_at))
    print("after tampering:", await score("acct-42", 1250.0, tenant="acme"))

    stats = cache.stats()
    print("corrupt entries dropped:", stats["corrupt"], "model runs:", len(runs))
    await cache.aclose()


asyncio.run(main())
