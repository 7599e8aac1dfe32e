"""One process of the cross-process lease tests (``python -m tests.engine.lease_worker``).

It opens the shared store with leases on and makes one store call (so that it
is connected before the start), signals that it is ready, waits for the go
file, then sends ``--per-key`` concurrent identical calls for each of
``--keys`` keys through ``@cached_prediction``. Each model run appends a line
to the shared runs file, and the process writes what every caller received
and its counters to ``--out`` as JSON.

Once its cache has counted a lease wait, the process creates
``<--signals>/waited-<name>``. With ``--hold SECONDS`` a model run first waits
(at most that long) until some process has: the processes then certainly
overlap, however the machine schedules them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from asyncache import DecisionCache, cached_prediction, open_store

# A hang guard for a worker whose test is gone, never a timing assertion.
BARRIER_TIMEOUT = 300.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--runs", required=True, help="file each model run appends a line to")
    parser.add_argument("--ready", required=True, help="file created once the process is ready")
    parser.add_argument("--go", required=True, help="file whose existence starts the burst")
    parser.add_argument("--out", required=True)
    parser.add_argument("--signals", required=True, help="folder for the waited-<name> files")
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--per-key", type=int, default=50)
    parser.add_argument("--compute", type=float, default=0.2, help="seconds per model run")
    parser.add_argument(
        "--hold", type=float, default=0.0, help="most seconds a model run waits for a lease wait"
    )
    parser.add_argument(
        "--lease-ttl", type=float, default=None, help="seconds; the cache's default when omitted"
    )
    parser.add_argument("--ttl", type=float, default=None, help="the cache's ttl")
    parser.add_argument(
        "--stale-while-revalidate",
        type=float,
        default=0.0,
        help="the cache's window; the process then also waits for its refreshes to land",
    )
    return parser


def _record(runs: Path, key: int) -> None:
    with runs.open("a") as log:
        log.write(f"{os.getpid()} {key}\n")


def _wait_for_file(path: Path) -> None:
    deadline = time.monotonic() + BARRIER_TIMEOUT
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{path} did not appear within {BARRIER_TIMEOUT:.0f} s")
        time.sleep(0.002)


def _someone_waited(signals: Path) -> bool:
    return any(signals.glob("waited-*"))


async def _signal_waits(cache: DecisionCache, mark: Path) -> None:
    """Create ``mark`` once ``cache`` has waited for another process's lease."""
    while cache.stats()["lease_waits"] == 0:  # noqa: ASYNC110 - a counter, with no event
        await asyncio.sleep(0.005)
    await asyncio.to_thread(mark.touch)


async def _hold(signals: Path, limit: float) -> None:
    """Wait until some process has waited for a lease, for at most ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while not await asyncio.to_thread(_someone_waited, signals):
        if time.monotonic() > deadline:
            print(f"no process waited for a lease within {limit} s", file=sys.stderr)
            return
        await asyncio.sleep(0.01)


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    lease_options = {} if args.lease_ttl is None else {"lease_ttl": args.lease_ttl}
    cache = DecisionCache(
        open_store(args.store),
        namespace="fleet",
        leases=True,
        **lease_options,
        ttl=args.ttl,
        stale_while_revalidate=args.stale_while_revalidate,
        # Generous: a store call timing out would (correctly) compute without a
        # lease, and a loaded test machine must not turn that into a failure.
        store_timeout=30.0,
    )
    runs, signals = Path(args.runs), Path(args.signals)

    @cached_prediction(cache, namespace="predict")
    async def predict(key: int) -> dict[str, Any]:
        await asyncio.to_thread(_record, runs, key)
        if args.hold > 0:
            await _hold(signals, args.hold)
        await asyncio.sleep(args.compute)
        return {"key": key, "pid": os.getpid(), "nonce": uuid.uuid4().hex}

    # Connected (and everything imported) before "ready", so that the burst starts together.
    await cache.store.get(b"\0" * 16)
    await asyncio.to_thread(Path(args.ready).touch)
    await asyncio.to_thread(_wait_for_file, Path(args.go))
    watcher = asyncio.create_task(_signal_waits(cache, signals / f"waited-{Path(args.out).stem}"))
    calls = [predict(key) for _ in range(args.per_key) for key in range(args.keys)]
    results = await asyncio.gather(*calls)
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    deadline = time.monotonic() + BARRIER_TIMEOUT
    while len(cache.engine.flights) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)  # a refresh of a stale entry still running
    decisions: dict[str, set[str]] = {}
    for result in results:
        decisions.setdefault(str(result["key"]), set()).add(result["nonce"])
    report = {
        "calls": len(results),
        "decisions": {key: sorted(nonces) for key, nonces in decisions.items()},
        "stats": {k: v for k, v in cache.stats().items() if k != "store"},
    }
    await cache.aclose()
    return report


def main() -> None:
    args = _parser().parse_args()
    report = asyncio.run(_run(args))
    Path(args.out).write_text(json.dumps(report))


if __name__ == "__main__":
    main()
