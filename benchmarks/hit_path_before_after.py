"""The hit path before and after a change: two checkouts measured in one run.

    .venv/bin/python benchmarks/hit_path_before_after.py --before ../main-checkout
    .venv/bin/python benchmarks/hit_path_before_after.py --before-ref cf49116   # git archive
    .venv/bin/python benchmarks/hit_path_before_after.py --before ... --quick --json out.json

Each side runs in a process of its own, importing asyncache from its checkout
(this one for "after"), in alternating rounds (before, after, after, before,
...), so that a slow spell of the machine falls on both alike. In every
process, asyncache's calls and async-lru's are timed in interleaved loops,
and a ratio is the median of the rounds' own ratios over async-lru's time in
that same process: the ratios of the two sides are comparable even when the
machine's speed moved between their processes.

Rows: a decorator hit whose result nests (``{"answers": [True, False]}``), one
whose result is a string, and one returning a list of strings (as
``hit_path.py``) on texts of 140, 2,000 and 20,000 characters with two short
questions; and what coalescing adds to a miss of an instant model
(``hit_path.py``'s "extra cost of a coalesced miss").

Times are CPU seconds of each process (``time.process_time``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SIZES = (140, 2_000, 20_000)
QUESTIONS = ["Who signed the contract?", "When does it end?"]
# The targets of the performance issue, as the worker's ratio over async-lru's time.
TARGETS = {
    ("nested", 140): 1.3,
    ("str", 140): 1.0,
    ("list", 2_000): 1.5,
    ("list", 20_000): 5.0,
}
COALESCED_TARGET_US = 30.0


def context_of(size: int) -> str:
    words = (
        "the supplier shall deliver goods to the buyer within thirty days of each order "
        "and the buyer shall pay every invoice within sixty days of delivery "
    )
    return ("[0] " + words * (size // len(words) + 2))[:size]


# -- the worker: one process, one checkout ---------------------------------------


def worker(number: int, rounds: int, misses: int) -> dict[str, Any]:
    import asyncio
    import gc

    from async_lru import alru_cache

    from asyncache import DecisionCache, MemoryStore, cached_prediction

    results = {
        "nested": {"answers": [True, False]},
        "str": "Acme Corp. signed; it ends 2027-03-31",
        "list": ["Acme Corp.", "2027-03-31"],
    }

    async def loop_seconds(call: Any, count: int) -> float:
        gc.disable()
        try:
            started = time.process_time()
            for _ in range(count):
                await call()
            return (time.process_time() - started) / count
        finally:
            gc.enable()

    async def hits() -> dict[str, Any]:
        cache = DecisionCache(MemoryStore())

        def function(kind: str) -> Any:
            result = results[kind]

            async def answer(context: str, questions: list[str]) -> Any:
                return json.loads(json.dumps(result))  # a fresh object, as a model's

            return cached_prediction(cache, namespace=f"bench.{kind}")(answer)

        functions = {kind: function(kind) for kind in results}

        @alru_cache(maxsize=1000)
        async def lru(context: str, questions: tuple[str, ...]) -> Any:
            return ["Acme Corp.", "2027-03-31"]

        out: dict[str, Any] = {}
        questions = tuple(QUESTIONS)
        for size in SIZES:
            context = context_of(size)
            count = max(200, number // max(1, size // 2_000))
            calls = {
                kind: (lambda f=f, c=context: f(c, QUESTIONS)) for kind, f in functions.items()
            }
            calls["async-lru"] = lambda c=context: lru(c, questions)
            for call in calls.values():
                for _ in range(200):  # the miss, then warm the specializations
                    await call()
            assert await calls["nested"]() == results["nested"]
            samples: dict[str, list[float]] = {name: [] for name in calls}
            for round_ in range(rounds):
                order = list(calls) if round_ % 2 == 0 else list(reversed(calls))
                for name in order:
                    samples[name].append(await loop_seconds(calls[name], count))
            for kind in results:
                ratios = [a / b for a, b in zip(samples[kind], samples["async-lru"], strict=True)]
                out[f"{kind}@{size}"] = {
                    "us": statistics.median(samples[kind]) * 1e6,
                    "lru_us": statistics.median(samples["async-lru"]) * 1e6,
                    "ratio": statistics.median(ratios),
                }
        return out

    async def miss_seconds(coalesce: bool) -> float:
        cache = DecisionCache(MemoryStore(), coalesce=coalesce)

        @cached_prediction(cache, namespace="bench.miss")
        async def answer(context: str, questions: list[str]) -> list[str]:
            return ["Acme Corp.", "2027-03-31"]

        await answer("warm-up", QUESTIONS)
        contexts = [f"[{n}] " + context_of(140) for n in range(misses)]
        gc.disable()
        try:
            started = time.process_time()
            for context in contexts:
                await answer(context, QUESTIONS)
            return (time.process_time() - started) / misses
        finally:
            gc.enable()

    async def coalescing() -> dict[str, float]:
        on: list[float] = []
        off: list[float] = []
        for round_ in range(rounds):
            for coalesce in (True, False) if round_ % 2 == 0 else (False, True):
                (on if coalesce else off).append(await miss_seconds(coalesce))
        return {
            "on_us": statistics.median(on) * 1e6,
            "off_us": statistics.median(off) * 1e6,
            "extra_us": statistics.median(a - b for a, b in zip(on, off, strict=True)) * 1e6,
        }

    async def main() -> dict[str, Any]:
        return {"hits": await hits(), "miss": await coalescing()}

    return asyncio.run(main())


# -- the parent: alternating processes ----------------------------------------------


def checkout_of_ref(ref: str, into: Path) -> Path:
    """This repository's ``asyncache`` at ``ref`` (``git archive``), unpacked under ``into``."""
    archive = into / "before.tar"
    subprocess.run(
        ["git", "archive", "--format=tar", "-o", str(archive), ref, "asyncache"],
        cwd=ROOT,
        check=True,
    )
    with tarfile.open(archive) as tar:
        tar.extractall(into / "before", filter="data")
    return into / "before"


