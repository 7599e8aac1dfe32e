"""SQLiteStore: the DecisionStore protocol on one file, gets and adds gathered per iteration.

The connections are in ``connection`` (one for writes, one for reads), their
threads in ``threads``, the file's layout in ``schema``, the statements in
``sql``, pruning and the bounds in ``upkeep``, leases in ``leases``, and what
the file holds (for ``asyncache stats``) in ``describe``.
"""

from __future__ import annotations

import math
import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Self

from ...errors import ConfigurationError
from ...tags import DECISION_TAGS, Tagging, labels_of
from ..protocol import Entry
from .connection import Database
from .describe import describe_database, describe_file
from .drops import DropLog, Invalidated
from .gathering import Gatherer, Gathering, asyncio_loop, next_iteration
from .leases import LeaseTable
from .schema import MEMORY
from .sql import (
    ADD_CHUNK,
    CLEAR_ENTRIES,
    CLEAR_LEASES,
    COUNT,
    DELETE,
    ENTRIES_AFTER,
    EXPIRED_AT,
    GET_CHUNK,
    GET_ONE,
    RENEW,
    REPLACE,
    insert_many,
    select_many,
    storable_expiry,
)
from .tags import TagIndex
from .threads import to_thread
from .upkeep import Upkeep
from .url import parse_url

__all__ = ["SQLiteStore"]

_SYNCHRONOUS = ("NORMAL", "FULL")


