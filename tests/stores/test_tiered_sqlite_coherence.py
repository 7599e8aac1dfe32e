"""Tiers over one SQLite file drop their copies when another process clears or deletes.

Before the file's drop log, another process's L1 served a cleared entry for up
to ``l1_ttl`` (an hour here). The other process is a real one: a child
interpreter with its own ``TieredStore`` over the same file. It reports when
its copy went away; the delay is printed (``-s`` shows it), never asserted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import sys
import time
from pathlib import Path

from asyncache.stores.memory import MemoryStore
from asyncache.stores.sqlite import SQLiteStore
from asyncache.stores.tiered import TieredStore

from ..support import key, subprocess_env

ROOT = str(Path(__file__).resolve().parents[2])

# The other process: copy key 1 and key 2 into its L1, say so, then report (as a
# JSON line each) when each copy is gone, and what its tier serves for key 1 then.
CHILD = """
import asyncio, json, sys, time
from asyncache.stores.memory import MemoryStore
from asyncache.stores.sqlite import SQLiteStore
from asyncache.stores.tiered import TieredStore

async def main(path):
    tier = TieredStore(MemoryStore(), SQLiteStore(path), l1_ttl=3600.0)
    try:
        for k in (1, 2):
            assert await tier.get(k.to_bytes(16, "big")) is not None
        print(json.dumps({"ready": True}), flush=True)
        for k in (1, 2):
            # A hang guard only: the parent reads this line or the child's timeout.
            for _ in range(300_000):
                if tier.peek(k.to_bytes(16, "big")) is None:
                    break
                await asyncio.sleep(0.0001)
            entry = await tier.get(k.to_bytes(16, "big"))
            print(json.dumps({
                "key": k, "gone_at": time.time(),
                "now": None if entry is None else entry.value.decode(),
            }), flush=True)
    finally:
        await tier.aclose()

asyncio.run(main(sys.argv[1]))
"""


async def _line(child: asyncio.subprocess.Process) -> dict[str, object]:
    assert child.stdout is not None
    raw = await asyncio.wait_for(child.stdout.readline(), 60)
    assert raw, "the other process ended early"
    line: dict[str, object] = json.loads(raw)
    return line


async def test_a_delete_then_a_clear_reach_the_l1_of_another_process(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.sqlite")
    tier = TieredStore(MemoryStore(), SQLiteStore(path), l1_ttl=3600.0)
    try:
        await tier.add(key(1), b"first", None)
        await tier.add(key(2), b"other", None)
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            CHILD,
            path,
            stdout=asyncio.subprocess.PIPE,
            env=subprocess_env(ROOT),
        )
        try:
            assert await _line(child) == {"ready": True}
            await tier.delete(key(1))
            deleted_at = time.time()
            await tier.add(key(1), b"recomputed", None)
            first = await _line(child)
            # Its copy of key 1 went; key 2's stayed until the clear below.
            assert (first["key"], first["now"]) == (1, "recomputed")
            await tier.clear()
            cleared_at = time.time()
            second = await _line(child)
            assert (second["key"], second["now"]) == (2, None)
            assert await asyncio.wait_for(child.wait(), 60) == 0
        finally:
            if child.returncode is None:
                child.kill()
                await child.wait()
    finally:
        await tier.aclose()
    gone_at = first["gone_at"], second["gone_at"]
    assert isinstance(gone_at[0], float) and isinstance(gone_at[1], float)
    print(
        f"\ndelete seen by the other process after {(gone_at[0] - deleted_at) * 1000:.1f} ms,"
        f" clear after {(gone_at[1] - cleared_at) * 1000:.1f} ms"
    )


async def test_a_tier_over_a_file_without_the_drop_log_creates_it_and_hears_drops(
    tmp_path: Path,
) -> None:
    # A file written before the log existed: the first subscriber creates the table.
    path = str(tmp_path / "old.sqlite")
    async with SQLiteStore(path) as plain:
        await plain.add(key(1), b"first", None)
    with contextlib.closing(sqlite3.connect(path)) as db:
        tables = db.execute("SELECT name FROM sqlite_master WHERE name = 'asyncache_drops'")
        assert tables.fetchall() == []
    reader = TieredStore(MemoryStore(), SQLiteStore(path), l1_ttl=3600.0)
    writer = SQLiteStore(path)
    try:
        assert (await reader.get(key(1))) is not None
        assert reader.l1.get_now(key(1)) is not None
        await writer.delete(key(1))
        for _ in range(5000):
            if reader.l1.get_now(key(1)) is None:
                break
            await asyncio.sleep(0.002)
        assert reader.l1.get_now(key(1)) is None
        assert reader.stats()["invalidations"] >= 1
    finally:
        await reader.aclose()
        await writer.aclose()
