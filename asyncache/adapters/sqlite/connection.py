"""One SQLite store's connection: opened on first use, shared, closed once.

The connection belongs to the event loop that opened it. Opening runs as a
task of its own, shielded, so that a caller that gives up does not cancel it
for the others; the tasks the store starts (hand-offs to gathering followers,
the background prune) are owned here and awaited on ``aclose``.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

import aiosqlite

from ...errors import StoreError
from .schema import open_database

__all__ = ["Database"]

ResultT = TypeVar("ResultT")


class Database:
    """The connection to one store's file, and the tasks that use it.

    Args:
        path: the database file, or ``":memory:"``.
        busy_timeout: seconds a statement waits for another process's lock.
        synchronous: ``"NORMAL"`` or ``"FULL"``.
        opened: called once the connection is open (to start background work).
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
        self.connection: aiosqlite.Connection | None = None
        """The open connection, or ``None`` before the first use and after ``aclose``."""
        self.closed = False
        self._on_open = opened
        self._opening: asyncio.Task[aiosqlite.Connection] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._daemons: set[asyncio.Task[Any]] = set()

    async def connect(self) -> aiosqlite.Connection:
        """The connection, opened by the first caller; the others wait for it.

        Raises:
            StoreError: the store is closed, or the file cannot be opened.
            SchemaVersionError: a newer asyncache wrote the file.
        """
        if self.closed:
            raise self.closed_error()
        if self.connection is not None:
            return self.connection
        task = self._opening
        if task is None:
            task = self._opening = self.spawn(self._open())
            task.add_done_callback(self._opened)
        # Shielded: a caller that gives up must not cancel the opening for the others.
        return await asyncio.shield(task)

    async def execute(self, statement: str, params: Sequence[object]) -> list[Any]:
        """Run one statement (its own transaction); return its rows.

        Raises:
            StoreError: the statement failed, or the store is closed.
        """
        db = self.connection or await self.connect()
        try:
            rows: Any = await db.execute_fetchall(statement, params)
        except (sqlite3.Error, ValueError) as exc:
            raise self.error(exc) from exc
        return rows  # type: ignore[no-any-return]

    async def vacuum(self) -> None:
        """Give free pages back to the file system (the file has auto_vacuum=INCREMENTAL)."""
        db = self.connection or await self.connect()
        try:
            # executescript, because execute() steps a statement without columns only
            # once, and each step of incremental_vacuum frees one page.
            await db.executescript("PRAGMA incremental_vacuum;")
        except (sqlite3.Error, ValueError) as exc:
            raise self.error(exc) from exc

    def error(self, exc: Exception) -> StoreError:
        """The ``StoreError`` for a failed statement."""
        # ValueError is aiosqlite's word for "the connection closed under us".
        return StoreError(f"SQLite store {self.path!r}: {exc}")

    def closed_error(self) -> StoreError:
        """The ``StoreError`` for a call after ``aclose``."""
        return StoreError(f"SQLiteStore({self.path!r}) is closed")

    def spawn(
        self, work: Coroutine[Any, Any, ResultT], *, daemon: bool = False
    ) -> asyncio.Task[ResultT]:
        """Run ``work`` as a task owned here; a daemon is cancelled on ``aclose``."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if daemon:
            self._daemons.add(task)
            task.add_done_callback(self._daemons.discard)
        return task

    async def aclose(self) -> None:
        """Cancel the daemons, let the other tasks finish, close; safe to call twice."""
        if self.closed:
            return
        self.closed = True
        for task in self._daemons:
            task.cancel()
        # Gathering hand-offs finish (or fail fast now that the store is closed).
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        db, self.connection = self.connection, None
        if db is not None:
            await db.close()

    def _opened(self, task: asyncio.Task[aiosqlite.Connection]) -> None:
        # Retrieve a failure here (so it is never "unretrieved") and let the next
        # call try again: the lock that made this open fail may be gone by then.
        if task.cancelled() or task.exception() is not None:
            self._opening = None

    async def _open(self) -> aiosqlite.Connection:
        db = await open_database(
            self.path, busy_timeout=self.busy_timeout, synchronous=self.synchronous
        )
        if self.closed:
            await db.close()
            raise self.closed_error()
        self.connection = db
        if self._on_open is not None:
            self._on_open()
        return db
