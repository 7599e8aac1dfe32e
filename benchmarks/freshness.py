"""A hot key at its expiry across a fleet: model runs and latency, with and without SWR.

Run: ``.venv/bin/python benchmarks/freshness.py`` (``--quick`` for fewer rounds,
``--json PATH`` to write the table as JSON, ``--store URL`` to use a store of
your own instead of a private redis-server on a free port).

Four processes (``--processes``) share one Redis, each with a ``DecisionCache``
with leases on (one computation per fleet) and ``@cached_prediction``. Before
each round the key's decision is stored and left to expire; then, at the same
wall-clock instant, every process sends 64 concurrent identical requests
(``--requests``) for it: 256 callers at the moment of expiry. The model takes
a fixed 100 ms (``--model-ms``; an awaited sleep standing for a remote or
offloaded forward pass, so that the processes do not compete for the CPUs).

- without ``stale_while_revalidate``: the entry is gone; one process takes the
  lease and computes, and every caller in the fleet waits for that decision;
- with ``stale_while_revalidate``: every caller gets the stale decision at
  once, and one refresh runs for the fleet (under the lease) in the background.

Hit latency is measured in the same processes, in the same round: a second
burst ``FRESH_AFTER`` seconds from the first (once the refresh landed), of the
same 64 concurrent callers per process on a key stored fresh (unexpired), the
row ``fresh hit``. A process's second burst is slower than its first (by a
few milliseconds at p50, whichever key it asks for), so the order alternates:
the expiry's burst first in even rounds, the fresh key's in odd ones. Before
its first burst each process runs every path once on keys of their own (a
hit; a stale hit and its refresh, or a miss), as a serving process has long
before an expiry: the first use of a path (a Lua script's load, a lazy import)
is paid once per process, not per expiry.

Model runs are counted per expiry (each round), once every refresh has landed.
Latency is each request's time from its burst's start to its answer, pooled
over the rounds. Target with SWR: one model run per expiry and a p99 at hit
latency (``SWR p99 / fresh-hit p99`` near 1x; far below a model run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# Importing _common also puts the checkout's root on sys.path, for asyncache.
from _common import start_redis
from fleet import START_DELAY, _announce_ready, _percentile, _print, _run_workers, _single_model_run

NAMESPACE = "freshness-bench"
FRESH_AFTER = 1.0
"""Seconds from the expiry's burst to the fresh key's: every refresh has landed."""
TARGET_RATIO = 1.25
"""SWR p99 over fresh-hit p99 that counts as "at hit latency" on a shared machine."""


def _cache(store: str, *, swr: float, ttl: float) -> Any:
    from asyncache import DecisionCache, open_store

    return DecisionCache(
        open_store(store),
        namespace=NAMESPACE,
        ttl=ttl,
        stale_while_revalidate=swr,
        leases=True,
        lease_ttl=10.0,
        store_timeout=5.0,
    )


def _predictor(cache: Any, runs: Path | None, model_seconds: float) -> Any:
    from asyncache import cached_prediction

    @cached_prediction(cache, namespace="hot")
    async def predict(key: str) -> dict[str, Any]:
        if runs is not None:
            # O_APPEND writes of one short line are atomic: the shared count of model runs.
            descriptor = os.open(runs, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                os.write(descriptor, f"{os.getpid()}\n".encode())
            finally:
                os.close(descriptor)
        await asyncio.sleep(model_seconds)
        return {"key": key, "label": "approve", "by": os.getpid()}

    return predict


# -- one process of the fleet ---------------------------------------------------


async def _worker(args: argparse.Namespace) -> dict[str, Any]:
    cache = _cache(args.store, swr=args.swr, ttl=60.0)
    predict = _predictor(cache, Path(args.runs), args.model_ms / 1000)
    # Fill the connection pool before the burst, as a serving process's would be, and run
    # each path once (a hit; a stale hit and its refresh, or a miss without SWR) on keys
    # of their own, with a model whose runs are not counted: a serving process pays its
    # first use of a path (a lazy import, a Lua script's load) once, not at every expiry.
    await asyncio.gather(*[cache.store.get(b"\x00" * 16) for _ in range(args.requests)])
    warm = _predictor(cache, None, args.model_ms / 1000)
    await warm(args.fresh_key)
    await warm(args.warm_key)
    while cache.stats()["in_flight"]:  # noqa: ASYNC110 - the warm-up's refresh lands
        await asyncio.sleep(0.005)
    before = cache.stats()
    start_at = await asyncio.to_thread(_announce_ready, args)

    async def burst(key: str, at: float) -> list[float]:
        """``args.requests`` concurrent calls for ``key`` at the instant ``at``."""
        await asyncio.sleep(max(0.0, at - time.time()))
        started = time.perf_counter()

        async def one() -> float:
            await predict(key)
            return time.perf_counter() - started

        return await asyncio.gather(*[one() for _ in range(args.requests)])

    # The same burst on a key stored fresh, in this same process: hit latency. Which burst
    # goes first alternates by round: a process's second burst is the slower one.
    hits_at, expiry_at = start_at, start_at + FRESH_AFTER
    if not args.hits_first:
        hits_at, expiry_at = expiry_at, start_at
    if args.hits_first:
        hits = await burst(args.fresh_key, hits_at)
    latencies = await burst(args.key, expiry_at)
    while cache.stats()["in_flight"]:  # noqa: ASYNC110 - the refresh, when one runs here, lands
        await asyncio.sleep(0.005)
    stats = cache.stats()
    if not args.hits_first:
        hits = await burst(args.fresh_key, hits_at)
    await cache.aclose()
    return {
        "latencies": list(latencies),
        "hit_latencies": list(hits),
        "stale_hits": stats["stale_hits"] - before["stale_hits"],
        "lease_waits": stats["lease_waits"] - before["lease_waits"],
        "errors": stats["errors"] - before["errors"],
    }


# -- the parent -------------------------------------------------------------------


def _seed(store: str, key: str, fresh_key: str, warm_key: str, *, swr: float) -> None:
    """Store ``key``'s and ``warm_key``'s decisions with a ttl that runs out before the
    burst, and ``fresh_key``'s with one that lasts the round."""

    async def seed() -> None:
        expiring = START_DELAY / 5
        for seeded, ttl in ((key, expiring), (warm_key, expiring), (fresh_key, 600.0)):
            cache = _cache(store, swr=swr, ttl=ttl)
            await _predictor(cache, None, 0.0)(seeded)
            await cache.aclose()

    asyncio.run(seed())


