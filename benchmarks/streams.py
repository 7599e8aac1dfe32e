"""Streamed results: time to the first and the last chunk, miss, follower and hit, beside the
bare generator.

Run: ``.venv/bin/python benchmarks/streams.py`` (``--quick`` for fewer repeats,
``--json PATH`` to write the table as JSON).

A token generator yields ``CHUNKS`` chunks, each after ``DELAY`` seconds (a
model producing tokens). Each measure is the median over repeats, each repeat
on a key of its own, on a ``MemoryStore``:

- bare: the generator called directly, no cache;
- miss: a lone caller of the cached generator (it runs and is stored);
- follower, at the start: a second caller of the same key that starts with the leader;
- follower, mid-stream: one that starts after the leader had half the chunks (it gets
  them at once, then the rest live);
- hit: a later caller (the stored chunks replayed at once), and with ``pace=True``
  (replayed at the recorded pace).

Then the cost per chunk with no delay: ``MANY`` chunks produced as fast as the
generator can, through a miss and a hit, against the bare generator.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from _common import Row, machine, render, write_rows_json

from asyncache import DecisionCache, cached_prediction

CHUNKS = 32
DELAY = 0.005
MANY = 2_000
COMMAND = "python benchmarks/streams.py"


async def tokens(prompt: str, delay: float = DELAY, count: int = CHUNKS) -> AsyncIterator[str]:
    for index in range(count):
        if delay:
            await asyncio.sleep(delay)
        yield f" token{index}"


class Clock:
    """When a reader got its first and its last chunk, from its own start."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.first = 0.0
        self.last = 0.0
        self.count = 0

    async def read(self, stream: AsyncIterator[Any], on_chunk: Callable[[int], None]) -> None:
        async for _ in stream:
            now = time.perf_counter() - self.started
            if self.count == 0:
                self.first = now
            self.count += 1
            on_chunk(self.count)
        self.last = time.perf_counter() - self.started


async def _read(stream: AsyncIterator[Any]) -> Clock:
    clock = Clock()
    await clock.read(stream, lambda _: None)
    return clock


async def measure(repeats: int) -> dict[str, list[float]]:
    """Seconds to the first and the last chunk of each way in, one list per measure."""
    seen: dict[str, list[float]] = {}

    def note(name: str, clock: Clock) -> None:
        assert clock.count == CHUNKS, (name, clock.count)
        seen.setdefault(f"{name}|first", []).append(clock.first)
        seen.setdefault(f"{name}|last", []).append(clock.last)

    async with DecisionCache() as cache:
        cached = cached_prediction(cache, namespace="bench.tokens")(tokens)
        paced = cached_prediction(cache, namespace="bench.tokens", pace=True)(tokens)
        for repeat in range(repeats):
            note("bare generator", await _read(tokens(f"bare {repeat}")))
            note("miss", await _read(cached(f"miss {repeat}")))
            note("hit", await _read(cached(f"miss {repeat}")))
            note("hit, pace=True", await _read(paced(f"miss {repeat}")))
            prompt = f"together {repeat}"
            together = await asyncio.gather(_read(cached(prompt)), _read(cached(prompt)))
            note("follower, at the start", together[1])
            prompt = f"mid-stream {repeat}"
            halfway = asyncio.Event()

            def at_half(count: int, halfway: asyncio.Event = halfway) -> None:
                if count == CHUNKS // 2:
                    halfway.set()

            reading = asyncio.ensure_future(Clock().read(cached(prompt), at_half))
            await halfway.wait()
            note("follower, mid-stream", await _read(cached(prompt)))
            await reading
        assert cache.stats()["coalesced"] == 2 * repeats
    return seen


async def per_chunk(repeats: int) -> dict[str, float]:
    """Seconds per chunk with no delay: bare, miss and hit."""
    times: dict[str, list[float]] = {"bare generator": [], "miss": [], "hit": []}
    async with DecisionCache(max_entry_bytes=1 << 24) as cache:
        cached = cached_prediction(cache, namespace="bench.fast", max_chunks=MANY)(tokens)
        for repeat in range(repeats):
            for name, stream in (
                ("bare generator", tokens("fast", 0.0, MANY)),
                ("miss", cached(f"fast {repeat}", 0.0, MANY)),
                ("hit", cached(f"fast {repeat}", 0.0, MANY)),
            ):
                clock = await _read(stream)
                assert clock.count == MANY
                times[name].append(clock.last / MANY)
        assert cache.stats()["stores"] == repeats
    return {name: statistics.median(values) for name, values in times.items()}


def rows(seen: dict[str, list[float]], chunk: dict[str, float]) -> list[Row]:
    out = []
    for name in (
        "bare generator",
        "miss",
        "follower, at the start",
        "follower, mid-stream",
        "hit",
        "hit, pace=True",
    ):
        for end in ("first", "last"):
            value = statistics.median(seen[f"{name}|{end}"]) * 1e3
            out.append(Row(f"{name}: {end} chunk", value, "ms", "-", "-"))
    for name, seconds in chunk.items():
        out.append(Row(f"per chunk, no delay: {name}", seconds * 1e6, "us", "-", "-"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 repeats instead of 30")
    parser.add_argument("--json", metavar="PATH", help="also write the table as JSON")
    options = parser.parse_args(argv)
    repeats = 5 if options.quick else 30
    seen = asyncio.run(measure(repeats))
    chunk = asyncio.run(per_chunk(max(3, repeats // 3)))
    table_rows = rows(seen, chunk)
    notes = [
        f"{CHUNKS} chunks, one every {DELAY * 1e3:g} ms (asyncio.sleep), on a MemoryStore; "
        f"medians over {repeats} repeats, each on a key of its own; {machine()}.",
        "A follower that joins mid-stream gets the chunks so far at once: its first chunk "
        "does not wait for the generator.",
        "Last chunk: when the caller's loop ended (a miss's, once its stream was stored); "
        "each from the caller's own start.",
        f"Per chunk, no delay: {MANY} chunks as fast as the generator yields them.",
    ]
    print(render(table_rows))
    for note in notes:
        print(f"- {note}")
    if options.json:
        write_rows_json(
            Path(options.json),
            title="Streamed results",
            command=COMMAND,
            rows=table_rows,
            notes=notes,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
