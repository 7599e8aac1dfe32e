"""What a SQLite store's file holds, for ``SQLiteStore.describe`` (and ``asyncache stats``).

Blocking functions: a store runs ``describe_database`` on its read
connection's thread, and ``describe_file`` on a worker thread. A store that
has not opened its file is described through a read-only connection of its
own: describing never creates, migrates or writes a file, and a file that is
not an asyncache store is reported as such.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from ...errors import StoreError
from .schema import MEMORY, user_version
from .sql import LIVE_LEASES, SUMMARY, TABLES

__all__ = ["describe_database", "describe_file", "file_bytes"]


def describe_database(db: sqlite3.Connection, path: str) -> dict[str, Any]:
    """Entries, bytes, expiries and leases in the store ``db`` is connected to.

    Raises:
        StoreError: the database holds no asyncache store.
        SchemaVersionError: a newer asyncache wrote it.
        sqlite3.Error: a statement failed.
    """
    tables = {row[0] for row in db.execute(TABLES).fetchall()}
    if "asyncache_entries" not in tables:
        raise StoreError(f"{path} is not an asyncache SQLite store")
    version = user_version(db, path)
    now = time.time()
    entries, stored_bytes, expired, forever, first, last = db.execute(SUMMARY, (now,)).fetchone()
    leases = 0
    if "asyncache_leases" in tables:
        (leases,) = db.execute(LIVE_LEASES, (now,)).fetchone()
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


def describe_file(path: str, *, busy_timeout: float) -> dict[str, Any]:
    """``describe_database`` through a read-only connection to ``path``.

    Args:
        path: the database file (it must exist).
        busy_timeout: seconds to wait for another process's lock.

    Raises:
        StoreError: the file holds no asyncache store.
        SchemaVersionError: a newer asyncache wrote it.
        sqlite3.Error: the file cannot be opened or read.
    """
    with contextlib.closing(
        sqlite3.connect(_read_only(path), uri=True, timeout=busy_timeout)
    ) as db:
        return describe_database(db, path)


def file_bytes(path: str) -> int:
    """Bytes of the database file and its write-ahead log."""
    return sum(os.path.getsize(name) for name in (path, path + "-wal") if os.path.exists(name))


def _read_only(path: str) -> str:
    """The URI that opens ``path`` read-only."""
    return Path(os.path.abspath(path)).as_uri() + "?mode=ro"
