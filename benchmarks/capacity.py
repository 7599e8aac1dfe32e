"""What one decision costs Redis and SQLite, and what one Redis primary serves: the numbers
behind docs/capacity.md.

Run: ``.venv/bin/python benchmarks/capacity.py`` (``--json PATH`` writes them).

On a private redis-server (loopback, free port), through ``DecisionCache`` over
``RedisStore`` as a replica uses it:

- per operation (a hit, a miss, a miss under a lease, a hit that renews):
  Redis commands (``INFO commandstats``) and bytes on the wire (``INFO stats``
  ``total_net_input_bytes`` / ``total_net_output_bytes``), each averaged over
  ``--ops`` operations on distinct keys; the cost of the ``INFO`` calls
  themselves is measured alone and taken off;
- bytes per stored decision: ``MEMORY USAGE`` of the entries (a 200-byte
  decision, the demo's size), and for SQLite the file's pages in use over its
  entries; decisions per GB follow;
- Redis CPU per request: 64 concurrent callers per process (the
  auto-pipelining of ``RedisStore`` gathers them) in ``--processes`` processes,
  leases on, for ``--seconds`` each: all hits, then all misses (each a new
  key: the leased path), then a mix at ``--check-hit-rate``; the server's
  ``used_cpu_sys + used_cpu_user`` over each says what a hit and a miss cost
  one fully busy core (one primary: Redis runs commands on one thread). The
  requests one primary serves at a hit rate *h* are predicted from the first
  two, *P(h) = 1 / (h x CPU per hit + (1 - h) x CPU per miss)*, and the mixed
  run checks the prediction: ``--check`` exits 1 when it is off by more than
  ``--tolerance`` (25%). (Predicting from command counts, every command costing
  what a pipelined ``GET`` does, was 2.7 times too optimistic: a leased miss's
  scripts cost far more than a ``GET``.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from _common import ROOT, machine, start_redis

from tests.servers import send_command

VALUE = {"label": "refund", "score": 0.9731, "questions": {"refund": True, "human": False}}


def _info(port: int, section: str) -> dict[str, str]:
    raw = send_command(port, "INFO", section).decode()
    return dict(line.split(":", 1) for line in raw.splitlines() if ":" in line)


def _by_command(port: int) -> dict[str, int]:
    """Calls so far of each command (``INFO commandstats``), INFO's own included."""
    return {
        name.removeprefix("cmdstat_").upper(): int(
            dict(p.split("=") for p in value.split(","))["calls"]
        )
        for name, value in _info(port, "commandstats").items()
        if name.startswith("cmdstat_")
    }


def _counters(port: int) -> tuple[int, int, int]:
    """(commands so far, bytes in, bytes out), INFO's own calls included."""
    commands = sum(_by_command(port).values())
    stats = _info(port, "stats")
    return commands, int(stats["total_net_input_bytes"]), int(stats["total_net_output_bytes"])


