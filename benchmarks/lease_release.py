"""Released leases that go on being renewed: issue 33's first attack, rerun.

Run: ``.venv/bin/python benchmarks/lease_release.py`` (``--keys``, ``--rounds``: fresh
caches on the same server, one after another).

One process, a private redis-server, ``DecisionCache(leases=True)`` with the
default ``lease_ttl`` (1 s): 2,000 distinct keys at once, each model taking
0.3-1.2 s (longer than ``lease_ttl / 3``, so its lease is renewed while it
runs). Then:

1. three seconds after every flight has ended, how many lease keys are still
   live (a released lease must stay released: none);
2. the store is cleared and the same 2,000 keys are asked for again (a 1 ms
   model): how many got no answer within 5 s (a key whose released lease is
   still renewed waits for a decision nobody will store, until
   ``coalesce_timeout``).

Before issue 33's fix (Python 3.11.7, redis-py 8.2.0, first round of a fresh
process): 42 and 43 leases live 3 s after the end, and 10 and 31 of the 2,000
keys without an answer after the clear (the issue measured 15-28 and 10-15).
After: 0 and 0. Later rounds in one process measure less: the first round's
renewals that never stopped run against its closed store.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

from _common import start_redis

from asyncache import DecisionCache, cached_prediction
from asyncache.stores.redis import RedisStore
from tests.support.stores import live_leases

PREFIX = "attack:"


async def attack(url: str, keys: int, rng: random.Random, lease_ttl: float) -> tuple[int, int]:
    store = RedisStore.from_url(url, prefix=PREFIX)
    # A generous store_timeout: on a loaded machine 2,000 flights at once would otherwise
    # trip the store's failure cool-down, and a cooling store sends no renewals at all.
    async with DecisionCache(store, leases=True, lease_ttl=lease_ttl, store_timeout=30) as cache:

        @cached_prediction(cache, namespace="slow")
        async def slow(x: int) -> int:
            await asyncio.sleep(rng.uniform(0.3, 1.2))
            return x

        @cached_prediction(cache, namespace="slow")
        async def fast(x: int) -> int:
            await asyncio.sleep(0.001)
            return x

        await asyncio.gather(*(slow(i) for i in range(keys)))
        await asyncio.sleep(3.0)
        live = await live_leases(url, PREFIX)
        await store.clear()

        async def answered(i: int) -> bool:
            try:
                async with asyncio.timeout(5.0):
                    await fast(i)
            except TimeoutError:
                return False
            return True

        answers = await asyncio.gather(*(answered(i) for i in range(keys)))
        return live, answers.count(False)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--lease-ttl", type=float, default=1.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        server = start_redis(Path(workdir))
        if server is None:
            sys.exit("needs redis-server")
        try:
            for round_ in range(args.rounds):
                started = time.monotonic()
                live, unanswered = await attack(
                    server.url, args.keys, random.Random(round_), args.lease_ttl
                )
                print(
                    f"round {round_ + 1}: {live} leases live 3 s after {args.keys} flights "
                    f"ended; {unanswered} of {args.keys} keys without an answer in 5 s after "
                    f"a clear ({time.monotonic() - started:.1f} s)",
                    flush=True,
                )
        finally:
            server.stop()


if __name__ == "__main__":
    asyncio.run(main())
