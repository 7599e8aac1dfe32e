"""Processes that add the same keys at the same moment agree on one decision per key.

Four processes, each with 100 concurrent tasks adding the same 50 keys with
values of their own, start together (a file barrier) on one shared store. Every
key must end with exactly one value, and every task in every process must have
been handed that value by ``add``.

Run as ``python -m tests.stores.test_cross_process URL PREFIX INDEX BARRIER`` this
module is the child process.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from asyncache.stores import DecisionStore

from ..support import require

PROCESSES = 4
TASKS = 100
KEYS = [n.to_bytes(16, "big") for n in range(50)]
ROOT = Path(__file__).resolve().parents[2]


def _open(url: str, prefix: str) -> DecisionStore:
    if url.startswith("sqlite:"):
        from asyncache.stores.sqlite import SQLiteStore

        # Generous: four processes queue on one write lock on a busy test machine.
        return SQLiteStore(SQLiteStore.from_url(url).path, busy_timeout=30.0)
    from asyncache.stores.redis import RedisStore

    return RedisStore.from_url(url, prefix=prefix)


def _meet(barrier: Path, index: int) -> None:
    """Say this child is ready, then wait for the parent's go."""
    (barrier / f"ready-{index}").touch()
    go = barrier / "go"
    while not go.exists():
        time.sleep(0.002)


async def _child(url: str, prefix: str, index: int, barrier: Path) -> list[dict[str, str]]:
    store = _open(url, prefix)
    try:
        await store.count()  # connected before the start, so that all start together
        await asyncio.to_thread(_meet, barrier, index)

        async def task(t: int) -> dict[str, str]:
            # Each process starts in its own part of the key ring (a few keys per
            # batch, so the processes win different keys), with some tasks in a
            # random order (so they also race on the same keys at the same time).
            if t % 4 == 0:
                order = random.Random(f"{index}/{t}").sample(KEYS, len(KEYS))
            else:
                start = index * len(KEYS) // PROCESSES + t % 5
                order = KEYS[start:] + KEYS[:start]
            seen = {}
            for k in order:
                winner = await store.add(k, f"p{index}-t{t}".encode(), None)
                seen[k.hex()] = winner.value.decode()
            return seen

        return await asyncio.gather(*(task(t) for t in range(TASKS)))
    finally:
        await store.aclose()


def _run_processes(url: str, prefix: str, barrier: Path) -> list[list[dict[str, str]]]:
    barrier.mkdir()
    command = [sys.executable, "-m", "tests.stores.test_cross_process", url, prefix]
    processes = [
        subprocess.Popen(
            [*command, str(index), str(barrier)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for index in range(PROCESSES)
    ]
    try:
        deadline = time.monotonic() + 120
        while len(list(barrier.glob("ready-*"))) < PROCESSES:
            for process in processes:
                if process.poll() is not None:
                    _, err = process.communicate()
                    pytest.fail(f"a child exited before the start: {err.decode()}")
            if time.monotonic() > deadline:
                pytest.fail("the children did not get ready within 120 s")
            time.sleep(0.01)
        (barrier / "go").touch()
        results = []
        for process in processes:
            out, err = process.communicate(timeout=300)
            assert process.returncode == 0, err.decode()
            results.append(json.loads(out))
        return results
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()


async def _stored(url: str, prefix: str) -> dict[str, str | None]:
    store = _open(url, prefix)
    try:
        entries = await store.get_many(KEYS)
        if not url.startswith("sqlite:"):
            await store.clear()
        return {
            k.hex(): e.value.decode() if e else None for k, e in zip(KEYS, entries, strict=True)
        }
    finally:
        await store.aclose()


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_processes_agree(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path}/shared.db"
    else:
        try:
            import asyncache.stores.redis  # noqa: F401
        except ImportError as exc:
            require(False, f"RedisStore is not available: {exc}")
        url = request.getfixturevalue("redis_url")
    prefix = f"asyncache-cross:{uuid.uuid4().hex}:"

    results = _run_processes(url, prefix, tmp_path / "barrier")
    stored = asyncio.run(_stored(url, prefix))

    assert len(results) == PROCESSES
    pattern = re.compile(rf"p[0-{PROCESSES - 1}]-t\d+")
    for k in KEYS:
        value = stored[k.hex()]
        assert value is not None and pattern.fullmatch(value)
        answers = {seen[k.hex()] for tasks in results for seen in tasks}
        assert answers == {value}, f"key {k.hex()}: tasks were handed {sorted(answers)}"
    assert all(len(tasks) == TASKS for tasks in results)


if __name__ == "__main__":
    _url, _prefix, _index, _barrier = sys.argv[1:5]
    _results = asyncio.run(_child(_url, _prefix, int(_index), Path(_barrier)))
    json.dump(_results, sys.stdout)
