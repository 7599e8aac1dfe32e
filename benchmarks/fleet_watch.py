"""A fleet you can watch: replicas behind HAProxy on a Redis Cluster, under load and faults.

Run: ``.venv/bin/python benchmarks/fleet_watch.py`` (``--quick`` for the short
version CI runs: 2 replicas, one primary failover; ``--json PATH`` writes the
report; ``--cache-option NAME=JSON`` passes a ``DecisionCache`` setting to
every replica, e.g. a consistency mode; ``--both-modes`` runs twice, failing
open and then waiting for the store (``store_wait``), one report each; ``--rate
N`` makes each load process send N requests/s whatever the earlier ones are
doing, an open loop: without it a fault's waiting requests end up holding
every connection, and the other keys go unasked. The performance page's run:
``python benchmarks/report.py --only fleet_watch --splice``).

On loopback only, it starts:

- a Redis Cluster of 3 primaries with 1 replica each (``redis-server``
  processes on free ports, ``cluster-node-timeout`` 3 s,
  ``cluster-require-full-coverage no``);
- ``--replicas`` uvicorn processes of ``benchmarks/fleet_replica.py`` sharing
  the cluster with leases on; the model takes ``--model-ms`` and answers with a
  nonce, so that two runs for one input that both reach clients are seen;
- HAProxy in front (health checks on ``GET /cache/stats`` every 300 ms,
  a failed connection retried on another replica);
- ``--clients`` load processes (``asyncache.demo.client.LoadClient``, keep-alive
  connections), each with ``--connections`` in flight (or ``--rate`` requests/s,
  up to ``--open-connections`` in flight; beyond, counted as shed), drawing inputs from a
  Zipf law over ``--distinct`` inputs, and every ``--burst-every`` seconds a
  burst of 64 identical requests for an input nobody asked for yet.

Faults, each while the load runs, ``--phase`` seconds apart: ``replica``
(kill -9 one uvicorn), ``primary`` (kill -9 one Redis primary: its replica is
promoted; the killed node comes back as a replica), ``stall`` (SIGSTOP
another primary for 5 s, then SIGCONT).

It reports requests, failed requests, the fleet's hit rate, model runs against
distinct inputs, client and server (``Server-Timing``) p50/p99, Redis commands
per request (``INFO commandstats`` over the primaries, fault-free phase),
disagreements (an input answered differently anywhere), and per fault: requests/s
in the 3 s before and the 5 s after it, failed requests, disagreements (each
charged to the fault window in which the request that got an input's second
answer was sent, and split by whether the input is in the faulted primary's
slots), the promotion's time, how long until hits returned (the first 250 ms
window of requests sent whose hit rate is back within 10% of the 3 s before
the fault: all keys, and the faulted primary's keys alone), and the hit rate
of the keys outside the faulted primary's slots before and during the fault
(its first 5 s; burst inputs left out) beside that of the keys inside them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from _common import ROOT, machine, table

from tests.servers import RedisCluster, send_command, start_cluster
from tests.support import free_port

WINDOW = 0.25  # seconds per window of the hit-rate timeline
BASELINE = 3.0  # seconds before a fault that set the level hits must return to
BURST = 64
BURST_INPUTS = 1_000_000  # the first input a burst asks for (the steady load's are below)
STALL_SECONDS = 5.0
FAULT_WINDOW = 5.0  # seconds after a fault whose requests are "during" it


# -- the load (one process per --clients) -------------------------------------------------


def _zipf_weights(distinct: int, s: float) -> list[float]:
    return [1.0 / (rank**s) for rank in range(1, distinct + 1)]


async def _load(args: argparse.Namespace) -> dict[str, Any]:
    from asyncache.demo.client import LoadClient, server_timing_ms

    rng = random.Random(args.seed)
    weights = _zipf_weights(args.distinct, args.zipf)
    population = list(range(args.distinct))
    records: list[list[Any]] = []
    start_at = float(args.start_at)
    stop_at = start_at + args.duration
    burst_inputs = iter(range(BURST_INPUTS + args.seed * 100_000, 10_000_000))
    connections = (args.open_connections if args.rate else args.connections) + BURST
    async with LoadClient("127.0.0.1", args.port, connections=connections, timeout=30.0) as client:

        async def one(item: int) -> None:
            body = b'{"input":%d}' % item
            sent = time.time()
            try:
                reply = await client.post_json("/predict", body)
                ok = reply.status == 200
                answer = json.loads(reply.body)["answer"] if ok else None
                records.append(
                    [
                        sent - start_at,
                        time.time() - sent,
                        item,
                        reply.status,
                        reply.headers.get("x-cache", ""),
                        server_timing_ms(reply.headers),
                        answer,
                    ]
                )
            except Exception as exc:
                records.append(
                    [sent - start_at, time.time() - sent, item, 0, repr(exc), None, None]
                )

        async def steady() -> None:
            while time.time() < stop_at:
                await one(rng.choices(population, weights)[0])

        shed = 0
        flying: set[asyncio.Task[None]] = set()

        async def paced() -> None:
            # Open loop: a request every 1/rate s whatever the earlier ones are doing, so
            # that requests waiting out a fault do not stop the other keys' requests
            # (a closed loop's connections all end up waiting on the faulted keys).
            nonlocal shed
            loop = asyncio.get_running_loop()
            interval = 1.0 / args.rate
            next_at = loop.time()
            while time.time() < stop_at:
                if len(flying) < args.open_connections:
                    task = loop.create_task(one(rng.choices(population, weights)[0]))
                    flying.add(task)
                    task.add_done_callback(flying.discard)
                else:
                    shed += 1  # every connection is busy: counted, never sent
                next_at += interval
                await asyncio.sleep(max(0.0, next_at - loop.time()))
            if flying:
                await asyncio.wait(list(flying))

        async def bursts() -> None:
            while True:
                await asyncio.sleep(args.burst_every)
                if time.time() >= stop_at:
                    return
                item = next(burst_inputs)
                await asyncio.gather(*(one(item) for _ in range(BURST)))

        await asyncio.sleep(max(0.0, start_at - time.time()))
        cpu = time.process_time()
        tasks = [paced()] if args.rate else [steady() for _ in range(args.connections)]
        if args.burst_every > 0:
            tasks.append(bursts())
        await asyncio.gather(*tasks)
        cpu = time.process_time() - cpu
    return {"records": records, "cpu": cpu, "shed": shed}


# -- the fleet ----------------------------------------------------------------------------


class Fleet:
    """The processes of one run, started in ``workdir`` and stopped by ``stop``."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.cluster: RedisCluster | None = None
        self.replicas: list[subprocess.Popen[bytes]] = []
        self.replica_ports: list[int] = []
        self.haproxy: subprocess.Popen[bytes] | None = None
        self.port = free_port()
        self.prefix = f"fleet-watch:{uuid.uuid4().hex[:8]}:"
        self.runs = workdir / "runs"
        self.runs.touch()

    def start(self) -> None:
        server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
        haproxy = shutil.which("haproxy")
        if server is None or cli is None or haproxy is None:
            raise SystemExit("needs redis-server, redis-cli and haproxy on PATH (apt-get install)")
        self.cluster = start_cluster(
            server,
            cli,
            self.workdir / "redis",
            masters=3,
            replicas=1,
            node_timeout_ms=3000,
            # What a fleet sets: a primary that is down stops its slots alone, not the
            # whole cluster (by default every node refuses every key until the failover).
            extra_args=["--cluster-require-full-coverage", "no"],
        )
        nodes = ",".join(f"127.0.0.1:{node.port}" for node in self.cluster.nodes)
        store = f"redis+cluster://{nodes}?prefix={self.prefix}"
        for index in range(self.args.replicas):
            port = free_port()
            env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "benchmarks")]),
                "FLEET_STORE": store,
                "FLEET_RUNS": str(self.runs),
                "FLEET_MODEL_MS": str(self.args.model_ms),
                "FLEET_REPLICA": f"r{index}",
                "FLEET_CACHE_OPTIONS": json.dumps(self.args.cache_options),
            }
            log = (self.workdir / f"replica-{index}.log").open("wb")
            self.replicas.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "uvicorn",
                        "fleet_replica:app",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(port),
                        "--log-level",
                        "warning",
                        "--no-access-log",
                    ],
                    cwd=ROOT / "benchmarks",
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
            self.replica_ports.append(port)
        config = self.workdir / "haproxy.cfg"
        config.write_text(_haproxy_config(self.port, self.replica_ports))
        self.haproxy = subprocess.Popen(
            [haproxy, "-f", str(config), "-db"],
            stdin=subprocess.DEVNULL,
            stdout=(self.workdir / "haproxy.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        self._wait_healthy()

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            ready = 0
            for process, port in zip(self.replicas, self.replica_ports, strict=True):
                if process.poll() is not None:
                    raise RuntimeError(f"a replica exited; see {self.workdir}/replica-*.log")
                ready += _http_ok(port, "/cache/stats")
            if ready == len(self.replicas) and _http_ok(self.port, "/cache/stats"):
                # Two health checks pass before HAProxy sends a replica traffic.
                time.sleep(1.0)
                return
            time.sleep(0.1)
        logs = [*sorted(self.workdir.glob("replica-*.log")), self.workdir / "haproxy.log"]
        tails = "\n".join(f"{log.name}: {log.read_text()[-800:]}" for log in logs)
        raise RuntimeError(f"the fleet did not get healthy in 120 s:\n{tails}")

    def primaries(self) -> list[int]:
        assert self.cluster is not None
        return self.cluster.primaries()

    def commands(self, ports: list[int]) -> int:
        """Commands the given nodes served so far (``INFO commandstats``), INFO excluded."""
        total = 0
        for port in ports:
            info = send_command(port, "INFO", "commandstats", timeout=5.0).decode()
            for line in info.splitlines():
                if line.startswith("cmdstat_") and not line.startswith(
                    ("cmdstat_info", "cmdstat_cluster", "cmdstat_ping")
                ):
                    fields = dict(part.split("=") for part in line.split(":", 1)[1].split(","))
                    total += int(fields["calls"])
        return total

    def stop(self) -> None:
        for process in [*self.replicas, self.haproxy]:
            if process is not None and process.poll() is None:
                process.terminate()
        for process in [*self.replicas, self.haproxy]:
            if process is not None:
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        if self.cluster is not None:
            for node in self.cluster.nodes:
                if node.process is not None and node.process.poll() is None:
                    os.kill(node.process.pid, signal.SIGCONT)
            self.cluster.stop()


def _haproxy_config(port: int, replicas: list[int]) -> str:
    servers = "\n".join(
        f"    server r{index} 127.0.0.1:{replica}" for index, replica in enumerate(replicas)
    )
    return f"""global
    maxconn 4096
    nbthread 1

defaults
    mode http
    timeout connect 1s
    timeout client 60s
    timeout server 60s
    # A request whose replica died before answering goes to another one.
    retries 3
    option redispatch 1
    retry-on conn-failure empty-response response-timeout
    option http-buffer-request

frontend fleet
    bind 127.0.0.1:{port}
    default_backend replicas

backend replicas
    balance roundrobin
    option httpchk GET /cache/stats
    http-check expect status 200
    default-server check inter 300ms fall 2 rise 2
{servers}
"""


def _http_ok(port: int, path: str) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0) as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".encode())
            return sock.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


# -- faults ---------------------------------------------------------------------------------


def _fault(fleet: Fleet, kind: str, log: list[dict[str, Any]], start_at: float) -> None:
    """Inject one fault and record when, what, and (for a primary) which slots it held."""
    assert fleet.cluster is not None
    at = time.time() - start_at
    if kind == "replica":
        victim = fleet.replicas[-1]
        victim.kill()
        log.append({"fault": "kill -9 replica", "at": at, "slots": None})
        return
    touched = {entry["port"] for entry in log if entry.get("port")}
    primaries = [port for port in fleet.primaries() if port not in touched] or fleet.primaries()
    port = primaries[0]
    slots = _slots_of(port)
    node = fleet.cluster.node(port)
    assert node.process is not None
    if kind == "primary":
        node.kill()
        log.append({"fault": "kill -9 primary", "at": at, "port": port, "slots": slots})
        # It comes back (as a replica of the promoted one) once the promotion is done.
        deadline = time.monotonic() + 30
        while port in fleet.primaries() and time.monotonic() < deadline:
            time.sleep(0.1)
        log[-1]["promoted_after"] = round(time.time() - start_at - at, 2)
        if fleet.args.restart_killed:
            # Empty (no persistence): until the cluster makes it a replica, clients
            # that still route its old slots to it read nothing there.
            node.start()
    elif kind == "stall":
        os.kill(node.process.pid, signal.SIGSTOP)
        log.append({"fault": "SIGSTOP primary 5 s", "at": at, "port": port, "slots": slots})
        time.sleep(STALL_SECONDS)
        os.kill(node.process.pid, signal.SIGCONT)
    else:
        raise ValueError(kind)


def _slots_of(port: int) -> list[tuple[int, int]]:
    """The slot ranges the primary on ``port`` serves (from ``CLUSTER NODES``)."""
    listing = send_command(port, "CLUSTER", "NODES", timeout=5.0).decode()
    for line in listing.splitlines():
        fields = line.split()
        if "myself" in fields[2]:
            ranges = []
            for part in fields[8:]:
                if part.startswith("["):
                    continue
                low, _, high = part.partition("-")
                ranges.append((int(low), int(high or low)))
            return ranges
    return []


# -- keys and slots -----------------------------------------------------------------------


def _slots_by_input(inputs: set[int], port: int, prefix: str) -> dict[int, int]:
    """The cluster slot of each input's entry: the middleware's key, made here as the
    replicas make it (same route, host and settings), then the store's key's slot."""
    from redis.crc import key_slot
    from starlette.responses import JSONResponse

    from asyncache import DecisionCache
    from asyncache.middleware import DecisionCacheMiddleware
    from asyncache.stores import MemoryStore

    keys: list[bytes] = []

    class Recording(MemoryStore):
        async def add(self, key: bytes, value: bytes, expires_at: float | None) -> Any:
            keys.append(key)
            return await super().add(key, value, expires_at)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await JSONResponse({})(scope, receive, send)

    middleware = DecisionCacheMiddleware(
        app, cache=DecisionCache(Recording(), namespace="fleet"), routes=["/predict"]
    )

    async def key_of(item: int) -> bytes:
        body = b'{"input":%d}' % item
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            pass

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/predict",
            "raw_path": b"/predict",
            "query_string": b"",
            "root_path": "",
            "headers": [
                (b"host", f"127.0.0.1:{port}".encode()),
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
            "server": ("127.0.0.1", port),
            "client": ("127.0.0.1", 1),
        }
        await middleware(scope, receive, send)
        return keys[-1]

    async def all_keys() -> dict[int, int]:
        return {item: key_slot(prefix.encode() + await key_of(item)) for item in sorted(inputs)}

    return asyncio.run(all_keys())


# -- the report -----------------------------------------------------------------------------


def _percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered) + 0.5) - 1))]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.2f}"


