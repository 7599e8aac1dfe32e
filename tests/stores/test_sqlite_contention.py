"""SQLiteStore under contention: another connection's write lock, and many openers at once.

The lock is a real second connection to the file holding ``BEGIN IMMEDIATE``
(what a long write transaction of another process does); the openers are real
stores, each with connections and threads of its own, and real processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from asyncache import DecisionCache, cached_prediction
from asyncache.stores import Entry
from asyncache.stores.sqlite import SQLiteStore

from ..support import key
from ..support.stores import sqlite_file

HOUR = 3600.0
ROOT = Path(__file__).resolve().parents[2]
OPENERS = 8

# Waits for the go file, then opens the store at once and adds one entry.
OPENER = """
import asyncio, os, sys, time
from asyncache.stores.sqlite import SQLiteStore

path, go, index = sys.argv[1], sys.argv[2], int(sys.argv[3])
open(go + f".ready-{index}", "w").close()
while not os.path.exists(go):
    time.sleep(0.001)


async def main() -> None:
    async with SQLiteStore(path) as store:
        await store.add(index.to_bytes(16, "big"), b"opened", None)


asyncio.run(main())
"""


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "decisions.db"


@contextlib.contextmanager
def write_locked(path: Path) -> Iterator[None]:
    """Another connection holds the file's write lock (``BEGIN IMMEDIATE``) meanwhile."""
    locker = sqlite3.connect(path, isolation_level=None, timeout=10)
    try:
        locker.execute("BEGIN IMMEDIATE")
        yield
    finally:
        if locker.in_transaction:
            locker.execute("ROLLBACK")
        locker.close()


# -- a write lock held elsewhere -----------------------------------------------------------


async def test_a_read_does_not_wait_behind_a_write_that_waits_for_the_lock(path: Path) -> None:
    async with SQLiteStore(path, busy_timeout=10.0) as store:
        await store.add(key(1), b"stored", None)
        with write_locked(path):
            write = asyncio.create_task(store.add(key(2), b"new", None))
            await asyncio.sleep(0.1)  # the write is now waiting for the lock
            assert await asyncio.wait_for(store.get(key(1)), 30) == Entry(b"stored", None)
            assert await store.get_many([key(1), key(2)]) == [Entry(b"stored", None), None]
            assert await store.count() == 1
            assert not write.done(), "the reads waited for the write"
        # The write waited for the lock, and went in once it was released.
        assert (await asyncio.wait_for(write, 30)).value == b"new"


async def test_hits_stay_hits_while_another_process_holds_the_write_lock(path: Path) -> None:
    store = SQLiteStore(path)  # busy_timeout=1.0 outlasts store_timeout
    calls: Counter[int] = Counter()
    async with DecisionCache(store, fingerprint="double/1", ttl=HOUR, store_timeout=0.5) as cache:

        @cached_prediction(cache)
        async def double(x: int) -> int:
            calls[x] += 1
            return 2 * x

        stored = range(10)
        for x in stored:
            assert await double(x) == 2 * x
        loop = asyncio.get_running_loop()
        fresh = 100
        with write_locked(path):
            locked_until = loop.time() + 2.0
            while loop.time() < locked_until:
                # A new miss, whose write then waits for the lock; hits asked meanwhile.
                miss = asyncio.create_task(double(fresh))
                await asyncio.sleep(0.1)
                hits = await asyncio.gather(*(double(x) for x in stored))
                assert hits == [2 * x for x in stored]
                assert await miss == 2 * fresh
                fresh += 1
        assert fresh > 101, "fewer rounds than planned ran while the file was locked"
        assert {x: calls[x] for x in stored} == dict.fromkeys(stored, 1), "hits were recomputed"
        assert all(calls[x] == 1 for x in range(100, fresh))
        assert await double(0) == 0
        assert calls[0] == 1


# -- opening a new file at once ------------------------------------------------------------


def test_processes_opening_a_new_file_at_once(tmp_path: Path) -> None:
    for round_ in range(3):
        path = tmp_path / f"new-{round_}.db"
        go = tmp_path / f"go-{round_}"
        children = [
            subprocess.Popen(
                [sys.executable, "-c", OPENER, str(path), str(go), str(index)],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for index in range(OPENERS)
        ]
        try:
            deadline = time.monotonic() + 60
            while not all(Path(f"{go}.ready-{i}").exists() for i in range(OPENERS)):
                assert time.monotonic() < deadline, "the openers did not start"
                time.sleep(0.005)
            go.touch()
            for child in children:
                _, stderr = child.communicate(timeout=60)
                assert child.returncode == 0, stderr
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.communicate()
        with sqlite_file(path) as raw:
            assert raw.execute("SELECT count(*) FROM asyncache_entries").fetchone() == (OPENERS,)


async def test_stores_opening_a_new_file_at_once(tmp_path: Path) -> None:
    for round_ in range(20):
        path = tmp_path / f"new-{round_}.db"
        stores = [SQLiteStore(path) for _ in range(OPENERS)]
        try:
            opened = await asyncio.gather(
                *(store.__aenter__() for store in stores), return_exceptions=True
            )
            assert not [e for e in opened if isinstance(e, BaseException)], opened
            for index, store in enumerate(stores):
                assert (await store.add(key(index), b"opened", None)).value == b"opened"
            assert await stores[0].count() == OPENERS
        finally:
            await asyncio.gather(*(store.aclose() for store in stores))
