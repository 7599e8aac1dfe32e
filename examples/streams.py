"""Streamed results: an async generator cached as one decision made of chunks."""

import asyncio
from collections.abc import AsyncIterator

from asyncache import DecisionCache, cached_prediction

cache = DecisionCache()
runs = 0


@cached_prediction(cache)
async def generate(prompt: str) -> AsyncIterator[str]:
    """A model that streams its answer, one token every 10 ms."""
    global runs
    runs += 1
    for word in f"you asked: {prompt}".split():
        await asyncio.sleep(0.01)
        yield word + " "


async def read(who: str, log: list[str]) -> str:
    text = ""
    async for token in generate("why cache streams"):
        log.append(who)
        text += token
    return text


async def main() -> None:
    log: list[str] = []
    # Two identical calls at once: one model run, both get every token as it comes.
    leader, follower = await asyncio.gather(read("leader", log), read("follower", log))
    print(f"leader:   {leader!r}")
    print(f"follower: {follower!r}")
    # Live: the follower's first token came while the leader's stream was still running.
    last_of_leader = len(log) - 1 - log[::-1].index("leader")
    print(
        "follower's first token before the leader's last:", log.index("follower") < last_of_leader
    )
    # A later call replays the stored tokens, with the same boundaries, at once.
    print("hit:", [token async for token in generate("why cache streams")])
    print("model runs:", runs)
    stats = cache.stats()
    print({name: stats[name] for name in ("hits", "misses", "coalesced", "stores", "streams")})


asyncio.run(main())