def _hit_rate(records: list[list[Any]]) -> float | None:
    return sum(r[4] == "hit" for r in records) / len(records) if records else None


def _back_after(records: list[list[Any]], at: float, until: float, level: float) -> float | str:
    """Seconds after ``at`` until the first window whose hit rate is back within 10% of
    ``level`` (windows of requests sent then; the first window, the fault's own, is
    skipped), or ``">N"`` when none before ``until``."""
    t = at + WINDOW
    while t < until:
        rate = _hit_rate([r for r in records if t <= r[0] < t + WINDOW])
        if rate is not None and rate >= 0.9 * level:
            return round(t - at, 2)
        t += WINDOW
    return f">{until - at:.0f}"


def _charge(
    second_at: dict[int, float], faults: list[dict[str, Any]], slots: dict[int, int]
) -> dict[int, int]:
    """The fault each disagreement is charged to (its index in ``faults``; -1: before any).

    A disagreement on the keys of a primary that a fault killed or stopped, whose
    second answer came at or after that fault, is that fault's: a rare input asked
    again only once the next fault began (its decision lost with the primary, or
    made while the primary was down and never stored) still owes it to that primary.
    Any other is charged to the fault window in which its second answer was sent.
    """
    charged: dict[int, int] = {}
    for item, at in second_at.items():
        slot = slots.get(item)
        started = [index for index, fault in enumerate(faults) if fault["at"] <= at]
        holders = [
            index
            for index in started
            if slot is not None
            and any(low <= slot <= high for low, high in faults[index].get("slots") or [])
        ]
        charged[item] = max(holders) if holders else max(started, default=-1)
    return charged


