"""The threads SQLite connections run on: one daemon per connection, answering any loop.

Every statement on a connection runs on that connection's own thread, in the
order it was sent, so a connection is never used by two threads at once. The
caller waits without blocking its event loop, whatever loop it runs (asyncio
or trio, through anyio) and however many loops share the store (threads each
running ``asyncio.run``): each statement's answer goes back to the loop that
sent it. Under asyncio that is a future and ``call_soon_threadsafe``, as cheap
as aiosqlite's hop; on other loops, an ``anyio.Event`` set through the loop's
token.

A caller that stops waiting (cancelled, timed out) leaves its statement to
finish: the statement's answer then goes nowhere.

The threads are daemons, so a program that never closed its store (it forgot
``aclose()``, or an exception ended ``asyncio.run`` first) is never held at
exit. At exit, ``close_at_exit`` closes every connection still open, each
after the statements queued on it, waiting ``EXIT_WAIT`` seconds in all. Every
add is its own committed transaction, so what a store returned is in the file
(or its WAL) either way; the clean close also folds the WAL back into the file.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import queue
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

__all__ = ["EXIT_WAIT", "Connection", "close_at_exit"]

EXIT_WAIT = 2.0
"""Seconds the interpreter's exit waits, in all, for open connections to close."""

ResultT = TypeVar("ResultT")

# What a statement's thread does with its outcome: hand it to the waiting loop.
Post = Callable[[Any, BaseException | None], None]

_open: weakref.WeakSet[Connection] = weakref.WeakSet()


class Connection:
    """One ``sqlite3`` connection and the daemon thread every statement on it runs on.

    Args:
        connection: made with ``check_same_thread=False`` (it was opened and
            prepared on another thread); nothing else may use it after this.
        name: the thread's name, for debuggers and stack dumps.
    """

    __slots__ = ("__weakref__", "_db", "_jobs", "_lock", "_stopped", "thread")

    def __init__(self, connection: sqlite3.Connection, *, name: str = "asyncache-sqlite") -> None:
        self._db = connection
        self._jobs: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...], Post] | None] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()  # orders "stopped" against sending a statement
        self._stopped = False
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self.thread.start()
        _open.add(self)

    async def call(self, function: Callable[..., ResultT], *args: Any) -> ResultT:
        """``function(connection, *args)`` on the connection's thread; its result.

        Raises:
            sqlite3.ProgrammingError: the connection is closed.
            Exception: whatever ``function`` raised.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return await _call_elsewhere(self, function, args)
        future: asyncio.Future[ResultT] = loop.create_future()

        def post(result: Any, error: BaseException | None) -> None:
            # The loop may be closed by now (its program ended): nobody waits then.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, result, error)

        self.send(function, args, post)
        return await future

    async def execute_fetchall(self, statement: str, params: Sequence[object] = ()) -> list[Any]:
        """Run one statement; its rows."""
        return await self.call(_fetchall, statement, params)

    async def executescript(self, script: str) -> None:
        """Run ``script`` (several statements, or one that must be stepped to its end)."""
        await self.call(_executescript, script)

    def send(self, function: Callable[..., Any], args: tuple[Any, ...], post: Post) -> None:
        """Queue ``function(connection, *args)``; ``post`` gets its outcome on the thread.

        Raises:
            sqlite3.ProgrammingError: the connection is closed.
        """
        with self._lock:
            if self._stopped:
                raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
            self._jobs.put((function, args, post))

    async def close(self) -> None:
        """Close the connection after the statements queued on it; its thread then ends."""
        try:
            await self.call(_close)
        except sqlite3.Error:
            pass  # closed already
        finally:
            # Also when the caller was cancelled: the thread must end all the same.
            self.stop()

    def stop(self) -> None:
        """Close the connection after the statements queued on it, without waiting."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            self._jobs.put((_close, (), _ignore))
            self._jobs.put(None)
        _open.discard(self)

    def _serve(self) -> None:
        jobs = self._jobs
        db = self._db
        while True:
            job = jobs.get()
            if job is None:
                return
            function, args, post = job
            try:
                result = function(db, *args)
            except BaseException as exc:
                post(None, exc)
            else:
                post(result, None)


async def _call_elsewhere(
    connection: Connection, function: Callable[..., ResultT], args: tuple[Any, ...]
) -> ResultT:
    """``Connection.call`` on a loop other than asyncio's (trio), through anyio."""
    import anyio.from_thread
    import anyio.lowlevel

    token = anyio.lowlevel.current_token()
    done = anyio.Event()
    outcome: list[tuple[Any, BaseException | None]] = []

    def post(result: Any, error: BaseException | None) -> None:
        outcome.append((result, error))
        # The run may have ended (RunFinishedError): nobody waits then.
        with contextlib.suppress(Exception):
            anyio.from_thread.run_sync(done.set, token=token)

    connection.send(function, args, post)
    await done.wait()
    result, error = outcome[0]
    if error is not None:
        raise error
    return result  # type: ignore[no-any-return]


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # its caller stopped waiting
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _fetchall(db: sqlite3.Connection, statement: str, params: Sequence[object]) -> list[Any]:
    return db.execute(statement, params).fetchall()


def _executescript(db: sqlite3.Connection, script: str) -> None:
    db.executescript(script)


def _close(db: sqlite3.Connection) -> None:
    db.close()


def _ignore(result: Any, error: BaseException | None) -> None:
    return None


def close_at_exit(wait: float = EXIT_WAIT) -> None:
    """Close every connection still open, waiting up to ``wait`` seconds in all.

    Each closes after the statements queued on it; one that is stuck (another
    process holds the lock its statement waits for) is left to the process's
    end, which rolls back the statement and keeps every committed one.
    """
    deadline = time.monotonic() + wait
    for connection in list(_open):
        connection.stop()
        # One at a time: the last connection to a file to close folds the WAL into it,
        # and two closing at once may each see the other still open.
        connection.thread.join(max(0.0, deadline - time.monotonic()))


atexit.register(close_at_exit)
