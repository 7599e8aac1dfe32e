"""What a SQLite store's file holds, for ``SQLiteStore.describe`` (and ``asyncache stats``).

A store reads it through its read connection; one that has not opened its
file, through a read-only connection of its own (``describe_file``):
describing never creates, migrates or writes a file, and a file that is not an
asyncache store is reported as such.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import time
from typing import Any

from ...errors import StoreError
from .schema import MEMORY, check_version, read_only_uri
from .sql import LIVE_LEASES, SUMMARY, TABLES, Execute
from .threads import open_connection, to_thread

__all__ = ["describe_database", "describe_file", "file_bytes"]


async def describe_database(fetch: Execute, path: str) -> dict[str, Any]:
    """Entries, bytes, expiries and leases in the store ``fetch`` reads from.

    Args:
        fetch: runs one statement on a connection to the store; its rows.
        path: the store's file, for messages and ``file_bytes``.

    Raises:
        StoreError: the database holds no asyncache store.
        SchemaVersionError: a newer asyncache wrote it.
        sqlite3.Error: a statement failed.
    """
    tables = {row[0] for row in await fetch(TABLES, ())}
    if "asyncache_entries" not in tables:
        raise StoreError(f"{path} is not an asyncache SQLite store")
    version = check_version(int((await fetch("PRAGMA user_version", ()))[0][0]), path)
    now = time.time()
    entries, stored_bytes, expired, forever, first, last = (await fetch(SUMMARY, (now,)))[0]
    leases = 0
    if "asyncache_leases" in tables:
        (leases,) = (await fetch(LIVE_LEASES, (now,)))[0]
    facts: dict[str, Any] = {
        "schema_version": version,
        "entries": entries,
        "live": entries - expired,
        "expired": expired,
        "without_expiry": forever,
        "stored_bytes": stored_bytes,
        "next_expiry": first,
        "last_expiry": last,
        "leases": leases,
    }
    if path != MEMORY:
        facts["file_bytes"] = file_bytes(path)
    return facts


async def describe_file(path: str, *, busy_timeout: float) -> dict[str, Any]:
    """``describe_database`` through a read-only connection to ``path`` of its own.

    Args:
        path: the database file (it must exist).
        busy_timeout: seconds to wait for another process's lock.

    Raises:
        StoreError: the file holds no asyncache store.
        SchemaVersionError: a newer asyncache wrote it.
        sqlite3.Error: the file cannot be opened or read.
    """
    connector = functools.partial(
        sqlite3.connect, read_only_uri(path), uri=True, timeout=busy_timeout
    )
    db = await to_thread(open_connection, connector, name=f"asyncache-sqlite-describe {path}")
    try:
        return await describe_database(db.execute_fetchall, path)
    finally:
        await db.close()


def file_bytes(path: str) -> int:
    """Bytes of the database file and its write-ahead log."""
    return sum(os.path.getsize(name) for name in (path, path + "-wal") if os.path.exists(name))