def _analyse(
    records: list[list[Any]],
    runs: list[str],
    faults: list[dict[str, Any]],
    slots: dict[int, int],
    duration: float,
) -> dict[str, Any]:
    ok = [r for r in records if r[3] == 200]
    failed = [r for r in records if r[3] != 200]
    answers: dict[int, set[str]] = defaultdict(set)
    second_at: dict[int, float] = {}
    # When an input first got a second answer: the moment the request that got it was
    # sent (answers taken in the order they were given).
    for r in sorted(ok, key=lambda r: r[0] + r[1]):
        answers[r[2]].add(r[6])
        if len(answers[r[2]]) == 2 and r[2] not in second_at:  # the first time only
            second_at[r[2]] = r[0]
    charged = _charge(second_at, faults, slots)
    run_counts = Counter(int(line.split()[0]) for line in runs if line.strip())
    hits = [r for r in ok if r[4] == "hit"]
    summary: dict[str, Any] = {
        "requests": len(records),
        "failed requests": len(failed),
        "requests/s": round(len(records) / duration, 1),
        "fleet hit rate": round(_hit_rate(ok) or 0.0, 4),
        "distinct inputs": len({r[2] for r in records}),
        "model runs": sum(run_counts.values()),
        "inputs run more than once": sum(1 for n in run_counts.values() if n > 1),
        "disagreements (inputs)": sum(1 for a in answers.values() if len(a) > 1),
        "client p50 ms": _ms(_percentile([r[1] for r in ok], 0.5)),
        "client p99 ms": _ms(_percentile([r[1] for r in ok], 0.99)),
        "client hit p50 ms": _ms(_percentile([r[1] for r in hits], 0.5)),
        "server hit p50 ms": _ms(_percentile([r[5] / 1000 for r in hits if r[5] is not None], 0.5)),
        "server hit p99 ms": _ms(
            _percentile([r[5] / 1000 for r in hits if r[5] is not None], 0.99)
        ),
        "slowest request s": round(max((r[1] for r in records), default=0.0), 2),
    }
    per_fault = []
    bounds = [f["at"] for f in faults] + [duration]
    for index, fault in enumerate(faults):
        at, until = fault["at"], bounds[index + 1]
        before = [r for r in ok if at - BASELINE <= r[0] < at]
        during = [r for r in records if at <= r[0] < until]
        level = _hit_rate(before) or 0.0
        recovered = _back_after(ok, at, until, level)
        row = {
            "fault": fault["fault"],
            "at s": round(at, 1),
            "requests/s before / during": (
                f"{len(before) / BASELINE:.0f} / "
                f"{sum(1 for r in records if at <= r[0] < at + FAULT_WINDOW) / FAULT_WINDOW:.0f}"
            ),
            "failed": sum(1 for r in during if r[3] != 200),
            "disagreeing inputs": sum(1 for v in charged.values() if v == index),
            "hit rate before": round(level, 3),
            "hits back after s": recovered,
            "slowest request s": round(max((r[1] for r in during), default=0.0), 2),
        }
        if fault.get("promoted_after") is not None:
            row["promoted after s"] = fault["promoted_after"]
        ranges = fault.get("slots")
        if ranges:

            def inside(item: int, ranges: list[tuple[int, int]] = ranges) -> bool:
                slot = slots.get(item)
                return slot is not None and any(low <= slot <= high for low, high in ranges)

            # The 5 s after the fault: the failover or the stall. Burst inputs are left
            # out: new by design (one miss, 63 shared), they are no key's hit rate, and
            # while the waiting mode holds most connections they would be most of it.
            hot = [r for r in ok if at <= r[0] < at + FAULT_WINDOW and r[2] < BURST_INPUTS]
            before = [r for r in before if r[2] < BURST_INPUTS]
            base_out = [r for r in before if not inside(r[2])]
            out = [r for r in hot if not inside(r[2])]
            into = [r for r in hot if inside(r[2])]
            row["other keys' hit rate before / during"] = (
                f"{_hit_rate(base_out) or 0:.3f} / {_hit_rate(out) or 0:.3f}"
            )
            row["its keys' hit rate during"] = round(_hit_rate(into) or 0.0, 3)
            base_in = [r for r in before if inside(r[2])]
            row["its keys' hits back after s"] = _back_after(
                [r for r in ok if r[2] < BURST_INPUTS and inside(r[2])],
                at,
                until,
                _hit_rate(base_in) or 0.0,
            )
            row["disagreements on its keys / others"] = (
                f"{sum(1 for i, v in charged.items() if v == index and inside(i))}"
                f" / {sum(1 for i, v in charged.items() if v == index and not inside(i))}"
            )
        per_fault.append(row)
    return {"summary": summary, "faults": per_fault}


