"""The SQLite store's file: its schema, its version, its pragmas, and opening it.

``open_database`` creates the file (private to its owner) and connects;
``prepare`` runs once per connection: it creates the schema in a
``BEGIN IMMEDIATE`` transaction, so that processes opening a new file at once
create it once, and refuses a file written by a newer asyncache. Some of what
it does fails at once, without SQLite's busy handler, while another process
opens the same file (switching a new file to WAL is one), so opening tries
again until ``busy_timeout`` has passed. ``open_reader`` opens the store's
second connection, the one reads go through, and ``file_identity`` tells which
file a path names, so that a store notices its file was deleted or replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3

import aiosqlite

from ...errors import SchemaVersionError, StoreError
from . import threads

__all__ = [
    "MEMORY",
    "SCHEMA",
    "SCHEMA_VERSION",
    "create_private",
    "file_identity",
    "is_busy",
    "open_database",
    "open_reader",
    "prepare",
    "user_version",
]

MEMORY = ":memory:"
"""The path of a private, non-persistent database."""

SCHEMA_VERSION = 1
"""The layout ``prepare`` writes; a file with a higher ``user_version`` is refused."""

SCHEMA = (
    # A rowid table: its rowid keeps insertion order for entries without expiry,
    # and large values sit in the table, not in the key's index.
    """CREATE TABLE IF NOT EXISTS asyncache_entries (
        key BLOB PRIMARY KEY NOT NULL,
        value BLOB NOT NULL,
        expires_at REAL
    )""",
    "CREATE INDEX IF NOT EXISTS asyncache_entries_expires_at ON asyncache_entries (expires_at)",
    """CREATE TABLE IF NOT EXISTS asyncache_leases (
        key BLOB PRIMARY KEY NOT NULL,
        token BLOB NOT NULL,
        expires_at REAL NOT NULL
    ) WITHOUT ROWID""",
)


def create_private(path: str) -> None:
    """Create the database file readable by its owner only, unless it exists.

    SQLite gives its -wal and -shm files the mode of the database file, so the
    whole store stays private.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def file_identity(path: str) -> tuple[int, int] | None:
    """The device and inode ``path`` names now; ``None`` when nothing is there."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def is_busy(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` says another connection holds a lock (SQLITE_BUSY or SQLITE_LOCKED)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return (code & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


async def open_database(
    path: str, *, busy_timeout: float, synchronous: str
) -> aiosqlite.Connection:
    """Create the file if it is absent, connect, and ``prepare`` the connection.

    Every statement on the connection is its own transaction (autocommit).
    Preparing is tried again, for up to ``busy_timeout`` seconds, while
    another connection's lock is in the way.

    Raises:
        StoreError: the file cannot be created, opened or prepared.
        SchemaVersionError: a newer asyncache wrote the file.
    """
    if path != MEMORY:
        try:
            await asyncio.to_thread(create_private, path)
        except OSError as exc:
            raise StoreError(f"cannot create SQLite store {path!r}: {exc}") from exc
    db = await _connect(path, busy_timeout)
    try:
        await _prepare_when_free(db, path, busy_timeout, synchronous)
    except sqlite3.Error as exc:
        await threads.close(db)
        raise StoreError(f"cannot open SQLite store {path!r}: {exc}") from exc
    except BaseException:
        await threads.close(db)
        raise
    return db


async def open_reader(path: str, *, busy_timeout: float) -> aiosqlite.Connection:
    """A second, query-only connection to a file ``open_database`` prepared.

    In WAL mode its reads never wait for a writer, so a write that waits for
    another process's lock holds up no read queued behind it.

    Raises:
        StoreError: the file cannot be opened.
    """
    db = await _connect(path, busy_timeout)
    try:
        await db.execute_fetchall("PRAGMA query_only = ON")
    except sqlite3.Error as exc:
        await threads.close(db)
        raise StoreError(f"cannot open SQLite store {path!r}: {exc}") from exc
    except BaseException:
        await threads.close(db)
        raise
    return db


async def _connect(path: str, busy_timeout: float) -> aiosqlite.Connection:
    try:
        return await threads.connect(
            path, timeout=busy_timeout, isolation_level=None, cached_statements=256
        )
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open SQLite store {path!r}: {exc}") from exc


async def _prepare_when_free(
    db: aiosqlite.Connection, path: str, busy_timeout: float, synchronous: str
) -> None:
    """``prepare``, again after a short sleep while a lock is in the way, until the timeout."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + busy_timeout
    delay = 0.002
    while True:
        try:
            await prepare(db, path=path, synchronous=synchronous)
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or loop.time() + delay > deadline:
                raise
        else:
            return
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.05)


async def prepare(db: aiosqlite.Connection, *, path: str, synchronous: str) -> None:
    """Set the connection's pragmas and create the schema if the file has none.

    Raises:
        StoreError: the file cannot use WAL (a network file system).
        SchemaVersionError: a newer asyncache wrote the file.
        sqlite3.Error: a statement failed.
    """
    version = await user_version(db, path)
    if version == 0:
        # Only takes effect before the first table exists; a no-op otherwise.
        await db.execute_fetchall("PRAGMA auto_vacuum = INCREMENTAL")
    rows = list(await db.execute_fetchall("PRAGMA journal_mode = WAL"))
    if str(rows[0][0]).lower() != "wal" and path != MEMORY:
        raise StoreError(
            f"SQLite store {path!r} cannot use WAL (journal_mode={rows[0][0]}); "
            "is it on a network file system?"
        )
    await db.execute_fetchall(f"PRAGMA synchronous = {synchronous}")
    await db.execute_fetchall("PRAGMA journal_size_limit = 67108864")
    if version == SCHEMA_VERSION:
        return
    await db.execute_fetchall("BEGIN IMMEDIATE")
    try:
        # Another process may have created the schema since we looked.
        version = await user_version(db, path)
        if version == 0:
            for statement in SCHEMA:
                await db.execute_fetchall(statement)
            await db.execute_fetchall(f"PRAGMA user_version = {SCHEMA_VERSION}")
        await db.execute_fetchall("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            await db.execute_fetchall("ROLLBACK")
        raise


async def user_version(db: aiosqlite.Connection, path: str) -> int:
    """The file's schema version (0: none yet).

    Raises:
        SchemaVersionError: it is newer than ``SCHEMA_VERSION``.
    """
    rows = list(await db.execute_fetchall("PRAGMA user_version"))
    version = int(rows[0][0])
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"SQLite store {path!r} has schema version {version}, but this asyncache "
            f"understands up to {SCHEMA_VERSION}: upgrade asyncache-ml, or point the "
            "store at another file"
        )
    return version
