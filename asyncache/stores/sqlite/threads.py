"""The threads SQLite connections run on: aiosqlite's, one per connection, answering any loop.

Each connection is an ``aiosqlite.Connection``: every statement on it runs on
its own thread, in the order it was sent, and its answer goes back to the
asyncio loop that sent it (aiosqlite makes the future on the caller's running
loop), so several threads each running ``asyncio.run`` share one connection.

aiosqlite is asyncio's alone. Under trio (or any loop other than asyncio's) a
statement goes through an anyio worker thread that hands it to the same
aiosqlite connection from a short ``asyncio.run`` of its own: a few tens of
microseconds more per statement, and the same connection, order and file.

A caller that stops waiting (cancelled, timed out) leaves its statement to
finish: the statement's answer then goes nowhere. When the loop that sent it
is closed by then, aiosqlite's thread ends on the error (it cannot post the
answer); the next statement on that connection finds its thread gone and
fails with ``sqlite3.ProgrammingError``, and the store opens a new one
(``connection.Database``). Only a connection whose caller was cancelled looks
at its thread before each statement: looking costs a few microseconds a hit.

The threads are made daemons before they start (aiosqlite's are not), so a
program that never closed its store (it forgot ``aclose()``, or an exception
ended ``asyncio.run`` first) is never held at exit. At exit, ``close_at_exit``
closes every connection still open, each after the statements queued on it,
waiting ``EXIT_WAIT`` seconds in all. Every add is its own committed
transaction, so what a store returned is in the file (or its WAL) either way;
the clean close also folds the WAL back into the file.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import inspect
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

import anyio.to_thread

try:
    import aiosqlite
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError("SQLiteStore needs: pip install 'asyncache-ml[sqlite]'") from exc

from .sql import numbered

# The running asyncio loop or None, without raising: asked on every statement.
_get_running_loop = asyncio._get_running_loop

__all__ = ["EXIT_WAIT", "Connection", "close_at_exit", "open_connection", "to_thread"]

EXIT_WAIT = 2.0
"""Seconds the interpreter's exit waits, in all, for open connections to close."""

ResultT = TypeVar("ResultT")

# Connections not yet closed, held until their thread ends: aiosqlite warns when a
# connection it still has open is garbage-collected.
_open: set[Connection] = set()
_open_lock = threading.Lock()


class Connection:
    """One ``aiosqlite.Connection`` and the daemon thread its statements run on.

    Made by ``open_connection`` (on a worker thread: opening blocks).
    """

    __slots__ = ("_aio", "_careful", "_lock", "_stopped", "thread")

    def __init__(self, aio: aiosqlite.Connection, thread: threading.Thread) -> None:
        self._aio = aio
        self.thread = thread
        self._lock = threading.Lock()
        self._stopped = False
        # Whether a call must look before sending: the connection was stopped, or a
        # caller stopped waiting (its loop may close before the answer comes back,
        # which ends the thread). Looking costs a few microseconds; most never need to.
        self._careful = False
        with _open_lock:
            _open.add(self)

    async def execute_fetchall(self, statement: str, params: Sequence[object] = ()) -> list[Any]:
        """Run one statement; its rows.

        Raises:
            sqlite3.ProgrammingError: the connection is closed, or its thread ended.
            sqlite3.Error: the statement failed.
        """
        if self._careful and (self._stopped or not self.thread.is_alive()):
            raise _closed(self._stopped)
        if _get_running_loop() is None:  # trio: through a worker thread's own asyncio loop
            return await to_thread(_in_asyncio, self.execute_fetchall, statement, params)
        try:
            rows = await self._aio.execute_fetchall(statement, numbered(params))
        except ValueError:  # aiosqlite's "Connection closed": stopped meanwhile
            raise self._closed_meanwhile() from None
        except asyncio.CancelledError:
            self._careful = True
            raise
        return rows  # type: ignore[return-value]  # sqlite3's fetchall(): a list

    async def executescript(self, script: str) -> None:
        """Run ``script`` (several statements, or one that must be stepped to its end)."""
        if self._careful and (self._stopped or not self.thread.is_alive()):
            raise _closed(self._stopped)
        if _get_running_loop() is None:
            await to_thread(_in_asyncio, self.executescript, script)
            return
        try:
            await self._aio.executescript(script)
        except ValueError:
            raise self._closed_meanwhile() from None
        except asyncio.CancelledError:
            self._careful = True
            raise

    def _closed_meanwhile(self) -> Exception:
        """What aiosqlite's ``ValueError`` (its "Connection closed") means here."""
        if self._stopped:
            return _closed(True)
        return sqlite3.ProgrammingError("aiosqlite refused the statement: connection closed")

    async def close(self) -> None:
        """Close the connection after the statements queued on it; wait for its thread."""
        self.stop()
        await to_thread(self.thread.join)

    def stop(self) -> None:
        """Close the connection after the statements queued on it, without waiting."""
        if self.stopping():
            # aiosqlite's close is a coroutine: a thread of its own runs it, in a loop
            # of its own, and holds the connection until it is closed.
            threading.Thread(
                target=self._close_and_forget, name="asyncache-sqlite-close", daemon=True
            ).start()

    def stopping(self) -> bool:
        """Mark the connection stopped; whether it was not already."""
        with self._lock:
            if self._stopped:
                return False
            self._stopped = self._careful = True
            return True

    def _close_and_forget(self) -> None:
        try:
            asyncio.run(_close(self._aio))
        finally:
            with _open_lock:
                _open.discard(self)


