"""Keeping a SQLite store's file in shape: pruning, the bounds, and the background task.

Deletes go in chunks of ``DELETE_CHUNK`` rows, so that the write lock is held
for milliseconds and other callers' statements interleave between them.

The background pruning runs on a daemon thread of the store's own, each prune
in a short ``asyncio.run`` there: it belongs to no caller's event loop, so it
goes on whichever loops (asyncio's or trio's, one or several) use the store,
and outlives none of them at exit.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable

import anyio

from ...errors import StoreError
from .sql import (
    COUNT,
    DELETE_CHUNK,
    EVICT_EXPIRING,
    EVICT_FOREVER,
    PAGES,
    PRUNE,
    PRUNE_LEASES,
    USED_BYTES,
    Execute,
)

__all__ = ["Upkeep"]

logger = logging.getLogger("asyncache.sqlite")

# max_bytes eviction goes down to this fraction, so it does not run on every add.
_LOW_WATER = 0.9


class Upkeep:
    """Prunes one store's file and keeps its bounds, on demand and in the background.

    The store tells it of inserts (``inserted``); past a slack it wakes the
    background task early rather than waiting out the interval, so the bounds
    are kept shortly after inserts, never inside them.

    Args:
        execute: runs a statement on the store's connection.
        vacuum: gives free pages back to the file system.
        path: the file, for log messages.
        max_entries: most entries kept; ``None`` for no bound.
        max_bytes: most bytes of pages in use; ``None`` for no bound.
    """

    def __init__(
        self,
        execute: Execute,
        vacuum: Callable[[], Awaitable[None]],
        *,
        path: str,
        max_entries: int | None,
        max_bytes: int | None,
    ) -> None:
        self.execute = execute
        self.vacuum = vacuum
        self.path = path
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bounded = max_entries is not None or max_bytes is not None
        # Threads' primitives: prunes come from any loop, and from the background thread.
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.stop = threading.Event()
        # Inserts since the bounds were last checked; past the slack, check again.
        self.unchecked = 0
        self.slack = max(1, min(1000, (max_entries or 100_000) // 100))
        self.failing = False
        self.also: Callable[[float], Awaitable[object]] | None = None
        """More to prune with the entries (the tag index, ``tags``), given the time."""
        self.paused = False
        """Set by ``SQLiteStore.pause_upkeep``: the background task prunes and evicts no more."""
        self.pruned = 0
        """Expired entries deleted so far."""
        self.evicted = 0
        """Entries deleted to keep the bounds so far."""

    def inserted(self, count: int) -> None:
        """``count`` new rows went in: check the bounds soon if enough did."""
        self.unchecked += count
        if self.unchecked >= self.slack:
            self.unchecked = 0
            self.wake.set()

    async def prune(self) -> int:
        """Delete expired entries and leases, then enforce the bounds.

        Returns:
            How many expired entries were deleted.
        """
        # Polled, not awaited: a thread's lock, which a caller of any loop can take
        # (an anyio.Event would belong to one loop). Two prunes at once are rare.
        while not self.lock.acquire(blocking=False):  # noqa: ASYNC110
            await anyio.sleep(0.005)
        try:
            now = time.time()
            pruned = 0
            while True:
                deleted = len(await self.execute(PRUNE, (now,)))
                pruned += deleted
                self.pruned += deleted  # counted as each chunk goes, for stats() meanwhile
                if deleted < DELETE_CHUNK:
                    break
            await self.execute(PRUNE_LEASES, (now,))
            if self.also is not None:
                await self.also(now)
            await self.enforce_bounds()
            pages, free = (await self.execute(PAGES, ()))[0]
            if free > pages // 2:
                await self.vacuum()
            return pruned
        finally:
            self.lock.release()

    def start(self, interval: float) -> threading.Thread:
        """Start the background thread: a prune every ``interval`` seconds, or when woken."""
        thread = threading.Thread(
            target=self.run, args=(interval,), name=f"asyncache-sqlite-upkeep {self.path}"
        )
        thread.daemon = True
        thread.start()
        return thread

    def run(self, interval: float) -> None:
        """The background thread: prune every ``interval`` seconds, or sooner when woken.

        Ends once ``stop`` is set (and ``wake``, so that it sees it at once).
        """
        while True:
            self.wake.wait(interval)
            self.wake.clear()
            if self.stop.is_set():
                return
            if self.paused:
                continue  # replay: nothing is deleted while it reads
            asyncio.run(self.prune_in_background())

    async def prune_in_background(self) -> None:
        """``prune``, its failure logged once per streak instead of raised."""
        try:
            await self.prune()
        except StoreError as exc:
            # Once per failure streak: a locked file would otherwise log every interval.
            if not self.failing and not self.stop.is_set():
                logger.warning("background prune of %r failed: %s", self.path, exc)
            self.failing = True
        except Exception:
            logger.exception("background prune of %r failed", self.path)
            self.failing = True
        else:
            self.failing = False

    async def count(self) -> int:
        """How many entries the file holds (expired ones not yet pruned included)."""
        rows = await self.execute(COUNT, ())
        return int(rows[0][0])

    async def enforce_bounds(self) -> None:
        """Evict down to ``max_entries``, and under ``max_bytes`` to its low-water mark."""
        if self.max_entries is not None:
            excess = await self.count() - self.max_entries
            if excess > 0:
                await self.evict(excess)
        if self.max_bytes is not None:
            # Deleting rows frees pages only when they empty, so look again after each pass.
            for _ in range(8):
                used = int((await self.execute(USED_BYTES, ()))[0][0])
                if used <= self.max_bytes:
                    break
                rows = await self.count()
                target = self.max_bytes * _LOW_WATER
                if rows == 0 or not await self.evict(math.ceil(rows * (used - target) / used)):
                    break

    async def evict(self, n: int) -> int:
        """Delete up to ``n`` entries, soonest-expiring first, then the oldest without expiry."""
        evicted = 0
        while evicted < n:
            limit = min(DELETE_CHUNK, n - evicted)
            deleted = len(await self.execute(EVICT_EXPIRING, (limit,)))
            if not deleted:
                deleted = len(await self.execute(EVICT_FOREVER, (limit,)))
                if not deleted:
                    break
            evicted += deleted
        self.evicted += evicted
        return evicted