def run_side(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            str(tree),
            "--number",
            str(args.number),
            "--rounds",
            str(args.rounds),
            "--misses",
            str(args.misses),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the worker for {tree} failed:\n{done.stderr[-3000:]}")
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def merged(runs: list[dict[str, Any]]) -> dict[str, Any]:
    hits = {
        row: {
            field: statistics.median(run["hits"][row][field] for run in runs)
            for field in runs[0]["hits"][row]
        }
        for row in runs[0]["hits"]
    }
    miss = {
        field: statistics.median(run["miss"][field] for run in runs) for field in runs[0]["miss"]
    }
    return {"hits": hits, "miss": miss}


def table(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    names = {"nested": "result nests", "str": "str result", "list": "list-of-str result"}
    rows = []
    for size in SIZES:
        for kind in ("nested", "str", "list"):
            row = f"{kind}@{size}"
            old, new = before["hits"][row], after["hits"][row]
            target = TARGETS.get((kind, size))
            rows.append(
                {
                    "measure": f"decorator hit, {names[kind]}, {size:,} chars",
                    "before_us": round(old["us"], 2),
                    "before_vs_async_lru": round(old["ratio"], 2),
                    "after_us": round(new["us"], 2),
                    "after_vs_async_lru": round(new["ratio"], 2),
                    "target": f"<= {target:g}x async-lru" if target else "-",
                    "met": ("yes" if new["ratio"] <= target else "NO") if target else "-",
                }
            )
    old, new = before["miss"], after["miss"]
    misses = {
        "miss of an instant model, coalescing on (cost over the model)": (
            "on_us",
            COALESCED_TARGET_US,
        ),
        "what coalescing adds to that miss": ("extra_us", None),
    }
    for measure, (field, most) in misses.items():
        rows.append(
            {
                "measure": measure,
                "before_us": round(old[field], 1),
                "before_vs_async_lru": "-",
                "after_us": round(new[field], 1),
                "after_vs_async_lru": "-",
                "target": "-" if most is None else f"<= {most:g} us",
                "met": "-" if most is None else ("yes" if new[field] <= most else "NO"),
            }
        )
    return rows


def before_options(parser: argparse.ArgumentParser) -> None:
    """``--before`` (a checkout) or ``--before-ref`` (a ref of this repository)."""
    side = parser.add_mutually_exclusive_group()
    side.add_argument("--before", type=Path, help="a checkout whose asyncache is 'before'")
    side.add_argument("--before-ref", help="a git ref of this repository: 'before' (git archive)")


def before_tree(args: argparse.Namespace, scratch: Path) -> tuple[Path, str]:
    """The 'before' checkout ``before_options`` named (unpacked under ``scratch``), and
    how the command line said it."""
    if args.before is not None:
        return args.before.resolve(), f"--before {args.before}"
    ref = args.before_ref or "main"
    return checkout_of_ref(ref, scratch), f"--before-ref {ref}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    before_options(parser)
    parser.add_argument("--quick", action="store_true", help="fewer rounds: a smoke test")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the rows as JSON")
    parser.add_argument("--processes", type=int, default=3, help="processes per side")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--number", type=int, default=20_000, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=7, help=argparse.SUPPRESS)
    parser.add_argument("--misses", type=int, default=3_000, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        sys.path.insert(0, str(args.worker))
        print(json.dumps(worker(args.number, args.rounds, args.misses)))
        return
    if args.quick:
        args.number, args.rounds, args.misses, args.processes = 2_000, 3, 500, 1
    with tempfile.TemporaryDirectory() as scratch:
        before, said = before_tree(args, Path(scratch))
        runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
        for index in range(args.processes):
            order = ("before", "after") if index % 2 == 0 else ("after", "before")
            for name in order:
                tree = before if name == "before" else ROOT
                runs[name].append(run_side(tree, args))
        rows = table(merged(runs["before"]), merged(runs["after"]))
    command = f"python benchmarks/hit_path_before_after.py {said}" + " --quick" * args.quick
    print(f"# {command}")
    print()
    print("| " + " | ".join(rows[0]) + " |")
    print("|" + "---|" * len(rows[0]))
    for row in rows:
        print("| " + " | ".join(str(value) for value in row.values()) + " |")
    if args.json:
        notes = [
            "Each side in processes of its own (alternating), importing asyncache from its "
            "checkout; medians over the processes of each process's medians.",
            "A ratio is over async-lru's time in the same process, the median of interleaved "
            "rounds' own ratios; async-lru gets the questions as a tuple.",
            "Times are CPU time, garbage collector off while a loop is timed.",
        ]
        args.json.write_text(
            json.dumps(
                {
                    "title": "The hit path before and after",
                    "command": command,
                    "columns": list(rows[0]),
                    "rows": rows,
                    "notes": notes,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