async def _close(aio: aiosqlite.Connection) -> None:
    await aio.close()


def open_connection(connector: Callable[[], sqlite3.Connection], *, name: str) -> Connection:
    """A ``Connection`` whose thread runs ``connector`` first (blocking: a worker thread).

    Raises:
        Exception: whatever ``connector`` raised (its thread has ended then).
    """
    aio = aiosqlite.Connection(connector, 64)
    # aiosqlite before 0.22 made the Connection the thread itself; since, a thread it holds.
    thread = cast(threading.Thread, getattr(aio, "_thread", aio))
    thread.daemon = True  # never holds the program at exit: close_at_exit closes it
    thread.name = name
    asyncio.run(_started(aio, thread))
    return Connection(aio, thread)


async def _started(aio: aiosqlite.Connection, thread: threading.Thread) -> None:
    try:
        await aio
    except BaseException:
        # aiosqlite stops the thread with an answer due to this loop: it must still
        # be open then (a thread that cannot post its answer ends on the error).
        while thread.is_alive():  # noqa: ASYNC110 - a thread's end, not an event
            await asyncio.sleep(0.001)
        raise


def _in_asyncio(
    call: Callable[..., Awaitable[ResultT]], *args: Any
) -> ResultT:  # pragma: no cover - run on a worker thread
    async def run() -> ResultT:
        return await call(*args)

    return asyncio.run(run())


def _closed(stopped: bool) -> sqlite3.ProgrammingError:
    if stopped:
        return sqlite3.ProgrammingError("Cannot operate on a closed database.")
    # Its loop was closed before the answer came back (see the module's notes).
    return sqlite3.ProgrammingError("the connection's thread has ended")


# anyio 4.1 renamed run_sync's ``cancellable`` to ``abandon_on_cancel`` (and warns
# on the old name); anyio 4.0, which pyproject.toml allows, knows only the old one.
_ABANDON = (
    "abandon_on_cancel"
    if "abandon_on_cancel" in inspect.signature(anyio.to_thread.run_sync).parameters
    else "cancellable"
)


async def to_thread(function: Callable[..., ResultT], *args: Any, **kwargs: Any) -> ResultT:
    """``function(*args, **kwargs)`` on an anyio worker thread; one that gives up leaves it."""
    run_sync: Any = anyio.to_thread.run_sync  # its keyword differs between releases
    return await run_sync(functools.partial(function, *args, **kwargs), **{_ABANDON: True})  # type: ignore[no-any-return]


def close_at_exit(wait: float = EXIT_WAIT) -> None:
    """Close every connection still open, waiting up to ``wait`` seconds in all.

    Each closes after the statements queued on it; one that is stuck (another
    process holds the lock its statement waits for) is left to the process's
    end, which rolls back the statement and keeps every committed one. No
    thread may start at exit (Python 3.12), so the closes run on a loop here.
    """
    deadline = time.monotonic() + wait
    with _open_lock:
        connections = list(_open)
    loop = asyncio.new_event_loop()
    try:
        for connection in connections:
            remaining = max(0.0, deadline - time.monotonic())
            if connection.stopping():
                # One at a time: the last connection to a file to close folds the WAL
                # into it, and two closing at once may each see the other still open.
                closing = loop.create_task(_close(connection._aio))
                loop.run_until_complete(asyncio.wait([closing], timeout=remaining))
                if not closing.done():
                    _stuck.append(closing)  # never collected half-way: the process ends
            else:  # closing on a thread of its own already
                connection.thread.join(remaining)
    finally:
        if not _stuck:
            loop.close()


_stuck: list[asyncio.Task[None]] = []


atexit.register(close_at_exit)
