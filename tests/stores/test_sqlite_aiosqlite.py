"""SQLiteStore on aiosqlite: what it imports, and a loop that ends with a statement in flight.

The store's connections are aiosqlite's (issue 32: the package the design
names); ``import asyncache`` alone imports none of it.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from pathlib import Path

import aiosqlite
import pytest

from asyncache.stores import Entry
from asyncache.stores.sqlite import SQLiteStore

from ..support import key, until
from .test_sqlite import Locker

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "decisions.db"


IMPORTS = """
import sys
import asyncache
print("aiosqlite" in sys.modules)
import asyncache.stores.sqlite
print("aiosqlite" in sys.modules)
"""


def test_the_store_imports_aiosqlite_and_asyncache_alone_does_not() -> None:
    ended = subprocess.run(
        [sys.executable, "-c", IMPORTS], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert ended.returncode == 0, ended.stderr
    assert ended.stdout.split() == ["False", "True"]


async def test_the_connections_are_aiosqlite_connections(path: Path) -> None:
    async with SQLiteStore(path, prune_interval=None) as store:
        await store.add(key(1), b"v", None)
        assert await store.get(key(1)) == Entry(b"v", None)
        database = store._database
        assert isinstance(database.connection and database.connection._aio, aiosqlite.Connection)
        assert isinstance(database.reader and database.reader._aio, aiosqlite.Connection)
        assert database.reader is not database.connection


# aiosqlite's thread ends on the error of posting an answer to a closed loop.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
async def test_a_loop_that_ended_with_a_statement_in_flight_leaves_the_store_working(
    path: Path,
) -> None:
    store = SQLiteStore(path, busy_timeout=30.0, prune_interval=None)
    await store.add(key(1), b"before", None)
    locker = Locker(path, "immediate")
    try:
        writer = store._database.connection
        assert writer is not None

        async def leave_an_add_waiting() -> None:
            asyncio.get_running_loop().create_task(store.add(key(2), b"abandoned", None))
            await asyncio.sleep(0.2)  # the add now waits for the lock; the loop then ends

        other = threading.Thread(target=asyncio.run, args=(leave_an_add_waiting(),))
        other.start()
        await asyncio.to_thread(other.join)
        locker.release()  # the add goes in, and its answer has no loop to go to
        await until(lambda: not writer.thread.is_alive(), "the writer's thread to end")

        assert (await store.add(key(3), b"after", None)).value == b"after"
        assert await store.get(key(3)) == Entry(b"after", None)
        assert await store.get(key(1)) == Entry(b"before", None)
        assert store._database.connection is not writer
    finally:
        locker.release()
        await store.aclose()
