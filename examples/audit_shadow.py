"""Audit sampling and shadow mode: measure whether what the cache serves is still right."""

import asyncio
from typing import Any

from asyncache import DecisionCache, cached_prediction

answer = {"text": "approve"}


async def model(text: str) -> str:
    await asyncio.sleep(0.01)
    return answer["text"]


def report(inputs: Any, stored: Any, fresh: Any) -> None:
    print(f"mismatch for {inputs}: served {stored!r}, the model now says {fresh!r}")


async def main() -> None:
    # Audit: every hit (audit_rate=1.0; use 0.01 in production) is recomputed in the background.
    cache = DecisionCache(audit_rate=1.0, on_mismatch=report)
    predict = cached_prediction(cache, namespace="review")(model)
    await predict("order 1234")  # a miss: computed and stored
    answer["text"] = "deny"  # the model changed; the stored decision did not
    served = [await predict("order 1234") for _ in range(2)]
    print("served:", served)  # the callers never wait for, or see, an audit
    await cache.aclose()  # waits for the background audits
    stats = cache.stats()
    print("audits:", stats["audits"], "agreed:", stats["audit_agreed"], end=" ")
    print("mismatched:", stats["audit_mismatched"])

    # Shadow: compute every call, fill the store, count what the cache would have done.
    answer["text"] = "approve"
    shadow = DecisionCache(mode="shadow")
    predict = cached_prediction(shadow, namespace="review")(model)
    for order in ["order 1", "order 2", "order 1", "order 1"]:
        await predict(order)
    stats = shadow.stats()
    print("shadow: would hit", stats["shadow_would_hit"], "of 4;", end=" ")
    print("agreed:", stats["shadow_agreed"], "mismatched:", stats["shadow_mismatched"])
    await shadow.aclose()


asyncio.run(main())
