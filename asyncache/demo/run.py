"""Run the demo: start the service under uvicorn, drive it, print what happened."""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from ..errors import ConfigurationError
from ..stores.registry import open_store
from .client import LoadClient, run
from .workload import Tally, build_workload, percentile, send_all

__all__ = ["AUTHORITY", "main", "server_command"]

DEFAULT_STORE = "sqlite:///asyncache-demo.sqlite"
# The Host every request names. The middleware keys a response by its host, and
# the server listens on a new free port each run: with "127.0.0.1:<port>" a warm
# run would find none of the responses the cold run stored.
AUTHORITY = "asyncache-demo"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="asyncache demo",
        description="A MiniLM decision service behind asyncache, driven by a realistic workload.",
    )
    parser.add_argument(
        "--store", default=DEFAULT_STORE, help=f"store URL (default {DEFAULT_STORE})"
    )
    parser.add_argument("--requests", type=int, default=600, help="requests to send (default 600)")
    parser.add_argument(
        "--concurrency", type=int, default=16, help="requests in flight (default 16)"
    )
    parser.add_argument(
        "--backend",
        choices=("onnx", "onnx-int8", "torch"),
        default="onnx",
        help="model backend serving the misses (default onnx)",
    )
    parser.add_argument("--fresh", action="store_true", help="clear the store before starting")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _stats(client: LoadClient) -> Any:
    response = await client.request("GET", "/stats")
    if response.status != 200:
        raise RuntimeError(f"GET /stats answered {response.status}")
    return orjson.loads(response.body)