async def _per_operation(url: str, port: int, ops: int) -> dict[str, dict[str, Any]]:
    from asyncache import DecisionCache, cached_prediction
    from asyncache.stores.redis import RedisStore

    # What reading the counters costs (two INFO calls): taken off every measure.
    first = _counters(port)
    second = _counters(port)
    probe = [b - a for a, b in zip(first, second, strict=True)]

    results: dict[str, dict[str, Any]] = {}

    async def measure(name: str, cache: DecisionCache, keys: range, *, warm: bool) -> None:
        @cached_prediction(cache, namespace=name)
        async def decide(item: int) -> dict[str, Any]:
            return {**VALUE, "item": item}

        if warm:
            for item in keys:
                await decide(item)
        await asyncio.sleep(0.2)  # background renewals and releases settle
        named = _by_command(port)
        before = _counters(port)
        for item in keys:
            await decide(item)
        await asyncio.sleep(0.2)
        after = _counters(port)
        delta = [b - a - p for a, b, p in zip(before, after, probe, strict=True)]
        calls = {
            command: (count - named.get(command, 0)) / len(keys)
            for command, count in _by_command(port).items()
            if command != "INFO"
        }
        results[name] = {
            "commands": round(delta[0] / len(keys), 2),
            "bytes to Redis": round(delta[1] / len(keys), 1),
            "bytes from Redis": round(delta[2] / len(keys), 1),
            "by command": {c: round(n, 2) for c, n in sorted(calls.items()) if n >= 0.005},
        }

    prefix = f"capacity:{uuid.uuid4().hex[:6]}:"
    plain = DecisionCache(RedisStore.from_url(url, prefix=prefix), ttl=3600)
    leased = DecisionCache(RedisStore.from_url(url, prefix=prefix), ttl=3600, leases=True)
    renewing = DecisionCache(RedisStore.from_url(url, prefix=prefix), ttl=3600, renew_on_hit=True)
    try:
        await measure("miss", plain, range(0, ops), warm=False)
        await measure("hit", plain, range(0, ops), warm=True)
        await measure("miss under a lease", leased, range(ops, 2 * ops), warm=False)
        # A renewal happens at most once every ttl/16: 3600/16 s after the store, here
        # forced by renewing entries stored with a short ttl by another cache first.
        short = DecisionCache(RedisStore.from_url(url, prefix=prefix), ttl=1.0)

        @cached_prediction(short, namespace="hit that renews")
        async def decide(item: int) -> dict[str, Any]:
            return {**VALUE, "item": item}

        for item in range(2 * ops, 3 * ops):
            await decide(item)
        await short.aclose()
        await measure("hit that renews", renewing, range(2 * ops, 3 * ops), warm=False)
    finally:
        for cache in (plain, leased, renewing):
            await cache.aclose()
    return results


def _redis_bytes_per_entry(port: int, prefix: str) -> float:
    """The mean ``MEMORY USAGE`` of the entries under ``prefix`` (leases left out)."""
    from redis import Redis

    client = Redis(port=port)
    sizes = []
    try:
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            if b"lease" not in key:
                sizes.append(int(client.memory_usage(key, samples=0) or 0))
    finally:
        client.close()
    return sum(sizes) / max(1, len(sizes))


async def _fill(url: str, prefix: str, count: int) -> None:
    from asyncache import DecisionCache, cached_prediction
    from asyncache.stores.redis import RedisStore

    cache = DecisionCache(RedisStore.from_url(url, prefix=prefix), ttl=3600)

    @cached_prediction(cache, namespace="size")
    async def decide(item: int) -> dict[str, Any]:
        return {**VALUE, "item": item}

    for start in range(0, count, 256):  # 256 at a time: no call waits past store_timeout
        await asyncio.gather(*(decide(i) for i in range(start, min(count, start + 256))))
    await cache.aclose()


async def _sqlite_bytes_per_entry(path: Path, count: int) -> float:
    from asyncache import DecisionCache, cached_prediction
    from asyncache.stores.sqlite import SQLiteStore

    store = SQLiteStore(path)
    cache = DecisionCache(store, ttl=3600)

    @cached_prediction(cache, namespace="size")
    async def decide(item: int) -> dict[str, Any]:
        return {**VALUE, "item": item}

    for start in range(0, count, 256):  # 256 at a time: no call waits past store_timeout
        await asyncio.gather(*(decide(i) for i in range(start, min(count, start + 256))))
    described = await store.describe()
    await cache.aclose()
    # The file (and its WAL) over the entries: what a decision costs the disk.
    return float(described["file_bytes"]) / count


# -- hits per second of Redis CPU --------------------------------------------------------