# -- the parent -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--clients", type=int, default=2, help="load processes")
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="requests/s each load process sends, open loop (requests waiting out a fault "
        "then never hold back the other keys' requests); 0: a closed loop of --connections",
    )
    parser.add_argument(
        "--open-connections",
        type=int,
        default=1024,
        help="per load process, open loop: most requests in flight (beyond: shed, counted)",
    )
    parser.add_argument("--connections", type=int, default=16, help="per load process")
    parser.add_argument("--distinct", type=int, default=5000)
    parser.add_argument("--zipf", type=float, default=1.1)
    parser.add_argument("--burst-every", type=float, default=2.0, help="seconds; 0: none")
    parser.add_argument("--model-ms", type=float, default=20.0)
    parser.add_argument("--phase", type=float, default=10.0, help="seconds between faults")
    parser.add_argument("--faults", default="replica,primary,stall")
    parser.add_argument("--quick", action="store_true", help="2 replicas, one primary failover")
    parser.add_argument(
        "--cache-option",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help="a DecisionCache setting for every replica (repeatable)",
    )
    parser.add_argument(
        "--restart-killed",
        action="store_true",
        help="start a killed primary again once its replica is promoted (it comes back empty)",
    )
    parser.add_argument(
        "--both-modes",
        action="store_true",
        help="run twice: fail_open (the default), then the waiting mode (store_wait=--wait)",
    )
    parser.add_argument(
        "--wait", type=float, default=15.0, help="store_wait of --both-modes' waiting run (s)"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    parser.add_argument(
        "--keep",
        metavar="DIR",
        default=os.environ.get("FLEET_WATCH_KEEP") or None,
        help="copy the run's logs, model runs and records to DIR (default: $FLEET_WATCH_KEEP, "
        "so that a run the report starts can be kept)",
    )
    # A load process's options (the script runs itself once per --clients).
    parser.add_argument("--load", action="store_true", help=argparse.SUPPRESS)
    for hidden in ("--port", "--seed", "--start-at", "--duration", "--out"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.load:
        args.port, args.seed, args.duration = int(args.port), int(args.seed), float(args.duration)
        result = asyncio.run(_load(args))
        Path(args.out).write_text(json.dumps(result))
        return 0
    if args.quick:
        args.replicas, args.faults, args.phase, args.distinct = 2, "primary", 8.0, 500
    options: dict[str, Any] = {}
    for option in args.cache_option:
        name, _, value = option.partition("=")
        options[name] = json.loads(value)
    command = "python benchmarks/fleet_watch.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if not args.both_modes:
        args.cache_options = options
        report = _run(args)
        report["command"] = command
        _print(report)
    else:
        modes: dict[str, Any] = {}
        keep = args.keep
        for mode, extra in (
            ("fail_open", {}),
            (f"waiting (store_wait={args.wait:g})", {"store_wait": args.wait}),
        ):
            args.cache_options = {**options, **extra}
            if keep:
                args.keep = str(Path(keep, "waiting" if extra else "fail_open"))
            modes[mode] = _run(args)
            print(f"== {mode}")
            _print(modes[mode])
            print()
        report = {
            "title": "A fleet you can watch: both consistency modes, the same faults",
            "command": command,
            "load average (1/5/15 min) at end": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            **modes,
            "notes": [
                "Load: 2 processes, each sending 300 requests/s whatever the earlier ones are "
                "doing (open loop), so that requests waiting out a fault never stop the other "
                "keys' requests. Faults 10 s apart: kill -9 a replica (HAProxy routes around "
                "it), kill -9 a Redis primary (its replica is promoted), SIGSTOP another "
                "primary for 5 s.",
                "Disagreements: inputs that clients got two different answers for. Each is "
                "charged to the latest fault, started before its second answer was first "
                "given, whose primary held the input's key (a decision given while its primary "
                "was down and never stored shows as a disagreement when the input is asked "
                "again, which for a rare input can be after the next fault began), else to "
                "the fault window in which that second answer was given. 'its keys / others': "
                "inside or outside the faulted primary's slots.",
                "Hit rates and 'requests/s during': requests sent in the 5 s after the fault "
                "(burst inputs left out of the hit rates); 'before': the 3 s before it. 'hits "
                "back after s': the first 250 ms window after the fault whose hit rate is "
                "within 10% of the level before (all keys, and the faulted primary's keys).",
            ],
        }
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


def _run(args: argparse.Namespace) -> dict[str, Any]:
    """One run of the fleet under load and faults, with ``args.cache_options``; its report."""
    load_at_start = " ".join(f"{x:.2f}" for x in os.getloadavg())
    faults = [f for f in args.faults.split(",") if f]
    duration = args.phase * (len(faults) + 1)

    with tempfile.TemporaryDirectory(prefix="asyncache-fleet-watch-") as tmp:
        workdir = Path(tmp)
        fleet = Fleet(args, workdir)
        try:
            fleet.start()
            start_at = time.time() + 1.0
            loaders = []
            for index in range(args.clients):
                loaders.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            __file__,
                            "--load",
                            "--port",
                            str(fleet.port),
                            "--seed",
                            str(index + 1),
                            "--start-at",
                            repr(start_at),
                            "--duration",
                            str(duration),
                            "--connections",
                            str(args.connections),
                            "--rate",
                            str(args.rate),
                            "--open-connections",
                            str(args.open_connections),
                            "--distinct",
                            str(args.distinct),
                            "--zipf",
                            str(args.zipf),
                            # One process sends the bursts: 64 at once, fleet-wide.
                            "--burst-every",
                            str(args.burst_every if index == 0 else 0),
                            "--out",
                            str(workdir / f"load-{index}.json"),
                        ],
                        cwd=ROOT,
                    )
                )
            primaries = fleet.primaries()
            time.sleep(max(0.0, start_at - time.time()))
            commands_before = fleet.commands(primaries)
            log: list[dict[str, Any]] = []
            for index, kind in enumerate(faults):
                time.sleep(max(0.0, start_at + args.phase * (index + 1) - time.time()))
                if index == 0:
                    steady_commands = fleet.commands(primaries) - commands_before
                _fault(fleet, kind, log, start_at)
            if not faults:
                time.sleep(max(0.0, start_at + duration - time.time()))
                steady_commands = fleet.commands(primaries) - commands_before
            for loader in loaders:
                if loader.wait(timeout=duration + 120) != 0:
                    raise RuntimeError("a load process failed")
            results = [
                json.loads((workdir / f"load-{i}.json").read_text()) for i in range(args.clients)
            ]
            runs = fleet.runs.read_text().splitlines()
        finally:
            fleet.stop()
            if args.keep:
                shutil.copytree(workdir, args.keep, dirs_exist_ok=True)
        records = [r for result in results for r in result["records"]]
        slots = _slots_by_input({r[2] for r in records}, fleet.port, fleet.prefix)
    if args.keep:
        Path(args.keep, "faults.json").write_text(json.dumps({"faults": log, "slots": slots}))
    report = _analyse(records, runs, log, slots, duration)
    steady = [r for r in records if r[0] < args.phase]
    outcomes = Counter(r[4] for r in steady)
    # What the fault-free phase's requests were: the capacity model's inputs.
    report["steady phase"] = {
        "requests": len(steady),
        **{f"{name} share": round(n / max(1, len(steady)), 4) for name, n in outcomes.items()},
    }
    report["summary"]["Redis commands per request (fault-free phase)"] = round(
        steady_commands / max(1, len(steady)), 3
    )
    report["summary"]["load CPU share"] = round(
        sum(result["cpu"] for result in results) / (duration * (os.cpu_count() or 1)), 3
    )
    report["summary"]["requests shed (every connection busy)"] = sum(
        result.get("shed", 0) for result in results
    )
    report["settings"] = {
        "replicas": args.replicas,
        "load": (
            f"{args.clients} processes x {args.rate:g} requests/s, open loop"
            if args.rate
            else f"{args.clients} processes x {args.connections} connections, closed loop"
        ),
        "distinct inputs": args.distinct,
        "zipf": args.zipf,
        "burst": f"{BURST} every {args.burst_every} s",
        "model ms": args.model_ms,
        "phase s": args.phase,
        "cache options": args.cache_options or "defaults (fail_open)",
        "machine": machine(),
        "load average (1/5/15 min) at start / end": (
            f"{load_at_start} / " + " ".join(f"{x:.2f}" for x in os.getloadavg())
        ),
    }
    return report


def _print(report: dict[str, Any]) -> None:
    if "command" in report:
        print(report["command"])
    print(table(["measure", "value"], list(report["summary"].items())))
    if report["faults"]:
        columns = sorted({c for row in report["faults"] for c in row}, key=_column_order)
        print()
        print(table(columns, [[row.get(c, "-") for c in columns] for row in report["faults"]]))
    print()
    print("; ".join(f"{k}: {v}" for k, v in report["settings"].items()))


def _column_order(column: str) -> int:
    order = [
        "fault",
        "at s",
        "requests/s before / during",
        "failed",
        "disagreeing inputs",
        "disagreements on its keys / others",
        "promoted after s",
        "hits back after s",
        "its keys' hits back after s",
        "other keys' hit rate before / during",
        "its keys' hit rate during",
    ]
    return order.index(column) if column in order else len(order)


if __name__ == "__main__":
    sys.exit(main())