def _round(
    store: str,
    *,
    swr: float,
    processes: int,
    requests: int,
    model_ms: float,
    workdir: Path,
    hits_first: bool,
) -> dict[str, Any]:
    """One expiry: every process's latencies, and how many times the model ran."""
    round_dir = Path(tempfile.mkdtemp(dir=workdir))
    key, fresh_key, warm_key = uuid.uuid4().hex, uuid.uuid4().hex, uuid.uuid4().hex
    go = round_dir / "go"
    _seed(store, key, fresh_key, warm_key, swr=swr)
    commands: list[list[str]] = []
    for index in range(processes):
        command = [sys.executable, __file__, "--worker", "--store", store, "--key", key]
        command += ["--fresh-key", fresh_key, "--warm-key", warm_key]
        command += ["--hits-first"] if hits_first else []
        command += ["--requests", str(requests), "--model-ms", str(model_ms), "--swr", str(swr)]
        command += ["--runs", str(round_dir / "runs"), "--go", str(go)]
        command += ["--ready", str(round_dir / f"{index}.ready")]
        command += ["--out", str(round_dir / f"{index}.json")]
        commands.append(command)
    reports = _run_workers(commands, round_dir, go)
    runs_file = round_dir / "runs"
    return {
        "runs": len(runs_file.read_text().split()) if runs_file.exists() else 0,
        "latencies": [latency for report in reports for latency in report["latencies"]],
        "hit_latencies": [latency for report in reports for latency in report["hit_latencies"]],
        "stale_hits": sum(report["stale_hits"] for report in reports),
        "errors": sum(report["errors"] for report in reports),
    }


def _latency(bursts: Iterable[list[float]]) -> dict[str, float]:
    """p50 and p99 over every caller of ``bursts``, and the median burst's own p99."""
    bursts = list(bursts)
    pooled = [latency for burst in bursts for latency in burst]
    return {
        "p50": _percentile(pooled, 0.5),
        "p99": _percentile(pooled, 0.99),
        "typical": statistics.median(_percentile(burst, 0.99) for burst in bursts),
    }


