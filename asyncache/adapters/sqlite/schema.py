"""The SQLite store's file: its schema, its version, its pragmas, and opening it.

``open_database`` creates the file (private to its owner) and connects;
``prepare`` runs once per connection: it creates the schema in a
``BEGIN IMMEDIATE`` transaction, so that processes opening a new file at once
create it once, and refuses a file written by a newer asyncache.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3

import aiosqlite

from ...errors import SchemaVersionError, StoreError

__all__ = [
    "MEMORY",
    "SCHEMA",
    "SCHEMA_VERSION",
    "create_private",
    "open_database",
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


async def open_database(
    path: str, *, busy_timeout: float, synchronous: str
) -> aiosqlite.Connection:
    """Create the file if it is absent, connect, and ``prepare`` the connection.

    Every statement on the connection is its own transaction (autocommit).

    Raises:
        StoreError: the file cannot be created, opened or prepared.
        SchemaVersionError: a newer asyncache wrote the file.
    """
    if path != MEMORY:
        try:
            await asyncio.to_thread(create_private, path)
        except OSError as exc:
            raise StoreError(f"cannot create SQLite store {path!r}: {exc}") from exc
    try:
        db = await aiosqlite.connect(
            path, timeout=busy_timeout, isolation_level=None, cached_statements=256
        )
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open SQLite store {path!r}: {exc}") from exc
    try:
        await prepare(db, path=path, synchronous=synchronous)
    except sqlite3.Error as exc:
        await db.close()
        raise StoreError(f"cannot open SQLite store {path!r}: {exc}") from exc
    except BaseException:
        await db.close()
        raise
    return db


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
