"""SQLiteStore and the processes around it: exiting without ``aclose``, and a file
deleted or replaced under a running store.

Every scenario runs real processes on real files. A child that does not exit
within ``EXIT_LIMIT`` seconds is killed and the test fails, so a regression
fails here rather than hanging the run.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from asyncache.stores import Entry
from asyncache.stores.sqlite import SQLiteStore

from ..support import key, until

ROOT = Path(__file__).resolve().parents[2]
EXIT_LIMIT = 30.0  # seconds a child may take; a hung exit takes forever

# The README's quickstart, with a model that can fail, and no ``aclose`` unless reading.
QUICKSTART = """
import asyncio, json, sys
from asyncache import DecisionCache, cached_prediction
from asyncache.stores.sqlite import SQLiteStore

path, mode = sys.argv[1], sys.argv[2]
cache = DecisionCache(SQLiteStore(path), fingerprint="intent-v3", ttl=86_400)
calls = []


@cached_prediction(cache)
async def classify(text: str) -> str:
    calls.append(text)
    if text == "boom":
        raise RuntimeError("the model failed")
    return "recomputed" if mode == "read" else text.upper()


async def main() -> None:
    answers = [await classify(text) for text in ("a", "b", "c")]
    print(json.dumps({"answers": answers, "calls": calls}), flush=True)
    if mode == "crash":
        await classify("boom")  # raises: cache.aclose() below is never reached
    if mode == "read":
        await cache.aclose()


asyncio.run(main())
"""

# A store whose next add waits for a lock the test holds, when the program ends.
STUCK = """
import asyncio, sys
from asyncache.stores.sqlite import SQLiteStore


async def main() -> None:
    store = SQLiteStore(sys.argv[1], busy_timeout=600.0)
    await store.add(bytes(16), b"committed", None)
    print("stored", flush=True)
    await asyncio.to_thread(sys.stdin.readline)  # the test now holds the write lock
    asyncio.get_running_loop().create_task(store.add(bytes(15) + b"\\x01", b"stuck", None))
    await asyncio.sleep(0.2)
    raise RuntimeError("the program failed")


asyncio.run(main())
"""

# Adds ``value`` under ``bytes(16)`` or, with a third argument, reads a key; prints the value.
OTHER = """
import asyncio, sys
from asyncache.stores.sqlite import SQLiteStore


async def main() -> None:
    async with SQLiteStore(sys.argv[1]) as store:
        if len(sys.argv) > 3:
            entry = await store.get(bytes.fromhex(sys.argv[3]))
        else:
            entry = await store.add(bytes(16), sys.argv[2].encode(), None)
        print(entry.value.decode() if entry else "-", flush=True)


