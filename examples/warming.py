"""Pre-warming: compute yesterday's requests before today's traffic asks for them."""

import asyncio

from asyncache import DecisionCache, cached_prediction, open_store
from asyncache.engine._warm import WarmSummary

URL = "sqlite:///warm.sqlite"
runs = 0


def service() -> tuple[DecisionCache, object]:
    cache = DecisionCache(open_store(URL), ttl=24 * 3600, fingerprint="triage-v3")

    @cached_prediction(cache, namespace="triage")
    async def triage(text: str, language: str = "en") -> str:
        global runs
        runs += 1
        await asyncio.sleep(0.01)
        if not text:
            raise ValueError("empty message")
        return "urgent" if "down" in text else "normal"

    return cache, triage


def show(progress: WarmSummary) -> None:
    if progress.done % 4 == 0:
        print(f"  {progress.done}/{progress.total} done")


async def main() -> None:
    # On a machine with the big GPU: yesterday's traffic, one argument dict per request.
    cache, triage = service()
    yesterday = [{"text": f"ticket {i}"} for i in range(6)]
    yesterday += [{"text": "site is down"}, ["le site est down", "fr"], {"text": ""}]
    yesterday += [{"text": "ticket 0"}]  # a duplicate: already cached when its turn comes
    summary = await cache.warm(triage, yesterday, concurrency=4, progress=show)
    print(f"computed {summary.computed}, already cached {summary.cached}, failed {summary.failed}")
    print("first failure:", summary.errors[0])
    await cache.aclose()

    # On a CPU replica sharing the store: every warmed request is a hit.
    cache, triage = service()
    before = runs
    print(await triage("site is down"), await triage("le site est down", language="fr"))
    print("model runs on the replica:", runs - before, "hits:", cache.stats()["hits"])
    await cache.aclose()


asyncio.run(main())