def _columns(latency: dict[str, float], hit: dict[str, float], single: float) -> dict[str, Any]:
    """A row's latency columns, beside the fresh hit's and a model run."""
    return {
        "p50 ms": round(latency["p50"] * 1000, 1),
        "p99 ms": round(latency["p99"] * 1000, 1),
        "p99 / fresh-hit p99": f"{latency['p99'] / hit['p99']:.2f}x",
        "median expiry's p99 ms": round(latency["typical"] * 1000, 1),
        "median expiry's p99 / fresh hit's": f"{latency['typical'] / hit['typical']:.2f}x",
        "p99 / model run": round(latency["p99"] / single, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", help="a shared store URL (default: a private redis-server)")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--requests", type=int, default=64, help="per process")
    parser.add_argument("--model-ms", type=float, default=100.0)
    parser.add_argument("--rounds", type=int, default=10, help="expiries per mode")
    parser.add_argument("--quick", action="store_true", help="3 rounds per mode")
    parser.add_argument("--json", metavar="PATH", help="also write the table as JSON")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--swr", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--hits-first", action="store_true", help=argparse.SUPPRESS)
    for hidden in ("--key", "--fresh-key", "--warm-key", "--runs", "--ready", "--go", "--out"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        report = asyncio.run(_worker(args))
        Path(args.out).write_text(json.dumps(report))
        return 0

    rounds = 3 if args.quick else args.rounds
    single = _single_model_run(args.model_ms)
    modes = (0.0, 60.0)
    results: dict[float, list[dict[str, Any]]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory(prefix="asyncache-freshness-") as tmp:
        workdir = Path(tmp)
        server = None
        store = args.store
        if store is None:
            server = start_redis(workdir)
            if server is None:
                raise SystemExit("redis-server is not on PATH: install it, or pass --store URL")
            store = f"{server.url}?prefix=freshness-bench:{uuid.uuid4().hex[:8]}:"
        try:
            for index in range(rounds):
                for swr in modes:  # interleaved: a slow moment of the machine hits both
                    results[swr].append(
                        _round(
                            store,
                            swr=swr,
                            processes=args.processes,
                            requests=args.requests,
                            model_ms=args.model_ms,
                            workdir=workdir,
                            hits_first=index % 2 == 1,
                        )
                    )
        finally:
            if server is not None:
                server.stop()

    swr_rounds = results[modes[1]]
    hit = _latency(expiry["hit_latencies"] for expiry in swr_rounds)
    rows = []
    for swr in modes:
        expiries = results[swr]
        runs = [expiry["runs"] for expiry in expiries]
        latency = _latency(expiry["latencies"] for expiry in expiries)
        rows.append(
            {
                "mode": f"expiry, stale_while_revalidate={swr:g} s" if swr else "expiry, SWR off",
                "model runs per expiry (max)": max(runs),
                "model runs per expiry (mean)": round(statistics.fmean(runs), 2),
                **_columns(latency, hit, single),
                "stale hits per expiry": round(
                    statistics.fmean(expiry["stale_hits"] for expiry in expiries), 1
                ),
                "store errors": sum(expiry["errors"] for expiry in expiries),
            }
        )
    rows.append(
        {
            "mode": "fresh hit (same processes as the SWR expiry)",
            "model runs per expiry (max)": 0,
            "model runs per expiry (mean)": 0.0,
            **_columns(hit, hit, single),
            "stale hits per expiry": 0.0,
            "store errors": 0,
        }
    )
    swr_latency = _latency(expiry["latencies"] for expiry in swr_rounds)
    ratio = swr_latency["p99"] / hit["p99"]
    runs_max = rows[1]["model runs per expiry (max)"]
    met = ratio <= TARGET_RATIO and runs_max == 1
    total = args.processes * args.requests
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    document = {
        "title": f"A hot key at its expiry: {total} callers across {args.processes} processes",
        "columns": list(rows[0]),
        "rows": rows,
        "notes": [
            f"{rounds} expiries per mode (interleaved), a fresh key each; leases on; the store: "
            f"{'a private redis-server' if args.store is None else args.store.split('?')[0]}; "
            f"{os.cpu_count()} CPUs, load average {load:.1f} at the end.",
            f"A single model run (median, alone): {single * 1000:.1f} ms. Latency is from the "
            "burst's instant to each caller's answer, over every caller of every expiry.",
            f"Fresh hit: the same burst on an unexpired key, {FRESH_AFTER:g} s from each "
            "SWR expiry's (before it in every other round), in the same processes: hit "
            "latency, the SWR row's goal.",
            "Target with stale-while-revalidate: p99 at hit latency (within "
            f"{TARGET_RATIO:g}x the fresh-hit p99) and one model run per expiry for the fleet: "
            f"{'met' if met else 'not met'} ({ratio:.2f}x, at most {runs_max} run per expiry). "
            "The median expiry's p99 (each expiry's own p99, the median over expiries) is "
            "less sensitive to one burst that the machine's scheduler delayed.",
        ],
    }
    _print(document)
    if args.json:
        Path(args.json).write_text(json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
