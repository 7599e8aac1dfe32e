"""The hit path: what a cached decision costs, beside cashews, aiocache and async-lru.

    .venv/bin/python benchmarks/hit_path.py                # the full run (about a minute)
    .venv/bin/python benchmarks/hit_path.py --quick        # fewer repeats: a smoke test
    .venv/bin/python benchmarks/hit_path.py --json out.json

Prints one table from one run. Every time is the median over repeats of a
loop's mean; the garbage collector is off while a loop is timed, as timeit
does. The peers are measured in the same process, on the same inputs (a
context of 140, 2,000 or 20,000 characters and two short questions), in
rounds interleaved with asyncache's: each round times one loop of every
cache, and a ratio is the median of the rounds' own ratios, so that a slow
spell of the machine moves both sides of a ratio alike.

Times are CPU seconds of this process (``time.process_time``) unless
``--wall``: on a shared machine, wall time also counts the other jobs'
turns on the CPU. Everything measured here runs on one thread, so on an idle
machine the two agree.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

# Importing _common first also puts the checkout's root on sys.path, for asyncache.
from _common import ROOT, Row, machine, passes, render, write_rows_json

from asyncache import DecisionCache, MemoryStore, cached_prediction

SIZES = (140, 2_000, 20_000)
clock = time.process_time  # --wall: time.perf_counter
QUESTIONS = ["Who signed the contract?", "When does it end?"]
ANSWER = ["Acme Corp.", "2027-03-31"]
# Targets from issue 2, for this 2-core machine.
HIT_TARGET_US = 2.0
KEY_TARGETS_US = {140: 1.0, 2_000: 3.0, 20_000: 20.0}
HEAP_TARGET = 400
COALESCE_EXTRA_TARGET_US = 10.0
# Raised by the performance issue: asyncache's hit at 140 chars at least this many
# times faster than aiocache's and cashews', and at most this many times async-lru's.
AIOCACHE_RATIO_TARGET = 10.0
CASHEWS_RATIO_TARGET = 20.0
ASYNC_LRU_MAX_RATIO = 1.3
IMPORT_TARGET_MS = 50.0


def context_of(size: int, seed: int = 0) -> str:
    """A contract-like text of exactly ``size`` characters."""
    words = (
        "the supplier shall deliver goods to the buyer within thirty days of each order "
        "and the buyer shall pay every invoice within sixty days of delivery "
    )
    text = f"[{seed}] " + words * (size // len(words) + 2)
    return text[:size]


async def per_call(
    call: Callable[[], Awaitable[Any]], *, number: int, repeats: int, warm: bool = True
) -> float:
    """Median over ``repeats`` of the mean seconds per awaited call in a loop of ``number``."""
    for _ in range(min(number, 200) if warm else 0):  # warm the interpreter's specializations
        await call()
    means = []
    gc.disable()
    try:
        for _ in range(repeats):
            started = clock()
            for _ in range(number):
                await call()
            means.append((clock() - started) / number)
    finally:
        gc.enable()
    return statistics.median(means)


def per_call_sync(call: Callable[[], Any], *, number: int, repeats: int) -> float:
    for _ in range(min(number, 200)):
        call()
    means = []
    gc.disable()
    try:
        for _ in range(repeats):
            started = clock()
            for _ in range(number):
                call()
            means.append((clock() - started) / number)
    finally:
        gc.enable()
    return statistics.median(means)


# -- asyncache ---------------------------------------------------------------


def make_answer(cache: DecisionCache) -> Any:
    @cached_prediction(cache, namespace="bench.answer")
    async def answer(context: str, questions: list[str]) -> list[str]:
        return list(ANSWER)

    return answer


NESTED = {"answers": [True, False]}


def make_nested(cache: DecisionCache) -> Any:
    """The same call, its result nesting (a dict of a list), as many models' do."""

    @cached_prediction(cache, namespace="bench.nested")
    async def answer(context: str, questions: list[str]) -> dict[str, list[bool]]:
        return {"answers": list(NESTED["answers"])}

    return answer