class SQLiteStore:
    """Decisions in a SQLite file, shared by every process and task on one host.

    The store opens its file on first use (constructing it outside an event
    loop is fine). It works under asyncio and trio (through anyio), and serves
    several threads' event loops at once: its statements run on threads of its
    own and each answer goes back to the loop that asked. ``async with`` opens
    it at once and closes it on exit.

    Expired entries are never returned. An expiry of ``inf`` (or past any
    float) means no expiry, like ``None``. A background task deletes them every
    ``prune_interval`` seconds and keeps the bounds. When a bound is exceeded,
    entries are evicted soonest-expiring first, then entries without expiry
    oldest-inserted first. Bounds are enforced shortly after inserts, not
    inside them, so the file may briefly hold a little more than the bound.

    Args:
        path: the database file; created with mode 0600 when absent.
            ``":memory:"`` gives a private, non-persistent database.
        synchronous: ``"NORMAL"`` (default: a power loss may lose the last
            writes, never corrupts) or ``"FULL"`` (every add is durable).
        busy_timeout: seconds a statement waits for another process's lock
            before failing with ``StoreError`` (and opening the file, for
            another process opening it). Keep it near the engine's
            ``store_timeout``: waiting longer only holds up the writing thread
            (reads have a connection and thread of their own).
        max_entries: most entries kept; ``None`` for no bound.
        max_bytes: most bytes of database pages in use (the file minus its
            free pages; the WAL is not counted); ``None`` for no bound.
        prune_interval: seconds between background prunes; ``None`` for no
            background task (then ``prune()`` prunes and keeps the bounds).

    Raises:
        ConfigurationError: an option is out of range.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "NORMAL",
        busy_timeout: float = 1.0,
        max_entries: int | None = None,
        max_bytes: int | None = None,
        prune_interval: float | None = 60.0,
    ) -> None:
        self.path = os.fspath(path)
        if not self.path:
            raise ConfigurationError("SQLiteStore needs a path (or ':memory:')")
        self.synchronous = synchronous.upper()
        if self.synchronous not in _SYNCHRONOUS:
            raise ConfigurationError(f"synchronous must be NORMAL or FULL, got {synchronous!r}")
        if not (math.isfinite(busy_timeout) and busy_timeout >= 0):
            raise ConfigurationError(f"busy_timeout must be >= 0 seconds, got {busy_timeout!r}")
        for name, bound in (("max_entries", max_entries), ("max_bytes", max_bytes)):
            if bound is not None and (isinstance(bound, bool) or bound <= 0):
                raise ConfigurationError(
                    f"{name} must be a positive integer or None, got {bound!r}"
                )
        if prune_interval is not None and not (
            math.isfinite(prune_interval) and prune_interval > 0
        ):
            raise ConfigurationError(
                f"prune_interval must be > 0 seconds or None, got {prune_interval!r}"
            )
        self.busy_timeout = busy_timeout
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.prune_interval = prune_interval

        self._database = database = Database(
            self.path,
            busy_timeout=busy_timeout,
            synchronous=self.synchronous,
            opened=self._opened,
        )
        self._upkeep = Upkeep(
            database.execute,
            database.vacuum,
            path=self.path,
            max_entries=max_entries,
            max_bytes=max_bytes,
        )
        self._leases = LeaseTable(database.execute, database.read)
        self._drops = DropLog(database.execute, database.read, database.spawn)
        self._tags = TagIndex(database.execute, database.read)
        self._upkeep.also = self._tags.prune
        self._pruning: threading.Thread | None = None  # the background pruning
        self._reading = 0  # reads of ours in flight; while any is, gets are gathered
        self._gets: Gatherer[bytes, Entry | None] = Gatherer(self._run_get, database.spawn)
        self._adds: Gatherer[tuple[bytes, bytes, float | None], Entry] = Gatherer(
            self._run_add, database.spawn
        )

        self.read_queries = 0
        """SELECT statements sent to the database (a gathering of gets is one)."""
        self.write_queries = 0
        """Upserts sent to the database (a gathering of adds is one)."""

    @classmethod
    def from_url(cls, url: str) -> SQLiteStore:
        """Build a store from ``sqlite:///relative/path`` or ``sqlite:////absolute/path``.

        Query options are the constructor's: ``synchronous``, ``busy_timeout``,
        ``max_entries``, ``max_bytes`` and ``prune_interval`` (``none`` turns
        the background prune off), e.g. ``sqlite:///cache.db?max_entries=100000``.

        Raises:
            ConfigurationError: the URL is not a sqlite URL or an option is invalid.
        """
        path, options = parse_url(url)
        return cls(path, **options)

    @property
    def pruned(self) -> int:
        """Expired entries deleted by this store so far."""
        return self._upkeep.pruned

    @property
    def evicted(self) -> int:
        """Entries deleted to keep the bounds so far."""
        return self._upkeep.evicted

    @property
    def reopened(self) -> int:
        """Times the file was found deleted or replaced, and its path opened again."""
        return self._database.reopened

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    async def __aenter__(self) -> Self:
        await self._database.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- the DecisionStore protocol ------------------------------------------------

    async def get(self, key: bytes) -> Entry | None:
        """Return the live entry under ``key``, or ``None``; concurrent gets share a query."""
        gets = self._gets
        gathering = gets.open
        loop = asyncio_loop()
        if self._drops.pending and loop is not None:
            self._drops.start()  # a tier subscribed before any loop ran
        if gathering is not None and gathering.loop is loop:
            return await gets.follow(gathering, key)
        if not self._reading or loop is None or gathering is not None:
            # Nothing of ours in flight: go at once, so a lone get pays no gathering.
            # (Nor does a get of a loop that cannot follow the one gathering now.)
            self._reading += 1
            try:
                database = self._database
                db = database.ready_reader() or await database.read_connection()
                self.read_queries += 1
                params = (key, time.time())
                try:
                    rows: Any = await db.execute_fetchall(GET_ONE, params)
                except sqlite3.Error as exc:
                    rows = await database.again(exc, database.read_connection, GET_ONE, params)
            finally:
                self._reading -= 1
            for value, expires_at in rows:
                return Entry(value, expires_at)
            return None
        # A read is in flight: lead a gathering of every get made in this iteration.
        gathering = gets.open = Gathering(key, loop)
        try:
            await next_iteration()
            gets.open = None
            results = await self._run_get(gathering.items)
        except BaseException as exc:
            gets.abandon(gathering, exc)
            raise
        return gets.settle(gathering, results)

    async def get_many(self, keys: Sequence[bytes]) -> list[Entry | None]:
        """Return the live entry (or ``None``) for each key, in order; one query."""
        if not keys:
            return []
        return await self._run_get(list(keys))

    async def add(self, key: bytes, value: bytes, expires_at: float | None) -> Entry:
        """Store ``value`` unless a live entry exists; return the winner. One statement."""
        if DECISION_TAGS.get() is not None:
            found = await labels_of(key)
            if found is not None:
                return await self._add_tagged(key, value, expires_at, found)
        adds = self._adds
        item = (key, value, storable_expiry(expires_at))
        gathering = adds.open
        loop = asyncio_loop()
        if gathering is not None and gathering.loop is loop:
            return await adds.follow(gathering, item)
        if loop is None or gathering is not None:
            # A loop that cannot gather (trio), or follow the one gathering now: alone.
            return (await self._run_add([item]))[0]
        gathering = adds.open = Gathering(item, loop)
        try:
            await next_iteration()
            adds.open = None
            return adds.settle(gathering, await self._run_add(gathering.items))
        except BaseException as exc:
            adds.abandon(gathering, exc)
            raise

    async def add_many(self, items: Sequence[tuple[bytes, bytes, float | None]]) -> list[Entry]:
        """``add`` for each item, in order, in one statement; return the winners."""
        if not items:
            return []
        if DECISION_TAGS.get() is not None:
            return [await self.add(key, value, expires_at) for key, value, expires_at in items]
        return await self._run_add(
            [(key, value, storable_expiry(expires_at)) for key, value, expires_at in items]
        )

    async def _add_tagged(
        self,
        key: bytes,
        value: bytes,
        expires_at: float | None,
        found: tuple[Tagging, tuple[bytes, ...]],
    ) -> Entry:
        """``add`` of a decision the door tagged: indexed, or refused after a forget."""
        tagging, labels = found
        when = storable_expiry(expires_at)
        self.write_queries += 1
        winner = await self._tags.add(key, value, when, labels, tagging.since)
        if winner is None:
            tagging.refuse(key)
            return Entry(value, expires_at)
        return winner

    async def forget(
        self,
        labels: Sequence[bytes],
        *,
        dry_run: bool = False,
        progress: Callable[[int, int], object] | None = None,
    ) -> int:
        """Drop every live decision indexed under any of ``labels``; return how many.

        Tombstones first (writes that began before are refused from then on),
        then the entries and their index rows; then the drop is logged, so that
        every process's tier in front drops its copies (``subscribe_invalidations``).
        """
        dropped = await self._tags.forget(labels, dry_run=dry_run, progress=progress)
        if not dry_run:
            await self._drops.record(None)
        return dropped

    async def renew(self, key: bytes, expires_at: float | None) -> bool:
        """Move a live entry's expiry; ``False`` when there is none."""
        when = storable_expiry(expires_at)
        rows = await self._database.execute(RENEW, (time.time(), when, key))
        if rows:
            await self._tags.follow(key, when)
        return bool(rows)

    async def delete(self, key: bytes) -> None:
        """Drop ``key`` if present, and log it for the other processes' tiers."""
        await self._database.execute(DELETE, (key,))
        await self._drops.record(key)

    async def replace(
        self, key: bytes, expected: bytes, value: bytes, expires_at: float | None
    ) -> Entry:
        """Store ``value`` if ``key`` still holds ``expected`` (or nothing live); the winner.

        One upsert: a compare-and-set across every process on the file.
        """
        if DECISION_TAGS.get() is not None:
            found = await labels_of(key)
            if found is not None:
                # Tagged: dropped and added again, indexed (a writer in between wins).
                await self.delete(key)
                return await self._add_tagged(key, value, expires_at, found)
        when = storable_expiry(expires_at)
        rows = await self._database.execute(REPLACE, (time.time(), key, value, when, expected))
        self.write_queries += 1
        stored, stored_expiry = rows[0]
        if stored == value:
            await self._tags.follow(key, when)
            # The other processes' tiers drop their copy of what was replaced, as after
            # a delete (a refresh's new decision is read from the file next).
            await self._drops.record(key)
        return Entry(stored, None if stored_expiry is None else float(stored_expiry))

    async def expired_at(self, key: bytes) -> float | None:
        """When the entry under ``key`` expired, if the file still holds it; else ``None``.

        Replay asks, to tell a recording that expired from one that never held the key.
        """
        rows = await self._database.read(EXPIRED_AT, (key, time.time()))
        return None if not rows else float(rows[0][0])

    def pause_upkeep(self) -> None:
        """Write nothing on its own from now on: no background prune, no eviction, no new file.

        Replay calls it, before the store's first use, so that reading a
        recording leaves the file as it was recorded, expired entries included:
        the file is then opened read-only (``schema.open_recording``), so a
        read-only checkout replays and nothing is created beside the file (no
        ``-wal`` or ``-shm``), and a path with no recording stays absent (every
        read is then a store error). A write, ``prune()`` included, then fails.
        """
        self._upkeep.paused = True
        self._database.read_only = True

    async def prune(self) -> int:
        """Delete expired entries and leases, then enforce the bounds.

        Returns:
            How many expired entries were deleted (evictions are in ``stats()``).
        """
        return await self._upkeep.prune()

    async def count(self) -> int:
        """How many entries the file holds (expired ones not yet pruned included)."""
        rows = await self._database.read(COUNT, ())
        return int(rows[0][0])

    async def clear(self) -> None:
        """Drop every entry and lease, and give the space back to the file system.

        The clear is logged for the other processes' tiers (``subscribe_invalidations``).
        """
        await self._database.execute(CLEAR_ENTRIES, ())
        await self._database.execute(CLEAR_LEASES, ())
        await self._tags.clear()
        await self._drops.record(None)
        await self._database.vacuum()

    async def aclose(self) -> None:
        """Stop the background pruning and close the connections; safe to call twice."""
        await self._drops.aclose()
        upkeep = self._upkeep
        upkeep.stop.set()
        upkeep.wake.set()
        thread = self._pruning
        if thread is not None:
            # A prune under way finishes first: its statements need the connection.
            await to_thread(thread.join)
        await self._database.aclose()

    async def entries(self, *, batch_size: int = 500) -> AsyncIterator[list[tuple[bytes, Entry]]]:
        """Yield the live entries in key order, one read of ``batch_size`` rows per batch."""
        after = b""
        while True:
            rows = await self._database.read(ENTRIES_AFTER, (time.time(), after, batch_size))
            if not rows:
                return
            yield [(key, Entry(value, expires_at)) for key, value, expires_at in rows]
            after = rows[-1][0]

    def subscribe_invalidations(self, callback: Invalidated) -> Callable[[], None]:
        """Have ``callback(key)`` awaited when entries here are dropped, by any process.

        ``key`` is the entry's key (a ``delete``) or ``None`` for every entry
        (a ``clear``, or drops that were missed). Every process that
        subscribed reads the file's drop log every few milliseconds (see
        ``drops``), starting when a loop first uses the store. Returns a
        function that unsubscribes. ``TieredStore`` subscribes its L1.
        """
        return self._drops.subscribe(callback)

    def stats(self) -> dict[str, int]:
        """Counters: queries sent, entries pruned and evicted, times the file was reopened."""
        return {
            "read_queries": self.read_queries,
            "write_queries": self.write_queries,
            "pruned": self.pruned,
            "evicted": self.evicted,
            "reopened": self.reopened,
        }

    async def describe(self) -> dict[str, Any]:
        """What the file holds, for ``asyncache stats``: entries, bytes, expiries, leases.

        Keys: ``kind``, ``path``, ``schema_version``, ``entries`` (``live``,
        ``expired`` and ``without_expiry`` among them), ``stored_bytes`` (the
        values), ``file_bytes`` (file and WAL; not for ``":memory:"``),
        ``next_expiry`` and ``last_expiry`` (Unix seconds of live entries, or
        ``None``), ``leases`` (live ones), ``max_entries`` and ``max_bytes``.
        A store that has not opened its file reads it through a read-only
        connection of its own, so describing never creates, migrates or
        writes a file.

        Raises:
            StoreError: the file cannot be read or holds no asyncache store.
            SchemaVersionError: a newer asyncache wrote the file.
        """
        database = self._database
        if database.closed:
            raise database.closed_error()
        try:
            if database.reader is None and self.path != MEMORY:
                facts = await describe_file(self.path, busy_timeout=self.busy_timeout)
            else:
                db = database.ready_reader() or await database.read_connection()
                facts = await describe_database(db.execute_fetchall, self.path)
        except sqlite3.Error as exc:
            raise database.error(exc) from exc
        return {
            "kind": "sqlite",
            "path": self.path,
            **facts,
            "max_entries": self.max_entries,
            "max_bytes": self.max_bytes,
        }

    # -- the LeaseStore capability -------------------------------------------------

    async def acquire_lease(self, key: bytes, token: bytes, ttl: float) -> bool:
        """Take the lease on ``key`` for ``ttl`` seconds unless another token holds it.

        The holder of ``token`` may take it again to extend it.
        """
        return await self._leases.acquire(key, token, ttl)

    async def renew_lease(self, key: bytes, token: bytes, ttl: float) -> bool:
        """Extend the lease on ``key`` to ``ttl`` seconds from now if ``token`` still holds it.

        Never takes a lease: a renewal that crossed its holder's release (or a
        takeover) changes nothing and returns ``False``.
        """
        return await self._leases.renew(key, token, ttl)

    async def release_lease(self, key: bytes, token: bytes) -> None:
        """Drop the lease on ``key`` if ``token`` still holds it."""
        await self._leases.release(key, token)

    async def wait_for_entry(
        self,
        key: bytes,
        timeout: float,  # noqa: ASYNC109 - LeaseStore's signature
    ) -> Entry | None:
        """Poll for an entry under ``key`` for up to ``timeout`` seconds.

        Returns ``None`` at the timeout, and also as soon as neither an entry
        nor a live lease exists: the holder gave up, so waiting longer is futile.
        """
        return await self._leases.wait_for_entry(key, timeout)

    # -- gathered statements ---------------------------------------------------------

    async def _run_get(self, keys: list[bytes]) -> list[Entry | None]:
        found: dict[bytes, Entry] = {}
        unique = list(dict.fromkeys(keys)) if len(keys) > 1 else keys
        self._reading += 1
        try:
            for start in range(0, len(unique), GET_CHUNK):
                chunk = unique[start : start + GET_CHUNK]
                self.read_queries += 1
                rows = await self._database.read(select_many(len(chunk)), (time.time(), *chunk))
                for key, value, expires_at in rows:
                    found[key] = Entry(value, expires_at)
        finally:
            self._reading -= 1
        return [found.get(key) for key in keys]

    async def _run_add(self, items: list[tuple[bytes, bytes, float | None]]) -> list[Entry]:
        winners: dict[bytes, Entry] = {}
        for start in range(0, len(items), ADD_CHUNK):
            chunk = items[start : start + ADD_CHUNK]
            params: list[object] = [time.time()]
            for item in chunk:
                params.extend(item)
            self.write_queries += 1
            for key, value, expires_at in await self._database.execute(
                insert_many(len(chunk)), params
            ):
                # RETURNING reports an integral REAL as an int; Entry says float.
                winners[key] = Entry(value, None if expires_at is None else float(expires_at))
        results = [winners[key] for key, _, _ in items]
        if self._upkeep.bounded:
            self._upkeep.inserted(
                sum(
                    winner.value == value and winner.expires_at == expires_at
                    for (_, value, expires_at), winner in zip(items, results, strict=True)
                )
            )
        return results

    def _opened(self) -> None:
        # On the thread that opened the file; the pruning belongs to no event loop.
        if self.prune_interval is not None and not self._upkeep.stop.is_set():
            self._pruning = self._upkeep.start(self.prune_interval)
