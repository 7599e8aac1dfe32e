"""SQLiteStore's announcements of what it drops: a log every process on the file reads.

Redis announces a delete or a clear over pub/sub; a SQLite file has no such
channel, so each ``delete`` and ``clear`` appends a row to
``asyncache_drops`` (the key, or NULL for every entry), and each process
that subscribed (a ``TieredStore`` in front) reads the rows after the last
one it saw, every ``POLL_SECONDS``, starting from the last row logged before
it subscribed (the reading starts later, once a loop opened the file).
Without it a copy in another process's L1 outlived a clear by up to
``l1_ttl`` (60 s by default).

The table is created on first use (``CREATE TABLE IF NOT EXISTS``), so files
written before it existed gain it without a schema version: an asyncache
that does not know it never reads it. Rows older than ``KEEP_SECONDS`` are
deleted as new ones are written; a reader that finds a gap in the sequence
(it fell that far behind) drops every copy, as Redis' subscribers do when
their subscription was lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ...errors import StoreError
from .sql import Execute

__all__ = ["POLL_SECONDS", "DropLog", "Invalidated"]

Invalidated = Callable[[bytes | None], Awaitable[object]]
"""``callback(key)``: ``key`` was dropped; ``None``: every entry was (or may have been)."""

POLL_SECONDS = 0.01
"""How often a subscribed process reads the log: a drop reaches it within this, plus a read."""

KEEP_SECONDS = 60.0
"""How long a row stays: far longer than any reader's poll falls behind."""

_CREATE = """CREATE TABLE IF NOT EXISTS asyncache_drops (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    key BLOB,
    at REAL NOT NULL
)"""
_RECORD = "INSERT INTO asyncache_drops (key, at) VALUES (?1, ?2)"
_FORGET = "DELETE FROM asyncache_drops WHERE at < ?1"
# Where a new reader starts: the last row written before it subscribed (?1).
_LAST = "SELECT coalesce(max(seq), 0) FROM asyncache_drops WHERE at < ?1"
_SINCE = "SELECT seq, key FROM asyncache_drops WHERE seq > ?1 ORDER BY seq LIMIT 1000"


class DropLog:
    """The drop log of one SQLiteStore, on its connections.

    Args:
        execute: runs a statement that writes, on the store's write connection.
        read: runs a statement that only reads, on its read connection.
        spawn: starts an asyncio task the store owns (awaited on its ``aclose``).
    """

    def __init__(
        self,
        execute: Execute,
        read: Execute,
        spawn: Callable[..., asyncio.Task[Any]],
    ) -> None:
        self._execute = execute
        self._read = read
        self._spawn = spawn
        self._created = False
        self._callbacks: list[Invalidated] = []
        self._poller: asyncio.Task[None] | None = None
        self._closed = False
        # When the first subscriber subscribed: the reading, which starts later (with
        # a loop, after opening the file), still hands it every drop logged since.
        self._since: float | None = None

    @property
    def pending(self) -> bool:
        """Someone subscribed and the reading has not started: the next call on a loop starts it."""
        return self._poller is None and bool(self._callbacks) and not self._closed

    async def record(self, key: bytes | None) -> None:
        """Log that ``key`` (``None``: every entry) was dropped here.

        Raises:
            StoreError: the statement failed.
        """
        await self._create()
        now = time.time()
        await self._execute(_RECORD, (key, now))
        await self._execute(_FORGET, (now - KEEP_SECONDS,))

    def subscribe(self, callback: Invalidated) -> Callable[[], None]:
        """Have ``callback(key)`` awaited for every drop logged from now on, by any process.

        The reading starts now when an asyncio loop runs, else with the
        store's next call on one (``pending``). Under trio nothing reads the
        log: copies there last up to the tier's ``l1_ttl``.
        """
        self._callbacks.append(callback)
        if self._since is None:
            self._since = time.time()
        self.start()

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._callbacks.remove(callback)

        return unsubscribe

    def start(self) -> None:
        """Start reading the log, if anyone subscribed and a loop runs."""
        if not self.pending:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # no asyncio loop (none yet, or trio)
        self._poller = self._spawn(self._poll())

    async def aclose(self) -> None:
        """Stop reading the log (before the store awaits its tasks)."""
        self._closed = True
        poller, self._poller = self._poller, None
        if poller is not None and not poller.done():
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller

    async def _create(self) -> None:
        if not self._created:
            await self._execute(_CREATE, ())
            self._created = True

    async def _poll(self) -> None:
        last: int | None = None
        while True:
            try:
                if last is None:
                    await self._create()
                    since = time.time() if self._since is None else self._since
                    last = int((await self._read(_LAST, (since,)))[0][0])
                else:
                    last = await self._read_since(last)
            except StoreError:
                pass  # the store's own calls report it; the log is read again next time
            await asyncio.sleep(POLL_SECONDS)

    async def _read_since(self, last: int) -> int:
        rows = await self._read(_SINCE, (last,))
        if rows and rows[0][0] != last + 1:
            # Rows this reader never saw were deleted: what they dropped is unknown.
            await self._announce(None)
        for seq, key in rows:
            await self._announce(None if key is None else bytes(key))
            last = int(seq)
        return last

    async def _announce(self, key: bytes | None) -> None:
        for callback in list(self._callbacks):
            await callback(key)
