"""One process of the cross-process lease tests (``python -m tests.lease_worker``).

It opens the shared store with leases on, signals that it is ready, waits for
the go file, then sends ``--per-key`` concurrent identical calls for each of
``--keys`` keys through ``@cached_prediction``. Each model run appends a line
to the shared runs file, and the process writes what every caller received
and its counters to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from asyncache import DecisionCache, cached_prediction, open_store


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--runs", required=True, help="file each model run appends a line to")
    parser.add_argument("--ready", required=True, help="file created once the process is ready")
    parser.add_argument("--go", required=True, help="file whose existence starts the burst")
    parser.add_argument("--out", required=True)
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--per-key", type=int, default=50)
    parser.add_argument("--compute", type=float, default=0.2, help="seconds per model run")
    parser.add_argument("--lease-ttl", type=float, default=10.0)
    return parser


def _record(runs: Path, key: int) -> None:
    with runs.open("a") as log:
        log.write(f"{os.getpid()} {key}\n")


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    cache = DecisionCache(
        open_store(args.store),
        namespace="fleet",
        leases=True,
        lease_ttl=args.lease_ttl,
        # Generous: a store call timing out would (correctly) compute without a
        # lease, and a loaded test machine must not turn that into a failure.
        store_timeout=30.0,
    )
    runs = Path(args.runs)

    @cached_prediction(cache, namespace="predict")
    async def predict(key: int) -> dict[str, Any]:
        await asyncio.to_thread(_record, runs, key)
        await asyncio.sleep(args.compute)
        return {"key": key, "pid": os.getpid(), "nonce": uuid.uuid4().hex}

    calls = [predict(key) for _ in range(args.per_key) for key in range(args.keys)]
    results = await asyncio.gather(*calls)
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
    # Everything is imported before "ready", so that the burst starts together.
    Path(args.ready).touch()
    go = Path(args.go)
    while not go.exists():
        time.sleep(0.002)
    report = asyncio.run(_run(args))
    Path(args.out).write_text(json.dumps(report))


if __name__ == "__main__":
    main()