asyncio.run(main())
"""


def _python(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [sys.executable, "-c", script, *args],
            cwd=ROOT,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=EXIT_LIMIT,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the process did not exit within {EXIT_LIMIT}s: {exc.stderr!r}")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _answers(ended: subprocess.CompletedProcess[str]) -> dict[str, list[str]]:
    lines = ended.stdout.splitlines()
    assert lines, ended.stderr
    answers: dict[str, list[str]] = json.loads(lines[0])
    return answers


# -- exiting without aclose --------------------------------------------------------------


@pytest.mark.parametrize("mode", ["never-closed", "crash"])
def test_a_store_nobody_closed_lets_the_process_exit(tmp_path: Path, mode: str) -> None:
    path = tmp_path / "decisions.sqlite"
    ended = _python(QUICKSTART, str(path), mode)
    if mode == "crash":
        assert ended.returncode == 1 and "the model failed" in ended.stderr, ended.stderr
    else:
        assert ended.returncode == 0, ended.stderr
    assert _answers(ended) == {"answers": ["A", "B", "C"], "calls": ["a", "b", "c"]}
    # Closed at exit: the WAL was folded into the file and removed.
    assert not Path(f"{path}-wal").exists()

    # The next process gets the decisions from the file, not from the model.
    read = _python(QUICKSTART, str(path), "read")
    assert read.returncode == 0, read.stderr
    assert _answers(read) == {"answers": ["A", "B", "C"], "calls": []}


def test_a_statement_stuck_on_a_lock_does_not_hold_up_the_exit(tmp_path: Path) -> None:
    path = tmp_path / "decisions.sqlite"
    child = subprocess.Popen(
        [sys.executable, "-c", STUCK, str(path)],
        cwd=ROOT,
        env=_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    assert child.stdout.readline().strip() == "stored"
    locker = sqlite3.connect(path, isolation_level=None, timeout=10)
    try:
        locker.execute("BEGIN IMMEDIATE")
        child.stdin.write("\n")
        child.stdin.flush()
        try:
            _, stderr = child.communicate(timeout=EXIT_LIMIT)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            pytest.fail(f"the process did not exit within {EXIT_LIMIT}s")
        assert child.returncode == 1 and "the program failed" in stderr, stderr
    finally:
        if locker.in_transaction:
            locker.execute("ROLLBACK")
        locker.close()
    # What was committed is there; the statement that never got the lock is not.
    read = _python(OTHER, str(path), "", bytes(16).hex())
    assert read.stdout.strip() == "committed", read.stderr
    read = _python(OTHER, str(path), "", (bytes(15) + b"\x01").hex())
    assert read.stdout.strip() == "-", read.stderr


# -- a file deleted or replaced under the store ------------------------------------------


def _remove(path: Path) -> None:
    """What ``rm decisions.sqlite*`` does: the file, its WAL and its shared memory."""
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        name.unlink(missing_ok=True)


def _add_elsewhere(path: Path, value: str) -> str:
    """Add ``value`` under ``bytes(16)`` in another process; return the winner."""
    ended = _python(OTHER, str(path), value)
    assert ended.returncode == 0, ended.stderr
    return ended.stdout.strip()


def _read_elsewhere(path: Path, k: bytes) -> str:
    """The value another process reads under ``k`` (``"-"`` for none)."""
    ended = _python(OTHER, str(path), "", k.hex())
    assert ended.returncode == 0, ended.stderr
    return ended.stdout.strip()


async def test_a_deleted_file_is_noticed_and_the_path_opened_again(tmp_path: Path) -> None:
    path = tmp_path / "decisions.sqlite"
    async with SQLiteStore(path) as store:
        assert (await store.add(bytes(16), b"A", None)).value == b"A"
        _remove(path)
        assert await asyncio.to_thread(_add_elsewhere, path, "B") == "B"  # a fresh file

        async def reads_b() -> bool:
            return await store.get(bytes(16)) == Entry(b"B", None)

        # Reads notice within a bounded wait, and go to the new file.
        await until(reads_b, "reads to go to the new file")
        assert (await store.add(bytes(16), b"A", None)).value == b"B"
        await store.add(key(2), b"after", None)
        assert await asyncio.to_thread(_read_elsewhere, path, key(2)) == "after"
        assert store.stats()["reopened"] == 1


async def test_a_replaced_file_is_noticed_before_the_next_write(tmp_path: Path) -> None:
    path = tmp_path / "decisions.sqlite"
    fresh = tmp_path / "fresh.sqlite"
    async with SQLiteStore(path) as store:
        assert (await store.add(bytes(16), b"A", None)).value == b"A"
        assert await asyncio.to_thread(_add_elsewhere, fresh, "B") == "B"
        # A deploy puts a fresh file in place (its WAL went with the old one).
        for name in (Path(f"{path}-wal"), Path(f"{path}-shm")):
            name.unlink()
        os.replace(fresh, path)
        # The next add goes to the file at the path: the first decision there wins,
        # so this process answers as every other process does.
        assert (await store.add(bytes(16), b"A", None)).value == b"B"
        assert await store.get(bytes(16)) == Entry(b"B", None)
        assert await asyncio.to_thread(_read_elsewhere, path, bytes(16)) == "B"


async def test_a_deleted_file_nobody_replaced_is_created_again(tmp_path: Path) -> None:
    path = tmp_path / "decisions.sqlite"
    async with SQLiteStore(path) as store:
        await store.add(key(1), b"gone", None)
        _remove(path)
        await store.add(key(2), b"kept", None)
        assert path.exists()
        assert await store.get(key(1)) is None
        assert await asyncio.to_thread(_read_elsewhere, path, key(2)) == "kept"