def key_costs(number: int, repeats: int) -> dict[int, float]:
    builder = DecisionCache().key_builder("bench.answer")
    results = {}
    for size in SIZES:
        inputs = {"context": context_of(size), "questions": QUESTIONS}
        scale = max(1, size // 2_000)
        results[size] = per_call_sync(
            lambda inputs=inputs: builder.key(inputs),
            number=max(200, number // scale),
            repeats=repeats,
        )
    return results


async def heap_per_decision(count: int) -> float:
    """Heap bytes the cache keeps per stored decision (tracemalloc, ``count`` decisions)."""
    cache = DecisionCache(MemoryStore(max_entries=None, max_bytes=None))
    answer = make_answer(cache)
    contexts = [context_of(140, seed) for seed in range(count)]
    await answer("warm-up", QUESTIONS)  # first-call allocations are not per decision
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for context in contexts:
            await answer(context, QUESTIONS)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(cache.store) == count + 1  # type: ignore[arg-type]
    return (after - before) / count


async def miss_round(coalesce: bool, contexts: list[str]) -> float:
    """Mean seconds per miss (distinct inputs, an instant function, a fresh store)."""
    answer = make_answer(DecisionCache(MemoryStore(), coalesce=coalesce))
    await answer("warm-up", QUESTIONS)
    gc.disable()
    try:
        started = clock()
        for context in contexts:
            await answer(context, QUESTIONS)
        mean = (clock() - started) / len(contexts)
    finally:
        gc.enable()
    assert answer.cache.stats()["misses"] == len(contexts) + 1
    return mean


async def miss_costs(count: int, repeats: int) -> tuple[float, float, float]:
    """Seconds per miss with coalescing on and off, and what coalescing adds.

    The two run in alternating rounds (the order swapping each round), and the
    extra cost is the median of the rounds' differences, so that a change in
    the machine's load between rounds shifts both sides alike.
    """
    contexts = [context_of(140, seed) for seed in range(count)]
    on: list[float] = []
    off: list[float] = []
    for round_ in range(repeats):
        for coalesce in (True, False) if round_ % 2 == 0 else (False, True):
            (on if coalesce else off).append(await miss_round(coalesce, contexts))
    extra = statistics.median(a - b for a, b in zip(on, off, strict=True))
    return statistics.median(on), statistics.median(off), extra


async def stampede(callers: int) -> int:
    """How many times the function runs when ``callers`` ask for one new key at once."""
    runs = 0
    gate = asyncio.Event()
    cache = DecisionCache(MemoryStore())

    @cached_prediction(cache)
    async def slow(context: str, questions: list[str]) -> list[str]:
        nonlocal runs
        runs += 1
        await gate.wait()
        return list(ANSWER)

    tasks = [asyncio.create_task(slow("stampede", QUESTIONS)) for _ in range(callers)]
    for _ in range(100 * callers):  # let every caller reach the flight
        if cache.stats()["coalesced"] == callers - 1:
            break
        await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(*tasks)
    assert all(result == ANSWER for result in results)
    return runs


# -- hits, beside the peers -----------------------------------------------------


def hit_callers(answer: Any) -> dict[str, Callable[[str], Awaitable[Any]]]:
    """One call per cache (``answer``: asyncache's), each answering from memory once warm."""
    callers: dict[str, Callable[[str], Awaitable[Any]]] = {
        "asyncache": lambda context: answer(context, QUESTIONS)
    }
    try:
        from cashews import Cache as CashewsCache

        cashews = CashewsCache()
        cashews.setup("mem://")

        @cashews(ttl="1h")
        async def cashews_answer(context: str, questions: list[str]) -> list[str]:
            return list(ANSWER)

        callers["cashews"] = lambda context: cashews_answer(context, QUESTIONS)
    except ImportError:
        pass
    try:
        from aiocache import Cache, cached

        @cached(ttl=3600, cache=Cache.MEMORY)
        async def aiocache_answer(context: str, questions: list[str]) -> list[str]:
            return list(ANSWER)

        callers["aiocache"] = lambda context: aiocache_answer(context, QUESTIONS)
    except ImportError:
        pass
    try:
        from async_lru import alru_cache

        @alru_cache(maxsize=10_000)
        async def lru_answer(context: str, questions: tuple[str, ...]) -> list[str]:
            return list(ANSWER)

        questions = tuple(QUESTIONS)  # async-lru needs hashable arguments
        callers["async-lru"] = lambda context: lru_answer(context, questions)
    except ImportError:
        pass
    return callers


class Hits:
    """Seconds per hit of every cache at every size, measured in interleaved rounds.

    Each round times one loop of every cache in turn (the order reversing
    every other round, so that none is always first), and a ratio is the
    median of the rounds' own ratios: a slow spell of the machine falls on
    the loops of one round alike instead of on whichever cache ran then.
    """

    def __init__(self) -> None:
        self.rounds: dict[str, dict[int, list[float]]] = {}

    def seconds(self, name: str, size: int) -> float | None:
        """The median seconds per hit, or ``None`` for a peer that is not installed."""
        rounds = self.rounds.get(name, {}).get(size)
        return statistics.median(rounds) if rounds else None

    def ratio(self, name: str, size: int) -> float | None:
        """The median over rounds of ``name``'s time per hit over asyncache's."""
        theirs = self.rounds.get(name, {}).get(size)
        if not theirs:
            return None
        ours = self.rounds["asyncache"][size]
        return statistics.median(a / b for a, b in zip(theirs, ours, strict=True))


async def measure_hits(number: int, rounds: int) -> Hits:
    answer = make_answer(DecisionCache(MemoryStore()))
    callers = hit_callers(answer)
    nested = make_nested(answer.cache)
    callers["asyncache, nested result"] = lambda context: nested(context, QUESTIONS)
    # async-lru is about as fast as asyncache and gets as long a loop; the slow ones a quarter.
    loops = {
        "asyncache": number,
        "asyncache, nested result": number,
        "async-lru": number,
        "cashews": number // 4,
        "aiocache": number // 4,
    }
    hits = Hits()
    for size in SIZES:
        context = context_of(size)
        scale = max(1, size // 2_000)
        for name, call in callers.items():
            assert await call(context) == (NESTED if "nested" in name else ANSWER)  # the miss
            await per_call(partial(call, context), number=200, repeats=1)  # warm-up
        for round_ in range(rounds):
            order = list(callers) if round_ % 2 == 0 else list(reversed(callers))
            for name in order:
                seconds = await per_call(
                    partial(callers[name], context),
                    number=max(100, loops[name] // scale),
                    repeats=1,
                    warm=False,
                )
                hits.rounds.setdefault(name, {}).setdefault(size, []).append(seconds)
        assert answer.cache.stats()["misses"] == 2 * (SIZES.index(size) + 1)  # the rest hit
    return hits


# -- import time ---------------------------------------------------------------


def import_ms(runs: int) -> float:
    """Median milliseconds ``import asyncache`` adds to a fresh interpreter.

    With bytecode caching on, as an installed package has it (a first run
    compiles into a temporary cache that the measured runs read).
    """
    probe = (
        "import time\n"
        f"started = time.{clock.__name__}()\n"
        "import asyncache\n"
        f"print(time.{clock.__name__}() - started)\n"
    )
    times = []
    with tempfile.TemporaryDirectory() as pycache:
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONPYCACHEPREFIX=pycache)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for attempt in range(runs + 1):
            done = subprocess.run(
                [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env
            )
            if attempt:  # the first run filled the bytecode cache
                times.append(float(done.stdout) * 1000)
    return statistics.median(times)


# -- the table -----------------------------------------------------------------


async def measure(quick: bool) -> list[Row]:
    number, repeats = (2_000, 3) if quick else (20_000, 7)
    hits = await measure_hits(number, 5 if quick else 15)
    keys = key_costs(number, repeats)
    heap = await heap_per_decision(5_000 if quick else 50_000)
    miss_count = 500 if quick else 5_000
    coalesced, alone, extra_seconds = await miss_costs(miss_count, repeats)
    runs = await stampede(1_000)
    imported = import_ms(5 if quick else 15)

    rows = []
    for size in SIZES:
        hit = hits.seconds("asyncache", size)
        assert hit is not None
        ok = size != 140 or hit * 1e6 <= HIT_TARGET_US
        rows.append(
            Row(
                f"decorator hit, {size:,} chars",
                hit * 1e6,
                "us",
                f"<= {HIT_TARGET_US:g} us" if size == 140 else "-",
                passes(ok) if size == 140 else "-",
            )
        )
    for size in SIZES:
        nested = hits.seconds("asyncache, nested result", size)
        lru = hits.seconds("async-lru", size)
        times = hits.ratio("asyncache, nested result", size)  # its time over ours
        ours_over_lru = hits.ratio("async-lru", size)  # async-lru's over ours
        assert nested is not None and times is not None
        if lru is None or ours_over_lru is None:
            rows.append(
                Row(f"decorator hit, nested result, {size:,} chars", nested * 1e6, "us", "-", "-")
            )
            continue
        # Its time over async-lru's: (nested / ours) * (ours / lru), both same-round medians.
        ratio = times / ours_over_lru
        wanted = size == 140
        rows.append(
            Row(
                f"decorator hit, nested result, {size:,} chars",
                nested * 1e6,
                "us",
                f"<= {ASYNC_LRU_MAX_RATIO:g}x async-lru's time" if wanted else "-",
                f"{ratio:.2f}x" + (f" {passes(ratio <= ASYNC_LRU_MAX_RATIO)}" if wanted else ""),
            )
        )
    for size in SIZES:
        rows.append(
            Row(
                f"key alone, {size:,} chars",
                keys[size] * 1e6,
                "us",
                f"<= {KEY_TARGETS_US[size]:g} us",
                passes(keys[size] * 1e6 <= KEY_TARGETS_US[size]),
            )
        )
    rows.append(
        Row(
            "heap per stored decision",
            heap,
            "bytes",
            f"<= {HEAP_TARGET}",
            passes(heap <= HEAP_TARGET),
        )
    )
    extra = extra_seconds * 1e6
    rows.append(Row("miss, coalesce off", alone * 1e6, "us", "-", "-"))
    rows.append(Row("miss, coalesce on", coalesced * 1e6, "us", "-", "-"))
    rows.append(
        Row(
            "extra cost of a coalesced miss",
            extra,
            "us",
            f"<= {COALESCE_EXTRA_TARGET_US:g} us",
            passes(extra <= COALESCE_EXTRA_TARGET_US),
        )
    )
    rows.append(Row("1,000 identical concurrent misses", runs, "runs", "1", passes(runs == 1)))
    targets = {"cashews": CASHEWS_RATIO_TARGET, "aiocache": AIOCACHE_RATIO_TARGET}
    for name in ("cashews", "aiocache", "async-lru"):
        for size in SIZES:
            theirs, ratio = hits.seconds(name, size), hits.ratio(name, size)
            if theirs is None or ratio is None:
                rows.append(Row(f"{name} hit, {size:,} chars", None, "us", "-", "not installed"))
                continue
            target = targets.get(name) if size == 140 else None
            shown = f"{ratio:.1f}x" if ratio >= 1 else f"{ratio:.2f}x"
            verdict = shown + (f" {passes(ratio >= target)}" if target else "")
            wanted = f"asyncache >= {target:g}x faster" if target else "-"
            if name == "async-lru" and size == 140:
                # Time per hit: asyncache's over async-lru's, at most the target.
                wanted = f"asyncache <= {ASYNC_LRU_MAX_RATIO:g}x its time"
                verdict = f"{1 / ratio:.2f}x {passes(1 / ratio <= ASYNC_LRU_MAX_RATIO)}"
            rows.append(Row(f"{name} hit, {size:,} chars", theirs * 1e6, "us", wanted, verdict))
    rows.append(
        Row(
            "import asyncache",
            imported,
            "ms",
            f"< {IMPORT_TARGET_MS:g} ms",
            passes(imported < IMPORT_TARGET_MS),
        )
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, for a smoke test")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the rows as JSON")
    parser.add_argument("--wall", action="store_true", help="wall-clock time, not CPU time")
    options = parser.parse_args()
    global clock
    if options.wall:
        clock = time.perf_counter
    rows = asyncio.run(measure(options.quick))
    flags = " --quick" * options.quick + " --wall" * options.wall
    command = "python benchmarks/hit_path.py" + flags
    timer = "wall-clock" if options.wall else "CPU"
    print(f"# {command}  ({machine(f'{timer} time')})")
    print(render(rows))
    if options.json:
        write_rows_json(
            options.json,
            title="The hit path",
            command=command,
            rows=rows,
            notes=[
                f"Times are {timer} time: medians over repeats of a loop's mean, "
                "garbage collector off.",
                "Peers are measured in the same run on the same inputs, in rounds "
                "interleaved with asyncache's; a ratio is the median of the rounds' own "
                "ratios. async-lru gets the questions as a tuple (it needs hashable "
                "arguments).",
                "Heap per decision: tracemalloc over many stored decisions, 140-character "
                "contexts, two answers each.",
            ],
        )


if __name__ == "__main__":
    main()
