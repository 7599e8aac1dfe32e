"""Test helpers shared by every test module."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# torch's CPU wheel on the CI machine is for Python 3.11 only: CI runs the suite on
# 3.12 and 3.13 without torch (and without the MiniLM weights, which pull it in),
# and at the declared floors (scripts/test-floors sets TEST_FLOORS=1), where torch's
# floor, 2.2, cannot be installed. There, and only there, what needs torch skips
# even under CI=true.
AT_FLOORS = os.environ.get("TEST_FLOORS") == "1"
TORCH_OPTIONAL = (sys.version_info >= (3, 12) or AT_FLOORS) and (
    importlib.util.find_spec("torch") is None
)


# Redis client timeouts for tests that are not about timeouts: a loaded CI machine
# can stall a command past the 2 s default, and a timed-out command makes a cluster
# client refresh its topology under the other commands in flight.
GENEROUS_REDIS_TIMEOUTS = "socket_connect_timeout=30&socket_timeout=30&pool_timeout=30"


def subprocess_env(root: str) -> dict[str, str]:
    """The environment for a child process run as a project of its own would be: no
    ``ASYNCACHE_*``, pytest or warning settings of ours, and ``root`` importable."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ASYNCACHE_", "PYTEST_")) and k != "PYTHONWARNINGS"
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env


def require(condition: bool, reason: str, *, torch: bool = False) -> None:
    """Skip when ``condition`` is false; under ``CI=true`` fail instead.

    A missing service or model must never hide a missing feature in CI.
    ``torch=True`` says what is missing comes with torch: on the interpreters
    CI runs without torch (``TORCH_OPTIONAL``) it skips, even in CI.
    """
    if condition:
        return
    if IN_CI and not (torch and TORCH_OPTIONAL):
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)


def require_binary(name: str) -> str:
    """Return the path of an executable on PATH, or skip/fail as ``require`` does."""
    path = shutil.which(name)
    require(path is not None, f"{name} is not on PATH")
    assert path is not None
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def until(
    condition: Callable[[], bool | Awaitable[bool]],
    what: str = "the condition",
    *,
    within: float = 10.0,
) -> None:
    """Let other tasks run until ``condition()`` holds; fail after ``within`` seconds, never hang.

    ``condition`` may be sync or async. Between looks it sleeps a little rather
    than yielding one loop turn: what a test waits for may be a thread's, a
    server's or a timer's work, and what follows that work (a reply in flight) gets
    the time to land. Polling, not an event: the conditions are other components'
    counters.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        met = condition()
        if await met if inspect.isawaitable(met) else met:
            return
        if loop.time() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.002)


def import_error_without(missing: str, module: str) -> str:
    """What ``import module`` raises in a fresh interpreter where ``missing`` cannot be imported."""
    script = (
        f"import sys; sys.modules[{missing!r}] = None\n"
        "try:\n"
        f"    import {module}\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return out.stdout


def key(n: int) -> bytes:
    """The n-th 16-byte test key, the size the engine's keys have."""
    return n.to_bytes(16, "big")
