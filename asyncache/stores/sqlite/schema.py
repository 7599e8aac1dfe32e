"""The SQLite store's file: its schema, its version, its pragmas, and opening it.

``open_database`` creates the file (private to its owner) and connects (on a
worker thread: opening blocks; the connection is an aiosqlite one, and it
connects and prepares on its own thread);
``prepare`` runs once per connection: it creates the schema in a
``BEGIN IMMEDIATE`` transaction, so that processes opening a new file at once
create it once, and refuses a file written by a newer asyncache. Some of what
it does fails at once, without SQLite's busy handler, while another process
opens the same file (switching a new file to WAL is one), so opening tries
again until ``busy_timeout`` has passed. ``open_reader`` opens the store's
second connection, the one reads go through, and ``file_identity`` tells which
file a path names, so that a store notices its file was deleted or replaced.
``open_recording`` opens a recording for replay: read-only, creating nothing.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from ...errors import SchemaVersionError, StoreError
from .threads import Connection, open_connection

__all__ = [
    "MEMORY",
    "SCHEMA",
    "SCHEMA_VERSION",
    "check_version",
    "create_private",
    "file_identity",
    "is_busy",
    "open_database",
    "open_reader",
    "open_recording",
    "prepare",
    "read_only_uri",
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


def open_database(path: str, *, busy_timeout: float, synchronous: str) -> Connection:
    """Create the file if it is absent, connect, and ``prepare`` the connection.

    Blocking: run it on a worker thread. Every statement on the connection is
    its own transaction (autocommit). Preparing is tried again, for up to
    ``busy_timeout`` seconds, while another connection's lock is in the way.

    Raises:
        StoreError: the file cannot be created, opened or prepared.
        SchemaVersionError: a newer asyncache wrote the file.
    """
    if path != MEMORY:
        try:
            create_private(path)
        except OSError as exc:
            raise StoreError(f"cannot create SQLite store {path!r}: {exc}") from exc
    return open_connection(
        functools.partial(_connect_prepared, path, busy_timeout, synchronous),
        name=f"asyncache-sqlite-writer {path}",
    )


def open_reader(path: str, *, busy_timeout: float) -> Connection:
    """A second, query-only connection to a file ``open_database`` prepared.

    Blocking: run it on a worker thread. In WAL mode its reads never wait for
    a writer, so a write that waits for another process's lock holds up no
    read queued behind it.

    Raises:
        StoreError: the file cannot be opened.
    """
    return open_connection(
        functools.partial(_connect_query_only, path, busy_timeout),
        name=f"asyncache-sqlite-reader {path}",
    )


def open_recording(path: str, *, busy_timeout: float) -> Connection:
    """A read-only connection to a recording, which writes nothing and creates no file.

    Blocking: run it on a worker thread. Replay reads a recording, maybe from a
    read-only checkout. A recording closed cleanly has no ``-wal`` file, and
    is then opened ``immutable``: SQLite takes no lock and needs no ``-shm``
    file, so neither the file nor its folder need be writable, and nothing
    appears beside it. A recording whose ``-wal`` still holds pages (its
    recorder did not close it) is opened ``mode=ro``, so that those pages are
    read too.

    Raises:
        StoreError: there is no file, or it cannot be opened.
        SchemaVersionError: a newer asyncache wrote the file.
    """
    if not os.path.exists(path):
        raise StoreError(
            f"no SQLite store at {path!r}: replay reads a recording "
            f"and creates no file; record it first with mode='record'"
        )
    return open_connection(
        functools.partial(_connect_recording, path, busy_timeout),
        name=f"asyncache-sqlite-recording {path}",
    )


def read_only_uri(path: str, *, immutable: bool = False) -> str:
    """The URI that opens ``path`` read-only (``immutable``: without locks or ``-shm``)."""
    uri = Path(os.path.abspath(path)).as_uri() + "?mode=ro"
    return uri + "&immutable=1" if immutable else uri


def _connect_prepared(
    path: str, busy_timeout: float, synchronous: str
) -> sqlite3.Connection:  # on the connection's thread, as the others below
    return _set_up(
        _connect(path, busy_timeout),
        path,
        lambda db: _prepare_when_free(db, path, busy_timeout, synchronous),
    )


def _connect_query_only(path: str, busy_timeout: float) -> sqlite3.Connection:
    return _set_up(_connect(path, busy_timeout), path, _query_only)


def _connect_recording(path: str, busy_timeout: float) -> sqlite3.Connection:
    try:
        wal_size = os.path.getsize(path + "-wal")
    except OSError:
        wal_size = 0
    db = _connect(read_only_uri(path, immutable=wal_size == 0), busy_timeout, uri=True)
    return _set_up(db, path, lambda db: user_version(_query_only(db), path))


def _query_only(db: sqlite3.Connection) -> sqlite3.Connection:
    db.execute("PRAGMA query_only = ON")
    return db


def _set_up(
    db: sqlite3.Connection, path: str, setup: Callable[[sqlite3.Connection], object]
) -> sqlite3.Connection:
    """``db`` after ``setup(db)``; closed when that fails.

    Raises:
        StoreError: a statement of ``setup`` failed.
        Exception: whatever else ``setup`` raised (``SchemaVersionError``...).
    """
    try:
        setup(db)
    except sqlite3.Error as exc:
        db.close()
        raise StoreError(f"cannot open SQLite store {path!r}: {exc}") from exc
    except BaseException:
        db.close()
        raise
    return db


def _connect(path: str, busy_timeout: float, *, uri: bool = False) -> sqlite3.Connection:
    try:
        return sqlite3.connect(
            path, timeout=busy_timeout, isolation_level=None, cached_statements=256, uri=uri
        )
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open SQLite store {path!r}: {exc}") from exc


def _prepare_when_free(
    db: sqlite3.Connection, path: str, busy_timeout: float, synchronous: str
) -> None:
    """``prepare``, again after a short sleep while a lock is in the way, until the timeout."""
    deadline = time.monotonic() + busy_timeout
    delay = 0.002
    while True:
        try:
            prepare(db, path=path, synchronous=synchronous)
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() + delay > deadline:
                raise
        else:
            return
        # A blocking sleep is right here: opening runs on an anyio worker thread
        # (connection.Database._open), never on an event loop.
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def prepare(db: sqlite3.Connection, *, path: str, synchronous: str) -> None:
    """Set the connection's pragmas and create the schema if the file has none.

    Raises:
        StoreError: the file cannot use WAL (a network file system).
        SchemaVersionError: a newer asyncache wrote the file.
        sqlite3.Error: a statement failed.
    """
    version = user_version(db, path)
    if version == 0:
        # Only takes effect before the first table exists; a no-op otherwise.
        db.execute("PRAGMA auto_vacuum = INCREMENTAL")
    rows = db.execute("PRAGMA journal_mode = WAL").fetchall()
    if str(rows[0][0]).lower() != "wal" and path != MEMORY:
        raise StoreError(
            f"SQLite store {path!r} cannot use WAL (journal_mode={rows[0][0]}); "
            "is it on a network file system?"
        )
    db.execute(f"PRAGMA synchronous = {synchronous}")
    db.execute("PRAGMA journal_size_limit = 67108864")
    if version == SCHEMA_VERSION:
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        # Another process may have created the schema since we looked.
        version = user_version(db, path)
        if version == 0:
            for statement in SCHEMA:
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise


def user_version(db: sqlite3.Connection, path: str) -> int:
    """The file's schema version (0: none yet).

    Raises:
        SchemaVersionError: it is newer than ``SCHEMA_VERSION``.
    """
    return check_version(int(db.execute("PRAGMA user_version").fetchone()[0]), path)


def check_version(version: int, path: str) -> int:
    """``version``, the file's schema version, unless it is newer than ``SCHEMA_VERSION``.

    Raises:
        SchemaVersionError: it is newer than ``SCHEMA_VERSION``.
    """
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"SQLite store {path!r} has schema version {version}, but this asyncache "
            f"understands up to {SCHEMA_VERSION}: upgrade asyncache-ml, or point the "
            "store at another file"
        )
    return version
