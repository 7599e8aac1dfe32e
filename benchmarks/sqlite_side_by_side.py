"""SQLiteStore before and after a change, side by side: a hit, 64 concurrent hits, a write.

Each side runs in subprocesses of its own, with its tree first on the path
(``--before``: another checkout, e.g. main's), the two alternating round by
round so that the machine's load falls on both alike. Every number is the
median over rounds of each round's median: the wall time per operation, and
the process's CPU time per operation (its threads' too), which a loaded
machine disturbs less.

    python benchmarks/sqlite_side_by_side.py --before /work/main
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEASURES = (
    ("hit", "SQLiteStore hit"),
    ("hits64", "64 concurrent hits, per hit"),
    ("write", "store of one decision (synchronous=NORMAL)"),
)


async def measure(folder: Path, *, number: int, repeats: int) -> dict[str, float]:
    """Microseconds per operation, each the median of ``repeats`` timings of ``number``."""
    from asyncache.stores.sqlite import SQLiteStore

    value = b"x" * 200
    keys = [i.to_bytes(16, "big") for i in range(256)]
    store = SQLiteStore(folder / "hits.db", prune_interval=None)
    await store.add_many([(k, value, None) for k in keys])
    for _ in range(number):  # warm: the connections, the statement cache
        await store.get(keys[0])
    hit, hits64, write = [], [], []
    cpu: dict[str, list[float]] = {"hit": [], "hits64": [], "write": []}
    for _ in range(repeats):
        start, used = time.perf_counter(), time.process_time()
        for i in range(number):
            await store.get(keys[i % 256])
        hit.append((time.perf_counter() - start) / number)
        cpu["hit"].append((time.process_time() - used) / number)
        rounds = max(1, number // 64)
        start, used = time.perf_counter(), time.process_time()
        for r in range(rounds):
            await asyncio.gather(*(store.get(keys[(r + i) % 256]) for i in range(64)))
        hits64.append((time.perf_counter() - start) / (rounds * 64))
        cpu["hits64"].append((time.process_time() - used) / (rounds * 64))
    await store.aclose()
    store = SQLiteStore(folder / "writes.db", prune_interval=None)
    await store.add(b"warm", value, None)
    serial = 0
    for _ in range(repeats):
        start, used = time.perf_counter(), time.process_time()
        for _ in range(number // 4):
            serial += 1
            await store.add(serial.to_bytes(16, "big"), value, None)
        write.append((time.perf_counter() - start) / (number // 4))
        cpu["write"].append((time.process_time() - used) / (number // 4))
    await store.aclose()
    timings = {
        "hit": statistics.median(hit) * 1e6,
        "hits64": statistics.median(hits64) * 1e6,
        "write": statistics.median(write) * 1e6,
    }
    timings.update({f"{name} cpu": statistics.median(each) * 1e6 for name, each in cpu.items()})
    return timings


def run_side(tree: Path, *, number: int, repeats: int) -> dict[str, float]:
    """One round of ``measure`` in a subprocess with ``tree`` first on the path."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    ended = subprocess.run(
        [sys.executable, __file__, "--worker", f"--number={number}", f"--repeats={repeats}"],
        cwd=tempfile.gettempdir(),
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(ended.stdout)  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=False, help="the other tree (main's)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        with tempfile.TemporaryDirectory() as folder:
            timings = asyncio.run(measure(Path(folder), number=args.number, repeats=args.repeats))
        print(json.dumps(timings))
        return
    if args.before is None:
        parser.error("--before is required")
    sides: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for _ in range(args.rounds):
        for side, tree in (("before", args.before), ("after", ROOT)):
            sides[side].append(run_side(tree, number=args.number, repeats=args.repeats))
    print("| measure | before (us) | after (us) | after / before |")
    print("|---|---|---|---|")
    for unit in ("", " cpu"):
        for name, label in MEASURES:
            before = statistics.median(r[name + unit] for r in sides["before"])
            after = statistics.median(r[name + unit] for r in sides["after"])
            label += ", CPU time (both threads)" if unit else ", wall time"
            print(f"| {label} | {before:.1f} | {after:.1f} | {after / before:.2f}x |")


if __name__ == "__main__":
    main()
