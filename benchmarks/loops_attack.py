"""One cache shared by several threads' event loops, hammered: how many calls raise.

    .venv/bin/python benchmarks/loops_attack.py                 # 8 loops, 1.2 M calls
    .venv/bin/python benchmarks/loops_attack.py --calls 100000  # a shorter run

Each thread runs ``asyncio.run`` over the same ``DecisionCache(MemoryStore(max_entries=500))``
and calls a cached function over 2,000 keys in a shuffled order, so that the
store's LRU and the hit memory (``asyncache.engine._memo``) evict all the
time while other threads read them. Prints the calls made and the errors.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import random
import sys
import threading
import time

from _common import ROOT  # noqa: F401  (puts the checkout on sys.path)

from asyncache import DecisionCache, MemoryStore, cached_prediction


def attack(threads: int, calls: int, keys: int, max_entries: int) -> tuple[int, dict[str, int]]:
    cache = DecisionCache(MemoryStore(max_entries=max_entries))

    @cached_prediction(cache, namespace="attack")
    async def answer(question: str) -> dict[str, list[bool]]:
        return {"answers": [len(question) % 2 == 0, True]}

    errors: collections.Counter[str] = collections.Counter()
    made = [0] * threads
    per_thread = calls // threads

    async def loop(index: int) -> None:
        order = random.Random(index)
        questions = [f"question {n}" for n in range(keys)]
        for call in range(per_thread):
            question = questions[order.randrange(keys)]
            try:
                got = await answer(question)
                assert got == {"answers": [len(question) % 2 == 0, True]}, got
            except Exception as exc:
                # By type: a KeyError names a different key each time.
                errors[type(exc).__name__ if isinstance(exc, KeyError) else repr(exc)[:120]] += 1
            made[index] += 1
            if call % 64 == 0:
                await asyncio.sleep(0)

    workers = [
        threading.Thread(target=lambda i=i: asyncio.run(loop(i)), daemon=True)
        for i in range(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(made), dict(errors)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--calls", type=int, default=1_200_000)
    parser.add_argument("--keys", type=int, default=2_000)
    parser.add_argument("--max-entries", type=int, default=500)
    parser.add_argument(
        "--switch", type=float, default=1e-5, help="sys.setswitchinterval: smaller, more races"
    )
    options = parser.parse_args()
    sys.setswitchinterval(options.switch)
    started = time.perf_counter()
    made, errors = attack(options.threads, options.calls, options.keys, options.max_entries)
    seconds = time.perf_counter() - started
    print(
        f"{made:,} calls over {options.threads} loops in {seconds:.1f} s: "
        f"{sum(errors.values())} errors"
    )
    for text, count in sorted(errors.items(), key=lambda item: -item[1]):
        print(f"  {count:6d}  {text}")


if __name__ == "__main__":
    main()
