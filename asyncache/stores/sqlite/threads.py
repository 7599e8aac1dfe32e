"""The threads SQLite connections run on: daemons, closed at interpreter exit.

aiosqlite runs each connection on a thread of its own, and that thread is not
a daemon: a program that never closed its store (it forgot ``aclose()``, or an
exception ended ``asyncio.run`` first) would wait for it forever at exit, since
Python joins every non-daemon thread before it runs ``atexit`` callbacks.

``connect`` makes the thread a daemon, so it never keeps a process alive, and
remembers the connection; at exit, ``close_at_exit`` closes every connection
still open, each after the statements queued on it, waiting ``EXIT_WAIT``
seconds in all. Every add is its own committed transaction, so what a store
returned is in the file (or its WAL) either way; the clean close also folds
the WAL back into the file.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import threading
import time
import weakref
from typing import Any

import aiosqlite

__all__ = ["EXIT_WAIT", "close", "close_at_exit", "connect"]

EXIT_WAIT = 2.0
"""Seconds the interpreter's exit waits, in all, for open connections to close."""

_open: weakref.WeakSet[aiosqlite.Connection] = weakref.WeakSet()


def connect(database: str, **options: Any) -> aiosqlite.Connection:
    """``aiosqlite.connect(database, **options)`` on a daemon thread; await it to open.

    The connection is closed at interpreter exit unless ``close`` closed it first.
    """
    db = aiosqlite.connect(database, **options)
    # aiosqlite keeps the thread, not yet started, in a private attribute (in
    # releases before 0.20 the connection is the thread). Without either, the
    # thread stays a non-daemon; tests/stores/test_sqlite_lifetime.py notices.
    thread = getattr(db, "_thread", db)
    if isinstance(thread, threading.Thread) and not thread.is_alive():
        thread.daemon = True
    _open.add(db)
    return db


async def close(db: aiosqlite.Connection) -> None:
    """Close ``db`` after the statements queued on it."""
    _open.discard(db)
    await db.close()


def close_at_exit(wait: float = EXIT_WAIT) -> None:
    """Close every connection still open, waiting up to ``wait`` seconds in all.

    Each closes after the statements queued on it; one that is stuck (another
    process holds the lock its statement waits for) is left to the process's
    end, which rolls back the statement and keeps every committed one.
    """
    deadline = time.monotonic() + wait
    # Nothing waits for the answers now: with no current loop, aiosqlite posts
    # none (posting to a closed loop would end its thread with a traceback).
    with contextlib.suppress(Exception):
        asyncio.set_event_loop(None)
    for db in list(_open):
        _open.discard(db)
        thread = getattr(db, "_thread", db)
        if not isinstance(thread, threading.Thread) or not thread.is_alive():
            continue
        with contextlib.suppress(Exception):
            db.stop()  # queues "close the connection, end the thread" behind the rest
        # One at a time: the last connection to a file to close folds the WAL into it,
        # and two closing at once may each see the other still open.
        thread.join(max(0.0, deadline - time.monotonic()))


atexit.register(close_at_exit)