async def _wait_ready(
    client: LoadClient,
    server: subprocess.Popen[bytes],
    timeout: float,  # noqa: ASYNC109
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the demo server exited with status {server.returncode}")
        try:
            return await _stats(client)
        except (OSError, RuntimeError, ValueError):
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError(f"the demo server did not answer within {timeout:.0f}s")


async def _drive(args: argparse.Namespace, port: int, server: subprocess.Popen[bytes]) -> int:
    # Room for a burst (up to 64 identical requests at once) beside the steady load.
    connections = args.concurrency + 64
    async with LoadClient(
        "127.0.0.1", port, connections=connections, timeout=120.0, authority=AUTHORITY
    ) as client:
        before = await _wait_ready(client, server, timeout=300.0)
        entries = before["store_entries"]
        if entries:
            print(f"warm start: {entries} entries already in {args.store}")
        else:
            print(f"cold start: {args.store} is empty")
        requests = build_workload(args.requests)
        started = time.perf_counter()
        tally = await _send_with_progress(client, requests, args)
        elapsed = time.perf_counter() - started
        after = await _stats(client)
        after["concurrency"] = args.concurrency
        # Under load, latency is mostly queueing behind the other requests on
        # these cores; one request at a time shows what a hit itself costs.
        alone = await send_all(client, "/decide", requests[:50], concurrency=1)
    _print_table(tally, after, elapsed, warm=bool(entries), alone=alone)
    return 0 if all(o.ok for o in tally.outcomes) else 1


async def _send_with_progress(
    client: LoadClient, requests: list[Any], args: argparse.Namespace
) -> Tally:
    url = "/decide"
    if args.no_progress or not sys.stdout.isatty():
        return await send_all(client, url, requests, concurrency=args.concurrency)
    from rich.progress import Progress

    with Progress(transient=True) as progress:
        task = progress.add_task("requests", total=len(requests))
        return await send_all(
            client,
            url,
            requests,
            concurrency=args.concurrency,
            advance=lambda n: progress.advance(task, n),
        )


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    # Microseconds where the cache spends microseconds.
    return f"{value * 1e6:.0f} µs" if value < 0.001 else f"{value * 1000:.2f} ms"


def _p50_p99(values: list[float]) -> str:
    return f"{_ms(percentile(values, 0.5))} / {_ms(percentile(values, 0.99))}"


LATENCY_COLUMNS = ("p50 / p99", "client round trip", "server (Server-Timing)")
NOTE = (
    "client round trip: from the request's write to its last byte, in the demo's client; "
    "server: the cache's own time in the server, from its Server-Timing header (the rest is "
    "the server's HTTP layer, loopback and the client)"
)


def _print_table(
    tally: Tally, stats: dict[str, Any], elapsed: float, *, warm: bool, alone: Tally
) -> None:
    outcomes = tally.outcomes
    http = stats["http"]
    decisions = stats["decisions"]
    model = stats["model"]
    by_status: dict[str, int] = {}
    for outcome in outcomes:
        by_status[outcome.status] = by_status.get(outcome.status, 0) + 1
    answered = len(outcomes)
    hits = by_status.get("hit", 0)
    concurrency = stats["concurrency"]
    # Every request needs one decision; the model computed only some of them.
    saved = answered - model["items"]
    rows = [
        ("start", "warm (entries from an earlier run)" if warm else "cold (empty store)"),
        ("requests", f"{answered} in {elapsed:.2f}s ({answered / elapsed:,.0f}/s)"),
        ("failed", str(sum(1 for o in outcomes if not o.ok))),
        ("HTTP hit rate", f"{hits / answered:.1%} ({hits} hits, {hits / elapsed:,.0f} hits/s)"),
        ("HTTP coalesced (shared)", str(by_status.get("shared", 0))),
        ("HTTP bypassed", str(by_status.get("bypass", 0))),
        ("HTTP misses", str(by_status.get("miss", 0))),
        ("decision cache hits", f"{decisions['hits']} (no-store requests)"),
        ("model forward passes", f"{model['forward_passes']} for {model['items']} decisions"),
        ("model runs saved", f"{saved} of {answered} ({saved / answered:.1%})"),
        (
            "compute seconds saved",
            f"{http['compute_seconds_saved'] + decisions['compute_seconds_saved']:.2f}s",
        ),
        ("store entries", f"{stats['store_entries']} before, {stats['store_entries_now']} after"),
    ]
    # The client's round trip beside the server's own time (Server-Timing): at
    # microseconds where the cache spends microseconds.
    latencies = [
        (
            f"hit, {concurrency} in flight",
            _p50_p99(tally.latencies("hit")),
            _p50_p99(tally.server_seconds("hit")),
        ),
        (
            f"miss, {concurrency} in flight",
            _p50_p99(tally.latencies("miss")),
            _p50_p99(tally.server_seconds("miss")),
        ),
        (
            "hit, one at a time",
            _p50_p99(alone.latencies("hit")),
            _p50_p99(alone.server_seconds("hit")),
        ),
    ]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        width = max(len(name) for name, *_ in [*rows, *latencies, LATENCY_COLUMNS])
        for name, value in rows:
            print(f"{name:<{width}}  {value}")
        print()
        widths = [max(len(row[i]) for row in [*latencies, LATENCY_COLUMNS]) for i in (1, 2)]
        for name, client, server in [LATENCY_COLUMNS, *latencies]:
            print(f"{name:<{width}}  {client:<{widths[0]}}  {server}")
        print(NOTE)
        return
    summary = Table(title="asyncache demo", show_header=False)
    summary.add_column(style="bold", no_wrap=True)
    summary.add_column()
    for name, value in rows:
        summary.add_row(name, value)
    timing = Table(title="latency", caption=NOTE)
    timing.add_column(LATENCY_COLUMNS[0], style="bold", no_wrap=True)
    timing.add_column(LATENCY_COLUMNS[1], no_wrap=True)
    timing.add_column(LATENCY_COLUMNS[2], no_wrap=True)
    for row in latencies:
        timing.add_row(*row)
    console = Console()
    console.print(summary)
    console.print(timing)


def server_command(port: int, store: str, backend: str, *, fresh: bool = False) -> list[str]:
    """The command that serves the demo on ``127.0.0.1:port``."""
    command = [sys.executable, "-m", "asyncache.demo.service", "--port", str(port)]
    command += ["--store", store, "--backend", backend]
    return [*command, "--fresh"] if fresh else command


def stop_server(server: subprocess.Popen[bytes]) -> None:
    """Stop the demo's server: politely, then for good after 15 s."""
    server.terminate()
    try:
        server.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``asyncache demo``."""
    args = _parser().parse_args(argv)
    if args.requests <= 0 or args.concurrency <= 0:
        print("asyncache demo: --requests and --concurrency must be positive", file=sys.stderr)
        return 2
    try:
        open_store(args.store)  # fail fast, with the one-line error, on a bad URL
    except (ConfigurationError, ImportError) as exc:
        print(f"asyncache demo: {exc}", file=sys.stderr)
        return 2
    port = _free_port()
    command = server_command(port, args.store, args.backend, fresh=args.fresh)
    log = Path(os.environ.get("ASYNCACHE_DEMO_LOG", os.devnull))
    with log.open("ab") as sink:
        server = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
        try:
            return run(_drive(args, port, server))
        except RuntimeError as exc:
            print(f"asyncache demo: {exc}", file=sys.stderr)
            return 1
        finally:
            stop_server(server)


if __name__ == "__main__":
    raise SystemExit(main())
