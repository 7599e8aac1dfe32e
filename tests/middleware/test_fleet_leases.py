"""A fleet of uvicorn replicas sharing one store: one run, or at least one answer, per input.

Each replica (``tests/middleware/fleet_app.py``) wraps its app in
``DecisionCacheMiddleware``. With leases, 200 identical concurrent requests
spread round-robin over four replicas sharing Redis all get the same answer,
and the app runs at most twice in total (once, plus at most one takeover).
Without leases every replica may run the app, but the first decision stored
wins: every client gets that one answer, on Redis and on a SQLite file.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from ..servers import send_command
from ..support import free_port, require

pytestmark = [pytest.mark.redis, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
REPLICAS = 4
REQUESTS = 200
DELAY = 0.5
# Hang guards, never timing assertions.
READY_TRIES = 1200  # x 50 ms
BURST_LIMIT = 120.0


def _start(port: int, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "tests.middleware.fleet_app:app",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "warning",
                "--no-access-log",
            ],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


async def _wait_ready(
    client: httpx.AsyncClient,
    processes: list[subprocess.Popen[bytes]],
    ports: list[int],
    logs: list[Path],
) -> None:
    """Poll every replica's ``/healthz``, a bounded number of times."""
    pending = set(range(len(ports)))
    for _ in range(READY_TRIES):
        for index in sorted(pending):
            if processes[index].poll() is not None:
                raise AssertionError(
                    f"replica on port {ports[index]} exited with {processes[index].returncode}:\n"
                    + logs[index].read_text(errors="replace")[-4000:]
                )
            try:
                response = await client.get(f"http://127.0.0.1:{ports[index]}/healthz", timeout=1)
            except httpx.TransportError:
                continue
            if response.status_code == 200:
                pending.discard(index)
        if not pending:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"replicas {sorted(pending)} never became ready")


async def _burst(
    env: dict[str, str], tmp_path: Path, *, replicas: int, requests: int
) -> list[httpx.Response]:
    """Start ``replicas`` replicas, send ``requests`` identical requests round-robin at once."""
    for module in ("uvicorn", "starlette", "redis"):
        require(importlib.util.find_spec(module) is not None, f"{module} is not installed")
    ports = [free_port() for _ in range(replicas)]
    logs = [tmp_path / f"replica-{port}.log" for port in ports]
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for port, log in zip(ports, logs, strict=True):
            processes.append(_start(port, env, log))
        # Polled on a client of its own: a replica ready long before the last one
        # (a loaded machine) closes its idle keep-alive connection after uvicorn's
        # 5 s, and a burst request sent on it as it closes fails with ReadError.
        async with httpx.AsyncClient() as poller:
            await _wait_ready(poller, processes, ports, logs)
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        async with httpx.AsyncClient(limits=limits, timeout=BURST_LIMIT) as client:
            async with asyncio.timeout(BURST_LIMIT):
                return await asyncio.gather(
                    *(
                        client.post(
                            f"http://127.0.0.1:{ports[n % replicas]}/predict",
                            json={"text": "hot"},
                            # One site behind a balancer: the host is part of the key.
                            headers={"host": "fleet.example"},
                        )
                        for n in range(requests)
                    )
                )
    finally:
        for process in processes:
            _stop(process)


def _fleet_env(redis_url: str, redis_prefix: str, runs_key: str, **more: str) -> dict[str, str]:
    return {
        **os.environ,
        "FLEET_REDIS_URL": redis_url,
        "FLEET_PREFIX": redis_prefix,
        "FLEET_RUNS_KEY": runs_key,
        "FLEET_DELAY": str(DELAY),
        **more,
    }


async def test_four_replicas_run_a_hot_miss_once(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    redis_port = urlsplit(redis_url).port
    assert redis_port is not None
    runs_key = f"asyncache-fleet-runs:{uuid.uuid4().hex}"
    env = _fleet_env(redis_url, redis_prefix, runs_key)
    try:
        responses = await _burst(env, tmp_path, replicas=REPLICAS, requests=REQUESTS)
        statuses = Counter(response.status_code for response in responses)
        outcomes = Counter(response.headers.get("x-cache") for response in responses)
        bodies = {response.content for response in responses}
        app_runs = int(send_command(redis_port, "GET", runs_key) or b"0")
        assert statuses == {200: REQUESTS}, statuses
        assert bodies == {b'{"answer":"fleet:hot"}'}, bodies
        assert app_runs <= 2, f"the app ran {app_runs} times across the fleet ({outcomes})"
    finally:
        send_command(redis_port, "DEL", runs_key)


@pytest.mark.parametrize("store", ["redis", "sqlite"])
async def test_without_leases_the_first_decision_stored_is_every_clients_answer(
    store: str, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """Three replicas each run the app for one input (a barrier makes sure), and each run
    answers differently; whichever answer was stored first is the one every client gets,
    the clients of the runs that lost included."""
    replicas = 3
    redis_port = urlsplit(redis_url).port
    assert redis_port is not None
    runs_key = f"asyncache-fleet-runs:{uuid.uuid4().hex}"
    more = {"FLEET_LEASES": "0", "FLEET_BARRIER": str(replicas), "FLEET_UNIQUE": "1"}
    if store == "sqlite":
        more["FLEET_SQLITE"] = str(tmp_path / "fleet.sqlite")
    env = _fleet_env(redis_url, redis_prefix, runs_key, **more)
    try:
        responses = await _burst(env, tmp_path, replicas=replicas, requests=20 * replicas)
        statuses = Counter(response.status_code for response in responses)
        bodies = Counter(response.content for response in responses)
        app_runs = int(send_command(redis_port, "GET", runs_key) or b"0")
        assert statuses == {200: 20 * replicas}, statuses
        assert app_runs >= replicas  # every replica ran the app: the race did happen
        assert len(bodies) == 1, bodies
    finally:
        send_command(redis_port, "DEL", runs_key)
