"""What a server keeps after hits on large answers that compress small.

    .venv/bin/python benchmarks/hit_memory.py            # 512 requests, 1 MiB answers, each twice
    .venv/bin/python benchmarks/hit_memory.py --requests 64

The middleware over an app answering 1 MiB of one repeated character (zlib
stores it in about 1 KiB), in process: 512 distinct requests, each sent twice
(a miss, then a hit). Prints how much the process grew and stayed grown
(resident set, and what tracemalloc sees held once the garbage is collected).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import tracemalloc

from _common import ROOT  # noqa: F401  (puts the checkout on sys.path)

from asyncache import DecisionCache
from asyncache.middleware import DecisionCacheMiddleware
from tests.middleware import Answer, RecordingApp, call


def resident_mib() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * 4096 / 2**20


async def attack(requests: int, size: int) -> tuple[float, float]:
    app = RecordingApp(Answer(chunks=[b"a" * size]))
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache())
    await call(middleware, body=b'{"warm": 1}')
    await call(middleware, body=b'{"warm": 1}')
    app.bodies.clear(), app.received.clear(), app.scopes.clear()  # what the app records
    gc.collect()
    rss_before = resident_mib()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for n in range(requests):
        for _ in range(2):
            result = await call(middleware, body=b'{"n": %d}' % n)
            assert len(result.body) == size
    app.bodies.clear(), app.received.clear(), app.scopes.clear()
    gc.collect()
    held = (tracemalloc.get_traced_memory()[0] - before) / 2**20
    tracemalloc.stop()
    return resident_mib() - rss_before, held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=512)
    parser.add_argument("--size", type=int, default=1024 * 1024)
    options = parser.parse_args()
    grown, held = asyncio.run(attack(options.requests, options.size))
    print(
        f"{options.requests} requests x 2, {options.size:,}-byte answers: "
        f"resident +{grown:.1f} MiB, held after gc +{held:.1f} MiB (tracemalloc)"
    )


if __name__ == "__main__":
    main()