async def _hammer(
    url: str, prefix: str, seconds: float, concurrency: int, hit_rate: float, entries: int
) -> tuple[int, int]:
    """Requests against Redis for ``seconds``: (hits, misses), ``hit_rate`` of them hits.

    Hits read the entries ``_fill`` stored; each miss asks for an input no one
    asked for before, under a lease, as a fleet's replica misses. Request
    ``n`` of a caller is a hit unless ``n * (1 - hit_rate)`` passes a whole
    number, which spreads the misses evenly through the run.
    """
    from asyncache import DecisionCache, cached_prediction
    from asyncache.stores.redis import RedisStore

    cache = DecisionCache(RedisStore.from_url(url, prefix=prefix), ttl=3600, leases=True)

    @cached_prediction(cache, namespace="size")
    async def decide(item: int | str) -> dict[str, Any]:
        return {**VALUE, "item": item}

    # Hits on the store, not on this process's memory: the engine's fast path holds
    # entries only for a tier; over a plain RedisStore every hit is a GET.
    hits = misses = 0
    stop = time.monotonic() + seconds
    fresh = f"{os.getpid()}-{uuid.uuid4().hex[:6]}"

    async def caller(offset: int) -> None:
        nonlocal hits, misses
        n = 0
        while time.monotonic() < stop:
            n += 1
            if math.floor(n * (1 - hit_rate)) > math.floor((n - 1) * (1 - hit_rate)):
                await decide(f"{fresh}-{offset}-{n}")
                misses += 1
            else:
                await decide((offset + n * concurrency) % entries)
                hits += 1

    await asyncio.gather(*(caller(i) for i in range(concurrency)))
    await cache.aclose()
    return hits, misses


def _hammers(
    server: Any, prefix: str, args: argparse.Namespace, hit_rate: float
) -> dict[str, float]:
    """``--processes`` hammers at ``hit_rate`` at once: their requests and Redis's CPU."""
    before = _info(server.port, "cpu")
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--hammer",
                server.url,
                "--prefix",
                prefix,
                "--seconds",
                str(args.seconds),
                "--concurrency",
                str(args.concurrency),
                "--hit-rate",
                str(hit_rate),
                "--entries",
                str(args.entries),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(args.processes)
    ]
    hits = misses = 0
    for process in processes:
        done = json.loads(process.communicate(timeout=args.seconds + 120)[0].splitlines()[-1])
        hits, misses = hits + done[0], misses + done[1]
    after = _info(server.port, "cpu")
    cpu = sum(float(after[k]) - float(before[k]) for k in ("used_cpu_sys", "used_cpu_user"))
    return {"hits": hits, "misses": misses, "Redis CPU seconds": round(cpu, 3)}


def _predicted(per_hit: float, per_miss: float, hit_rate: float) -> float:
    """Requests one fully busy primary serves at ``hit_rate``: P(h)."""
    return 1.0 / (hit_rate * per_hit + (1.0 - hit_rate) * per_miss)


# -- the page ---------------------------------------------------------------------------------


