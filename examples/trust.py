"""Trust: hits served only while audits bound how often they are wrong (docs/audit.md)."""

import asyncio

from asyncache import DecisionCache, cached_prediction

answer = {"text": "approve"}


async def model(text: str) -> str:
    return answer["text"]


def breach(namespace: str, report: object) -> None:
    print(f"breach in {namespace}: {report}")


async def main() -> None:
    # A loose bound for the example: at most 20% wrong at 95% confidence takes 14
    # agreeing audits (use audit_rate=0.05, max_wrong_rate=0.01 in production: 299).
    cache = DecisionCache(audit_rate=1.0, max_wrong_rate=0.2, trust_window=20, on_breach=breach)
    predict = cached_prediction(cache, namespace="review")(model)
    for _ in range(16):  # a miss, then hits computed and compared until trust is earned
        await predict("order 1234")
        await asyncio.sleep(0)  # background audits run
    stats = cache.stats()
    print("doubt computes:", stats["doubt_computes"], "verified hits:", stats["verified_hits"])
    answer["text"] = "deny"  # the model changed; the stored decision did not
    print("served:", await predict("order 1234"))  # trusted: served, audited
    await asyncio.sleep(0.01)  # the audit disagrees, repairs the key and breaches
    print("served:", await predict("order 1234"))  # in doubt: computed
    stats = cache.stats()
    print("breaches:", stats["breaches"], "repairs:", stats["repairs"])
    await cache.aclose()


asyncio.run(main())
