"""One SQLite store's connections: opened on first use, shared, reopened, closed once.

Two connections to the file: writes go through one, reads through the other.
In WAL mode a read never waits for a writer, so a write that waits (up to
``busy_timeout``) for another process's lock holds up no read queued behind it:
hits go on while another process holds the write lock. (``":memory:"`` has one
connection; a second would be another database.)

The connections belong to no event loop: each statement's answer goes back to
the loop that sent it (``threads``), so one store serves asyncio and trio, and
several threads' loops at once. Opening blocks (it may wait for another
process's lock), so it runs on an anyio worker thread, one opener at a time; a
caller that gives up leaves it to finish for the others. The tasks the store
starts (hand-offs to gathering followers, asyncio only) are owned here and the
calling loop's are awaited on ``aclose``.

The file is watched: before each write, at most once a second before reads,
and after a failed statement, the device and inode the path names are
compared with those of the file opened. When the file was deleted or replaced
(a person cleared the cache, a deploy put a fresh file in place), the store
opens the path again rather than go on alone with a file nobody else sees.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from ...errors import StoreError
from .schema import MEMORY, file_identity, open_database, open_reader, open_recording
from .threads import Connection, to_thread

__all__ = ["CHECK_EVERY", "Database"]

logger = logging.getLogger("asyncache.sqlite")

ResultT = TypeVar("ResultT")

CHECK_EVERY = 1.0
"""Seconds between checks, on the read path, that the path still names the file opened."""


class Database:
    """The connections to one store's file, and the tasks that use them.

    Args:
        path: the database file, or ``":memory:"``.
        busy_timeout: seconds a statement waits for another process's lock.
        synchronous: ``"NORMAL"`` or ``"FULL"``.
        opened: called once the file is first open (to start background work).
    """

    def __init__(
        self,
        path: str,
        *,
        busy_timeout: float,
        synchronous: str,
        opened: Callable[[], object] | None = None,
    ) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self.synchronous = synchronous
        self.connection: Connection | None = None
        """The connection writes go through, or ``None`` while none is open."""
        self.reader: Connection | None = None
        """The connection reads go through (``connection`` itself for ``":memory:"``)."""
        self.closed = False
        self.reopened = 0
        """Times the file was found deleted or replaced, and the path opened again."""
        self._identity: tuple[int, int] | None = None  # device and inode of the file open
        self._check_due = 0.0  # time.monotonic() of the read path's next check
        self._on_open = opened
        self._started = False  # whether the file was ever open (``opened`` was called)
        # One opener at a time; others (in worker threads) wait for it and find it open.
        self._opening = threading.Lock()
        # Orders the connections' changes (open, replaced, closed) between threads.
        self._state = threading.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._openers: dict[asyncio.AbstractEventLoop, asyncio.Task[Connection]] = {}
        self.read_only = False
        """Open the file read-only (replay): one connection, no file created or written."""

    async def connect(self) -> Connection:
        """The write connection, opened (with the read one) by the first caller.

        The others wait for it.

        Raises:
            StoreError: the store is closed, or the file cannot be opened.
            SchemaVersionError: a newer asyncache wrote the file.
        """
        if self.closed:
            raise self.closed_error()
        if self.connection is not None:
            return self.connection
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # trio: each caller's own worker thread waits for the opener
            return await to_thread(self._open)
        # One opening per loop, however many callers: one worker thread, not one each.
        task = self._openers.get(loop)
        if task is None:
            task = self._openers[loop] = loop.create_task(to_thread(self._open))
            task.add_done_callback(self._opened)
        # Shielded: a caller that gives up must not cancel the opening for the others.
        return await asyncio.shield(task)

    def _opened(self, task: asyncio.Task[Connection]) -> None:
        if self._openers.get(task.get_loop()) is task:
            del self._openers[task.get_loop()]
        # Retrieved here, so it is never "unretrieved" when every caller gave up; the
        # next call tries again (the lock that made this opening fail may be gone).
        if not task.cancelled():
            task.exception()

    def ready_reader(self) -> Connection | None:
        """The read connection if one is open, the file checked at most once a second."""
        if self._identity is not None and time.monotonic() >= self._check_due:
            self.check_file()
        return self.reader

    async def read_connection(self) -> Connection:
        """The read connection, opened with the write one if need be.

        Raises:
            StoreError: the store is closed, or the file cannot be opened.
        """
        db = self.ready_reader()
        if db is None:
            await self.connect()
            db = self.reader
            if db is None:  # closed while opening
                raise self.closed_error()
        return db

    async def write_connection(self) -> Connection:
        """The write connection, after checking that the path still names the file.

        Raises:
            StoreError: the store is closed, or the file cannot be opened.
        """
        if self._identity is not None:
            self.check_file()
        return self.connection or await self.connect()

    async def execute(self, statement: str, params: Sequence[object]) -> list[Any]:
        """Run one statement that writes (its own transaction); return its rows.

        Raises:
            StoreError: the statement failed, or the store is closed.
        """
        db = await self.write_connection()
        try:
            rows: Any = await db.execute_fetchall(statement, params)
        except sqlite3.Error as exc:
            return await self.again(exc, self.write_connection, statement, params)
        return rows  # type: ignore[no-any-return]

    async def read(self, statement: str, params: Sequence[object]) -> list[Any]:
        """Run one statement that only reads, on the read connection; return its rows.

        Raises:
            StoreError: the statement failed, or the store is closed.
        """
        db = self.ready_reader() or await self.read_connection()
        try:
            rows: Any = await db.execute_fetchall(statement, params)
        except sqlite3.Error as exc:
            return await self.again(exc, self.read_connection, statement, params)
        return rows  # type: ignore[no-any-return]

    async def again(
        self,
        exc: Exception,
        connection: Callable[[], Awaitable[Connection]],
        statement: str,
        params: Sequence[object],
    ) -> list[Any]:
        """After ``statement`` failed with ``exc``: once more if the file was replaced.

        A connection to a file deleted under it may fail (SQLite reports an I/O
        error); the path's file then gets the statement. Otherwise ``exc`` stands.

        Raises:
            StoreError: the statement failed (again), or the store is closed.
        """
        if self.closed or self._identity is None or (self.check_file() and self._threads_run()):
            raise StoreError(self._message(exc)) from exc
        db = await connection()
        try:
            rows: Any = await db.execute_fetchall(statement, params)
        except sqlite3.Error as retried:
            raise self.error(retried) from retried
        return rows  # type: ignore[no-any-return]

    async def vacuum(self) -> None:
        """Give free pages back to the file system (the file has auto_vacuum=INCREMENTAL)."""
        db = await self.write_connection()
        try:
            # executescript, because execute() steps a statement without columns only
            # once, and each step of incremental_vacuum frees one page.
            await db.executescript("PRAGMA incremental_vacuum;")
        except sqlite3.Error as exc:
            raise self.error(exc) from exc

    def check_file(self) -> bool:
        """Whether the path still names the file open; when not, drop the connections.

        The next call then opens the path again (creating a fresh file if none is there).
        """
        self._check_due = time.monotonic() + CHECK_EVERY
        identity = self._identity
        if identity is None or file_identity(self.path) == identity:
            return True
        with self._state:
            if self._identity != identity:
                return False  # another thread saw it first
            logger.warning(
                "SQLite store %r: the file was deleted or replaced; opening the path again",
                self.path,
            )
            self.reopened += 1
            self._drop()
        return False

    def _threads_run(self) -> bool:
        """Whether the connections' threads still run; when not, drop the connections.

        A connection's thread ends when the loop that sent a statement closed
        before its answer came back (``threads``): the next call opens new ones.
        """
        with self._state:
            if all(db.thread.is_alive() for db in (self.connection, self.reader) if db):
                return True
            logger.warning(
                "SQLite store %r: a connection's thread ended; opening the path again",
                self.path,
            )
            self._drop()
        return False

    def _drop(self) -> None:
        """Forget the connections (under ``_state``); the next call opens the path again."""
        self._identity = None
        old = {id(db): db for db in (self.connection, self.reader) if db is not None}
        self.connection = self.reader = None
        for db in old.values():
            # Statements already queued on it finish first. SQLite neither checkpoints
            # nor deletes the -wal of a file that is no longer at its path.
            db.stop()

    def error(self, exc: Exception) -> StoreError:
        """The ``StoreError`` for a failed statement; checks that the file is still there."""
        # ProgrammingError is sqlite3's word for "the connection closed under us".
        if self._identity is not None and not self.closed:
            self.check_file()
        return StoreError(self._message(exc))

    def _message(self, exc: Exception) -> str:
        return f"SQLite store {self.path!r}: {exc}"

    def closed_error(self) -> StoreError:
        """The ``StoreError`` for a call after ``aclose``."""
        return StoreError(f"SQLiteStore({self.path!r}) is closed")

    def spawn(self, work: Coroutine[Any, Any, ResultT]) -> asyncio.Task[ResultT]:
        """Run ``work`` as an asyncio task owned here, awaited on ``aclose``."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def aclose(self) -> None:
        """Let this loop's tasks finish, then close the connections; safe to call twice."""
        if self.closed:
            return
        with self._state:
            self.closed = True
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # trio: gathering (and its tasks) is asyncio's only
            loop = None
        # Gathering hand-offs finish (or fail fast now that the store is closed).
        while mine := [task for task in self._tasks if task.get_loop() is loop]:
            await asyncio.gather(*mine, return_exceptions=True)
        with self._state:
            writer, reader = self.connection, self.reader
            self.connection = self.reader = None
            self._identity = None
        # The reader first: closing the last connection folds the WAL into the file.
        if reader is not None and reader is not writer:
            await reader.close()
        if writer is not None:
            await writer.close()

    def _open(self) -> Connection:
        """Open the write and read connections (blocking: on a worker thread)."""
        with self._opening:
            if self.closed:
                raise self.closed_error()
            if self.connection is not None:
                return self.connection  # another caller opened it while this one waited
            memory = self.path == MEMORY
            # Taken before connecting: if the file is replaced while this opens, the
            # next check sees a difference and opens again, rather than miss it.
            identity = None if memory else file_identity(self.path)
            if self.read_only and not memory:
                # Replay reads a recording: one read-only connection, nothing created.
                writer = reader = open_recording(self.path, busy_timeout=self.busy_timeout)
            else:
                writer = open_database(
                    self.path, busy_timeout=self.busy_timeout, synchronous=self.synchronous
                )
                try:
                    reader = (
                        writer if memory else open_reader(self.path, busy_timeout=self.busy_timeout)
                    )
                except BaseException:
                    writer.stop()
                    raise
            with self._state:
                if not self.closed:
                    self.connection, self.reader = writer, reader
                    if not memory:
                        self._identity = identity or file_identity(self.path)
                    self._check_due = time.monotonic() + CHECK_EVERY
            if self.connection is not writer:  # closed while opening
                for db in {id(writer): writer, id(reader): reader}.values():
                    db.stop()
                raise self.closed_error()
            if not self._started:
                self._started = True
                if self._on_open is not None:
                    self._on_open()
            return writer