def _fleet(fleet_args: list[str], workdir: Path) -> dict[str, Any]:
    """Run the watched fleet (benchmarks/fleet_watch.py) and return its report."""
    out = workdir / "fleet.json"
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "fleet_watch.py"), *fleet_args, "--json", out],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def _rows(columns: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _page(document: dict[str, Any], fleet: dict[str, Any] | None) -> str:
    ops = document["per operation"]
    hit, lease = ops["hit"], ops["miss under a lease"]
    parts = [
        "# Capacity",
        "",
        "<!-- Generated by benchmarks/capacity.py --write docs/capacity.md: edit that script,"
        " not this page. -->",
        "",
        "How to size a fleet on Redis: what a decision costs the store, what one"
        " primary serves, and how many primaries a request rate needs. Every number"
        " below was measured by one run of",
        "",
        f"    {document['command']}",
        "",
        f"on {document['machine']} (loopback, a private redis-server), or is derived"
        " from those with the arithmetic shown. Rerun it on your hardware: the"
        " shape holds, the constants move.",
        "",
        "## Per operation: Redis commands and bytes on the wire",
        "",
        "Through `DecisionCache` over `RedisStore`, one decision of"
        f" {len(document['decision'])} bytes of JSON (`{document['decision']}`),"
        " averaged over distinct keys (`INFO commandstats` and `INFO stats`; the"
        " cost of reading them taken off).",
        "",
        _rows(
            ["operation", "commands", "of which", "bytes to Redis", "bytes from Redis"],
            [
                [
                    name,
                    row["commands"],
                    ", ".join(f"{c} {n:g}" for c, n in row["by command"].items()),
                    row["bytes to Redis"],
                    row["bytes from Redis"],
                ]
                for name, row in ops.items()
            ],
        ),
        "",
        "A hit is one `GET`. A miss reads, then adds (`SET ... NX GET`: the first"
        " decision wins). Under a lease a miss also takes the lease, re-reads, and"
        " releases it with a wake-up for the waiters (`PUBLISH`). A hit that renews"
        " adds the renewal (at most once every ttl/16 per key). `INFO commandstats`"
        " counts the commands a script (`EVALSHA`) runs as well as the script"
        " itself, so these are the commands Redis executes; what they cost it is"
        " measured below, by its CPU.",
        "",
        "## Bytes per stored decision",
        "",
        _rows(
            ["store", "bytes per decision", "decisions per GiB"],
            [
                [
                    "Redis (`MEMORY USAGE`)",
                    document["Redis bytes per decision (MEMORY USAGE)"],
                    f"{document['Redis decisions per GiB']:,}",
                ],
                [
                    "SQLite (file / entries)",
                    document["SQLite bytes per decision (file / entries)"],
                    f"{document['SQLite decisions per GiB']:,}",
                ],
            ],
        ),
        "",
        "Decisions per GiB = 1,073,741,824 / bytes per decision. Redis needs"
        " headroom beyond that (fragmentation, replication buffers): plan on"
        " `maxmemory` at most about 3/4 of the machine.",
        "",
        "## What a request costs one primary",
        "",
    ]
    hammer, check = document["hammer"], document["check"]
    per_hit_us = hammer["Redis CPU microseconds per hit"]
    per_miss_us = hammer["Redis CPU microseconds per miss"]
    hits, misses = hammer["hits"], hammer["misses"]
    parts += [
        f"{hammer['processes x concurrent callers']} concurrent callers (leases on) ask"
        f" for {hammer['seconds']} s each time: first only inputs already stored, then"
        " only inputs no one asked for before. `RedisStore` gathers the concurrent"
        " commands of a process into pipelines (auto-pipelining). The server's own CPU"
        " counter (`used_cpu_user + used_cpu_sys`) says what each costs:",
        "",
        f"    Redis CPU per hit  = {hits['Redis CPU seconds']} s / {hits['hits']:,} hits"
        f" = {per_hit_us} us ({hammer['hits per Redis CPU second']:,} hits per CPU second)",
        f"    Redis CPU per miss = {misses['Redis CPU seconds']} s / {misses['misses']:,}"
        f" misses = {per_miss_us} us ({hammer['misses per Redis CPU second']:,} misses"
        " per CPU second)",
        "",
        "Redis runs commands on one thread, so one fully busy primary serves about that"
        " many per second. Here the clients, not Redis, set the pace (this machine's two"
        " cores run them and the server): the ceiling is Redis's CPU, read off its own"
        " counter. A leased miss costs as much as"
        f" {per_miss_us / per_hit_us:.0f} hits, more than its commands say"
        f" ({lease['commands']} against a hit's {hit['commands']}): its scripts and its"
        " wake-up (`PUBLISH`) cost far more than a pipelined `GET`.",
        "",
        "## Requests per primary, replicas per primary, primaries per fleet",
        "",
        "At fleet hit rate *h* (leases on), one primary serves"
        " *P(h) = 1 / (h x CPU per hit + (1 - h) x CPU per miss)* requests per second:",
        "",
    ]
    rows = []
    for h in (0.5, 0.9, 0.99):
        cost = h * per_hit_us + (1 - h) * per_miss_us
        p_h = 1e6 / cost
        rows.append(
            [
                f"{h:.0%}",
                f"{h} x {per_hit_us} + {1 - h:.2f} x {per_miss_us} = {cost:.2f}",
                f"1,000,000 / {cost:.2f} = {p_h:,.0f}",
                f"{100_000 / p_h:.2f} -> {math.ceil(2 * 100_000 / p_h)}",
                f"{1_000_000 / p_h:.2f} -> {math.ceil(2 * 1_000_000 / p_h)}",
            ]
        )
    run = check["run"]
    parts += [
        _rows(
            [
                "hit rate h",
                "Redis CPU us per request",
                "requests/s per primary P(h)",
                "primaries for 100k req/s (at 50% CPU)",
                "for 1M req/s (at 50% CPU)",
            ],
            rows,
        ),
        "",
        "**The check.** The same callers then ask at a hit rate of"
        f" {check['hit rate']:.0%} (one new input in every"
        f" {1 / (1 - check['hit rate']):.0f}): {run['hits']:,} hits and"
        f" {run['misses']:,} misses (hit rate {check['measured hit rate']}) in"
        f" {run['Redis CPU seconds']} s of Redis CPU:",
        "",
        f"    predicted P({check['hit rate']}) ="
        f" {check['predicted requests per Redis CPU second']:,} requests per Redis CPU second",
        f"    measured = {run['hits'] + run['misses']:,} / {run['Redis CPU seconds']}"
        f" = {check['measured requests per Redis CPU second']:,}"
        f" ({check['measured / predicted']} of the prediction)",
        "",
        "`benchmarks/capacity.py --check` fails when the two are more than"
        f" {check['tolerance']:.0%} apart, and `tests/test_capacity_page.py` holds this"
        " page to its own run.",
        "",
        "Primaries for a rate R = R / P(h), doubled so that each primary runs at"
        " half its CPU (room for a failover's extra load, renewals and the"
        " replication stream), rounded up. Each primary has a replica of its own"
        " for failover: the fleet runs twice as many Redis processes.",
        "",
        "Replicas per primary = P(h) / (requests per second one replica serves)."
        " A replica's rate depends on its model and its machine; the watched fleet"
        " below measures one, and the demo's warm run reports one per process.",
        "",
    ]
    if fleet is not None:
        summary, steady = fleet["summary"], fleet["steady phase"]
        shares = {k.removesuffix(" share"): v for k, v in steady.items() if k.endswith("share")}
        predicted = (
            shares.get("hit", 0.0) * hit["commands"] + shares.get("miss", 0.0) * lease["commands"]
        )
        measured = summary["Redis commands per request (fault-free phase)"]
        per_replica = summary["requests/s"] / fleet["settings"]["replicas"]
        at_90 = 1e6 / (0.9 * per_hit_us + 0.1 * per_miss_us)
        parts += [
            "## The model at small scale: the watched fleet",
            "",
            "`benchmarks/fleet_watch.py` (run by this script) puts"
            f" {fleet['settings']['replicas']} uvicorn replicas behind HAProxy on a"
            " Redis Cluster of 3 primaries with a replica each, drives them with a Zipf"
            " load and bursts, and injects faults. Its fault-free phase checks the"
            " model: a hit costs a `GET`, a miss the leased path, and a request that"
            " shared another's run (`shared`) costs Redis nothing.",
            "",
            "    predicted commands per request = "
            f"{shares.get('hit', 0.0)} (hit share) x {hit['commands']}"
            f" + {shares.get('miss', 0.0)} (miss share) x {lease['commands']}"
            f" = {predicted:.2f}",
            f"    measured (INFO commandstats over the primaries) = {measured}",
            "",
            "On this 2-core machine the fleet, its balancer, six Redis processes and"
            f" the load share two cores: {summary['requests/s']} requests/s in all,"
            f" {per_replica:.0f} per replica; one primary at the 90% row above would"
            f" carry {at_90:,.0f} / {per_replica:.0f} = {at_90 / per_replica:,.0f}"
            " such replicas.",
            "",
            "Its whole report, faults included:",
            "",
            f"    {fleet['command']}",
            "",
            _rows(["measure", "value"], [[k, v] for k, v in summary.items()]),
            "",
        ]
        if fleet["faults"]:
            columns = list(dict.fromkeys(c for row in fleet["faults"] for c in row))
            parts += [
                _rows(columns, [[row.get(c, "-") for c in columns] for row in fleet["faults"]]),
                "",
            ]
        parts += [
            "; ".join(f"{k}: {v}" for k, v in fleet["settings"].items()),
            "",
        ]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=200)
    parser.add_argument("--entries", type=int, default=5_000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument(
        "--write", metavar="PAGE", help="write the capacity page (docs/capacity.md)"
    )
    parser.add_argument(
        "--fleet-args",
        default="--phase 15",
        help="benchmarks/fleet_watch.py's options for --write's fleet run ('' for none)",
    )
    parser.add_argument(
        "--check-hit-rate",
        type=float,
        default=0.9,
        help="the hit rate of the run that checks the prediction",
    )
    parser.add_argument("--tolerance", type=float, default=0.25)
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 when the mixed run is off the prediction by more than --tolerance",
    )
    parser.add_argument(
        "--page-from",
        metavar="JSON",
        help="write --write's page from an earlier run's --json, measuring nothing",
    )
    parser.add_argument("--hammer", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    parser.add_argument("--hit-rate", type=float, default=1.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.hammer:
        done = asyncio.run(
            _hammer(
                args.hammer,
                args.prefix,
                args.seconds,
                args.concurrency,
                args.hit_rate,
                args.entries,
            )
        )
        print(json.dumps(done))
        return 0
    if args.page_from:
        earlier: dict[str, Any] = json.loads(Path(args.page_from).read_text())
        Path(args.write).write_text(_page(earlier, earlier.get("fleet")))
        return 0

    with tempfile.TemporaryDirectory(prefix="asyncache-capacity-") as tmp:
        server = start_redis(Path(tmp))
        if server is None:
            raise SystemExit("redis-server is not on PATH")
        try:
            operations = asyncio.run(_per_operation(server.url, server.port, args.ops))
            prefix = f"size:{uuid.uuid4().hex[:6]}:"
            asyncio.run(_fill(server.url, prefix, args.entries))
            redis_entry = _redis_bytes_per_entry(server.port, prefix)
            sqlite_entry = asyncio.run(
                _sqlite_bytes_per_entry(Path(tmp) / "size.sqlite", args.entries)
            )
            all_hits = _hammers(server, prefix, args, 1.0)
            all_misses = _hammers(server, prefix, args, 0.0)
            mixed = _hammers(server, prefix, args, args.check_hit_rate)
        finally:
            server.stop()
    per_hit = all_hits["Redis CPU seconds"] / all_hits["hits"]
    per_miss = all_misses["Redis CPU seconds"] / all_misses["misses"]
    predicted = _predicted(per_hit, per_miss, args.check_hit_rate)
    served = mixed["hits"] + mixed["misses"]
    measured = served / mixed["Redis CPU seconds"]
    gib = 1024**3
    document: dict[str, Any] = {
        "command": "python benchmarks/capacity.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": machine(),
        "per operation": operations,
        "decision": json.dumps(VALUE),
        "Redis bytes per decision (MEMORY USAGE)": round(redis_entry, 1),
        "Redis decisions per GiB": round(gib / redis_entry),
        "SQLite bytes per decision (file / entries)": round(sqlite_entry, 1),
        "SQLite decisions per GiB": round(gib / sqlite_entry),
        "hammer": {
            "processes x concurrent callers": f"{args.processes} x {args.concurrency}",
            "seconds": args.seconds,
            "hits": all_hits,
            "misses": all_misses,
            "Redis CPU microseconds per hit": round(per_hit * 1e6, 3),
            "Redis CPU microseconds per miss": round(per_miss * 1e6, 3),
            "hits per Redis CPU second": round(1 / per_hit),
            "misses per Redis CPU second": round(1 / per_miss),
        },
        "check": {
            "hit rate": args.check_hit_rate,
            "run": mixed,
            "measured hit rate": round(mixed["hits"] / served, 4),
            "predicted requests per Redis CPU second": round(predicted),
            "measured requests per Redis CPU second": round(measured),
            "measured / predicted": round(measured / predicted, 3),
            "tolerance": args.tolerance,
        },
    }
    print(json.dumps(document, indent=2))
    off = abs(measured / predicted - 1.0)
    if args.write and args.fleet_args:
        with tempfile.TemporaryDirectory(prefix="asyncache-capacity-fleet-") as tmp:
            document["fleet"] = _fleet(args.fleet_args.split(), Path(tmp))
    if args.json:
        Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
    if args.write:
        Path(args.write).write_text(_page(document, document.get("fleet")))
    if args.check and off > args.tolerance:
        print(
            f"capacity: the mixed run served {measured:,.0f} requests per Redis CPU second, "
            f"{off:.0%} off the predicted {predicted:,.0f} (tolerance {args.tolerance:.0%})",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
