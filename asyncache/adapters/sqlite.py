"""SQLiteStore: decisions in one SQLite file, shared safely by every process on a host.

The file is in WAL mode, so readers never wait for writers. Every write is one
autocommit statement, which takes the write lock when it starts, as
``BEGIN IMMEDIATE`` would (schema creation, the one multi-statement
transaction, uses ``BEGIN IMMEDIATE``); a write waits up to ``busy_timeout``
for another process's.

Gets are batched: a get goes to the database thread at once when no read of
this store is in flight, and the gets made while one is are gathered, all those
of one event-loop iteration, into one ``WHERE key IN (...)`` query. A lone hit
so costs one thread hop and 64 concurrent hits cost two, not 64. Adds made in
one iteration go as one multi-row upsert.

Layout (schema version 1, kept in ``PRAGMA user_version``; created and
checked by ``_sqlite_schema``)::

    asyncache_entries (key BLOB PRIMARY KEY, value BLOB, expires_at REAL NULL)
    asyncache_leases  (key BLOB PRIMARY KEY, token BLOB, expires_at REAL)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import sqlite3
import time
from collections.abc import Coroutine, Sequence
from typing import Any, Self, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

try:
    import aiosqlite
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("SQLiteStore needs: pip install 'asyncache-ml[sqlite]'") from exc

from ..errors import ConfigurationError, StoreError
from ..stores.protocol import Entry
from ._sqlite_batch import Batch, Batcher, next_iteration
from ._sqlite_schema import MEMORY, SCHEMA_VERSION, create_private, prepare

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

logger = logging.getLogger("asyncache.sqlite")

# Keys bound per statement, far under SQLITE_MAX_VARIABLE_NUMBER (32766 since 3.32).
_GET_CHUNK = 4096
_ADD_CHUNK = 2048
# Rows deleted per statement by prune and eviction, so that the write lock is
# held for milliseconds and callers' statements interleave between chunks.
_DELETE_CHUNK = 512
# max_bytes eviction goes down to this fraction, so it does not run on every add.
_LOW_WATER = 0.9

# CASE rather than "DO UPDATE ... WHERE expired": the upsert then touches the row
# in every case, so RETURNING always yields the winner and one statement does it.
# ?1 is now; "expires_at" alone is the stored row, "excluded" the candidate.
_ADD_TAIL = """
ON CONFLICT (key) DO UPDATE SET
    value = CASE WHEN expires_at <= ?1 THEN excluded.value ELSE value END,
    expires_at = CASE WHEN expires_at <= ?1 THEN excluded.expires_at ELSE expires_at END
RETURNING key, value, expires_at"""
_LIVE = "(expires_at IS NULL OR expires_at > ?1)"
_GET_ONE = (
    "SELECT value, expires_at FROM asyncache_entries "
    "WHERE key = ?1 AND (expires_at IS NULL OR expires_at > ?2)"
)
_RENEW = f"UPDATE asyncache_entries SET expires_at = ?2 WHERE key = ?3 AND {_LIVE} RETURNING 1"
_DELETE = "DELETE FROM asyncache_entries WHERE key = ?1"
_COUNT = "SELECT count(*) FROM asyncache_entries"
_PRUNE = (
    "DELETE FROM asyncache_entries WHERE rowid IN (SELECT rowid FROM asyncache_entries "
    f"WHERE expires_at <= ?1 LIMIT {_DELETE_CHUNK}) RETURNING 1"
)
_PRUNE_LEASES = "DELETE FROM asyncache_leases WHERE expires_at <= ?1"
# Eviction order: soonest-expiring first, then entries without expiry, oldest first.
_EVICT_EXPIRING = (
    "DELETE FROM asyncache_entries WHERE rowid IN (SELECT rowid FROM asyncache_entries "
    "WHERE expires_at IS NOT NULL ORDER BY expires_at LIMIT ?1) RETURNING 1"
)
_EVICT_FOREVER = (
    "DELETE FROM asyncache_entries WHERE rowid IN (SELECT rowid FROM asyncache_entries "
    "WHERE expires_at IS NULL ORDER BY rowid LIMIT ?1) RETURNING 1"
)
_USED_BYTES = (
    "SELECT (page_count - freelist_count) * page_size "
    "FROM pragma_page_count(), pragma_freelist_count(), pragma_page_size()"
)
_PAGES = "SELECT * FROM pragma_page_count(), pragma_freelist_count()"
_ACQUIRE = """INSERT INTO asyncache_leases (key, token, expires_at) VALUES (?1, ?2, ?3)
ON CONFLICT (key) DO UPDATE SET token = excluded.token, expires_at = excluded.expires_at
WHERE asyncache_leases.expires_at <= ?4 OR asyncache_leases.token = excluded.token
RETURNING 1"""
_RELEASE = "DELETE FROM asyncache_leases WHERE key = ?1 AND token = ?2"
_POLL = """SELECT e.value, e.expires_at,
    EXISTS (SELECT 1 FROM asyncache_leases WHERE key = ?2 AND expires_at > ?1)
FROM (SELECT 1) LEFT JOIN asyncache_entries AS e
    ON e.key = ?2 AND (e.expires_at IS NULL OR e.expires_at > ?1)"""

_SYNCHRONOUS = ("NORMAL", "FULL")

ResultT = TypeVar("ResultT")


class SQLiteStore:
    """Decisions in a SQLite file, shared by every process and task on one host.

    The store opens its file on first use (constructing it outside an event
    loop is fine) and is then bound to that loop. ``async with`` opens it at
    once and closes it on exit.

    Expired entries are never returned; a background task deletes them every
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
            before failing with ``StoreError``. Keep it near the engine's
            ``store_timeout``: waiting longer only holds up the database thread.
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

        self._db: aiosqlite.Connection | None = None
        self._opening: asyncio.Task[aiosqlite.Connection] | None = None
        self._closed = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._maintenance: asyncio.Task[None] | None = None
        self._maintenance_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        # Inserts since the bounds were last checked; past the slack, check again.
        self._inserted = 0
        self._slack = max(1, min(1000, (max_entries or 100_000) // 100))
        self._failing = False
        self._reading = 0  # reads of ours in flight; while any is, gets are batched
        self._gets: Batcher[bytes, Entry | None] = Batcher(self._run_get, self._spawn)
        self._adds: Batcher[tuple[bytes, bytes, float | None], Entry] = Batcher(
            self._run_add, self._spawn
        )
        self._select_sql: dict[int, str] = {}
        self._insert_sql: dict[int, str] = {}

        self.read_queries = 0
        """SELECT statements sent to the database (a batch of gets is one)."""
        self.write_queries = 0
        """Upserts sent to the database (a batch of adds is one)."""
        self.pruned = 0
        self.evicted = 0

    @classmethod
    def from_url(cls, url: str) -> SQLiteStore:
        """Build a store from ``sqlite:///relative/path`` or ``sqlite:////absolute/path``.

        Query options are the constructor's: ``synchronous``, ``busy_timeout``,
        ``max_entries``, ``max_bytes`` and ``prune_interval`` (``none`` turns
        the background prune off), e.g. ``sqlite:///cache.db?max_entries=100000``.

        Raises:
            ConfigurationError: the URL is not a sqlite URL or an option is invalid.
        """
        parts = urlsplit(url)
        if parts.scheme.lower() != "sqlite":
            raise ConfigurationError(f"not a sqlite URL: {url!r}")
        if parts.netloc:
            raise ConfigurationError(
                f"sqlite URLs take no host ({url!r}); "
                "use sqlite:///relative/path or sqlite:////absolute/path"
            )
        path = unquote(parts.path)[1:]
        if not path:
            raise ConfigurationError(f"sqlite URL without a path: {url!r}")
        options: dict[str, Any] = {}
        for name, value in parse_qsl(parts.query, keep_blank_values=True):
            if name in options:
                raise ConfigurationError(f"sqlite option {name!r} given twice in {url!r}")
            options[name] = _parse_option(name, value)
        return cls(path, **options)

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    async def __aenter__(self) -> Self:
        await self._connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- the DecisionStore protocol ------------------------------------------------

    async def get(self, key: bytes) -> Entry | None:
        """Return the live entry under ``key``, or ``None``; concurrent gets share a query."""
        gets = self._gets
        batch = gets.open
        if batch is not None:
            return await gets.follow(batch, key)
        if not self._reading:
            # Nothing of ours in flight: go at once, so a lone get pays no batching.
            self._reading += 1
            try:
                db = self._db or await self._connect()
                self.read_queries += 1
                rows: Any = await db.execute_fetchall(_GET_ONE, (key, time.time()))
            except (sqlite3.Error, ValueError) as exc:
                raise self._error(exc) from exc
            finally:
                self._reading -= 1
            for value, expires_at in rows:
                return Entry(value, expires_at)
            return None
        # A read is in flight: lead a batch of every get made in this iteration.
        batch = gets.open = Batch(key)
        try:
            await next_iteration()
            gets.open = None
            results = await self._run_get(batch.items)
        except BaseException as exc:
            gets.abandon(batch, exc)
            raise
        return gets.settle(batch, results)

    async def get_many(self, keys: Sequence[bytes]) -> list[Entry | None]:
        """Return the live entry (or ``None``) for each key, in order; one query."""
        if not keys:
            return []
        return await self._run_get(list(keys))

    async def add(self, key: bytes, value: bytes, expires_at: float | None) -> Entry:
        """Store ``value`` unless a live entry exists; return the winner. One statement."""
        adds = self._adds
        item = (key, value, expires_at)
        batch = adds.open
        if batch is not None:
            return await adds.follow(batch, item)
        batch = adds.open = Batch(item)
        try:
            await next_iteration()
            adds.open = None
            return adds.settle(batch, await self._run_add(batch.items))
        except BaseException as exc:
            adds.abandon(batch, exc)
            raise

    async def add_many(self, items: Sequence[tuple[bytes, bytes, float | None]]) -> list[Entry]:
        """``add`` for each item, in order, in one statement; return the winners."""
        if not items:
            return []
        return await self._run_add(list(items))

    async def renew(self, key: bytes, expires_at: float | None) -> bool:
        """Move a live entry's expiry; ``False`` when there is none."""
        rows = await self._execute(_RENEW, (time.time(), expires_at, key))
        return bool(rows)

    async def delete(self, key: bytes) -> None:
        """Drop ``key`` if present."""
        await self._execute(_DELETE, (key,))

    async def prune(self) -> int:
        """Delete expired entries and leases, then enforce the bounds.

        Returns:
            How many expired entries were deleted (evictions are in ``stats()``).
        """
        async with self._maintenance_lock:
            now = time.time()
            pruned = 0
            while True:
                deleted = len(await self._execute(_PRUNE, (now,)))
                pruned += deleted
                if deleted < _DELETE_CHUNK:
                    break
            await self._execute(_PRUNE_LEASES, (now,))
            self.pruned += pruned
            await self._enforce_bounds()
            pages, free = (await self._execute(_PAGES, ()))[0]
            if free > pages // 2:
                await self._vacuum()
            return pruned

    async def count(self) -> int:
        """How many entries the file holds (expired ones not yet pruned included)."""
        rows = await self._execute(_COUNT, ())
        return int(rows[0][0])

    async def clear(self) -> None:
        """Drop every entry and lease, and give the space back to the file system."""
        await self._execute("DELETE FROM asyncache_entries", ())
        await self._execute("DELETE FROM asyncache_leases", ())
        await self._vacuum()

    async def aclose(self) -> None:
        """Stop the background task and close the connection; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._maintenance is not None:
            self._maintenance.cancel()
        # Batch hand-offs finish (or fail fast now that the store is closed).
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        db, self._db = self._db, None
        if db is not None:
            await db.close()

    def stats(self) -> dict[str, int]:
        """Counters: queries sent, entries pruned and evicted."""
        return {
            "read_queries": self.read_queries,
            "write_queries": self.write_queries,
            "pruned": self.pruned,
            "evicted": self.evicted,
        }

    # -- the LeaseStore capability -------------------------------------------------

    async def acquire_lease(self, key: bytes, token: bytes, ttl: float) -> bool:
        """Take the lease on ``key`` for ``ttl`` seconds unless another token holds it.

        The holder of ``token`` may take it again to extend it.
        """
        now = time.time()
        return bool(await self._execute(_ACQUIRE, (key, token, now + ttl, now)))

    async def release_lease(self, key: bytes, token: bytes) -> None:
        """Drop the lease on ``key`` if ``token`` still holds it."""
        await self._execute(_RELEASE, (key, token))

    async def wait_for_entry(
        self,
        key: bytes,
        timeout: float,  # noqa: ASYNC109 - LeaseStore's signature
    ) -> Entry | None:
        """Poll for an entry under ``key`` for up to ``timeout`` seconds.

        Returns ``None`` at the timeout, and also as soon as neither an entry
        nor a live lease exists: the holder gave up, so waiting longer is futile.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        delay = 0.005
        while True:
            rows = await self._execute(_POLL, (time.time(), key))
            value, expires_at, leased = rows[0]
            if value is not None:
                return Entry(value, None if expires_at is None else float(expires_at))
            remaining = deadline - loop.time()
            if not leased or remaining <= 0:
                return None
            await asyncio.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.1)

    async def _vacuum(self) -> None:
        """Give free pages back to the file system (the file has auto_vacuum=INCREMENTAL)."""
        db = self._db or await self._connect()
        try:
            # executescript, because execute() steps a statement without columns only
            # once, and each step of incremental_vacuum frees one page.
            await db.executescript("PRAGMA incremental_vacuum;")
        except (sqlite3.Error, ValueError) as exc:
            raise self._error(exc) from exc

    # -- batched statements ----------------------------------------------------------

    async def _run_get(self, keys: list[bytes]) -> list[Entry | None]:
        found: dict[bytes, Entry] = {}
        unique = list(dict.fromkeys(keys)) if len(keys) > 1 else keys
        self._reading += 1
        try:
            for start in range(0, len(unique), _GET_CHUNK):
                chunk = unique[start : start + _GET_CHUNK]
                sql = self._select_sql.get(len(chunk)) or self._select(len(chunk))
                self.read_queries += 1
                for key, value, expires_at in await self._execute(sql, (time.time(), *chunk)):
                    found[key] = Entry(value, expires_at)
        finally:
            self._reading -= 1
        return [found.get(key) for key in keys]

    async def _run_add(self, items: list[tuple[bytes, bytes, float | None]]) -> list[Entry]:
        winners: dict[bytes, Entry] = {}
        for start in range(0, len(items), _ADD_CHUNK):
            chunk = items[start : start + _ADD_CHUNK]
            params: list[object] = [time.time()]
            for item in chunk:
                params.extend(item)
            sql = self._insert_sql.get(len(chunk)) or self._insert(len(chunk))
            self.write_queries += 1
            for key, value, expires_at in await self._execute(sql, params):
                # RETURNING reports an integral REAL as an int; Entry says float.
                winners[key] = Entry(value, None if expires_at is None else float(expires_at))
        results = [winners[key] for key, _, _ in items]
        if self.max_entries is not None or self.max_bytes is not None:
            self._inserted += sum(
                winner.value == value and winner.expires_at == expires_at
                for (_, value, expires_at), winner in zip(items, results, strict=True)
            )
            if self._inserted >= self._slack:
                self._inserted = 0
                self._wake.set()
        return results

    def _select(self, n: int) -> str:
        marks = ", ".join(f"?{i}" for i in range(2, n + 2))
        sql = self._select_sql[n] = (
            f"SELECT key, value, expires_at FROM asyncache_entries WHERE key IN ({marks}) "
            f"AND {_LIVE}"
        )
        return sql

    def _insert(self, n: int) -> str:
        rows = ", ".join(f"(?{3 * i + 2}, ?{3 * i + 3}, ?{3 * i + 4})" for i in range(n))
        sql = self._insert_sql[n] = (
            f"INSERT INTO asyncache_entries (key, value, expires_at) VALUES {rows}{_ADD_TAIL}"
        )
        return sql

    # -- connection ------------------------------------------------------------------

    async def _execute(self, sql: str, params: Sequence[object]) -> list[Any]:
        db = self._db
        if db is None:
            db = await self._connect()
        try:
            rows: Any = await db.execute_fetchall(sql, params)
        except (sqlite3.Error, ValueError) as exc:
            raise self._error(exc) from exc
        return rows  # type: ignore[no-any-return]

    def _error(self, exc: Exception) -> StoreError:
        # ValueError is aiosqlite's word for "the connection closed under us".
        return StoreError(f"SQLite store {self.path!r}: {exc}")

    async def _connect(self) -> aiosqlite.Connection:
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        if self._db is not None:
            return self._db
        task = self._opening
        if task is None:
            task = self._opening = self._spawn(self._open())
            task.add_done_callback(self._opened)
        # Shielded: a caller that gives up must not cancel the opening for the others.
        return await asyncio.shield(task)

    def _opened(self, task: asyncio.Task[aiosqlite.Connection]) -> None:
        # Retrieve a failure here (so it is never "unretrieved") and let the next
        # call try again: the lock that made this open fail may be gone by then.
        if task.cancelled() or task.exception() is not None:
            self._opening = None

    async def _open(self) -> aiosqlite.Connection:
        if self.path != MEMORY:
            try:
                await asyncio.to_thread(create_private, self.path)
            except OSError as exc:
                raise StoreError(f"cannot create SQLite store {self.path!r}: {exc}") from exc
        try:
            db = await aiosqlite.connect(
                self.path, timeout=self.busy_timeout, isolation_level=None, cached_statements=256
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open SQLite store {self.path!r}: {exc}") from exc
        try:
            await prepare(db, path=self.path, synchronous=self.synchronous)
        except sqlite3.Error as exc:
            await db.close()
            raise StoreError(f"cannot open SQLite store {self.path!r}: {exc}") from exc
        except BaseException:
            await db.close()
            raise
        if self._closed:
            await db.close()
            raise StoreError(f"{self!r} is closed")
        self._db = db
        if self.prune_interval is not None:
            self._maintenance = self._spawn(self._maintain(self.prune_interval))
        return db

    # -- background work -------------------------------------------------------------

    def _spawn(self, work: Coroutine[Any, Any, ResultT]) -> asyncio.Task[ResultT]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _maintain(self, interval: float) -> None:
        while not self._closed:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self.prune()
            except StoreError as exc:
                # Once per failure streak: a locked file would otherwise log every interval.
                if not self._failing:
                    logger.warning("background prune of %r failed: %s", self.path, exc)
                self._failing = True
            except Exception:
                logger.exception("background prune of %r failed", self.path)
                self._failing = True
            else:
                self._failing = False

    async def _enforce_bounds(self) -> None:
        if self.max_entries is not None:
            excess = await self.count() - self.max_entries
            if excess > 0:
                await self._evict(excess)
        if self.max_bytes is not None:
            # Deleting rows frees pages only when they empty, so look again after each pass.
            for _ in range(8):
                used = int((await self._execute(_USED_BYTES, ()))[0][0])
                if used <= self.max_bytes:
                    break
                rows = await self.count()
                target = self.max_bytes * _LOW_WATER
                if rows == 0 or not await self._evict(math.ceil(rows * (used - target) / used)):
                    break

    async def _evict(self, n: int) -> int:
        evicted = 0
        while evicted < n:
            limit = min(_DELETE_CHUNK, n - evicted)
            deleted = len(await self._execute(_EVICT_EXPIRING, (limit,)))
            if not deleted:
                deleted = len(await self._execute(_EVICT_FOREVER, (limit,)))
                if not deleted:
                    break
            evicted += deleted
        self.evicted += evicted
        return evicted


def _parse_option(name: str, value: str) -> Any:
    """Parse one ``sqlite://`` query option into the constructor's type."""
    try:
        if name == "synchronous":
            return value
        if name in ("busy_timeout", "prune_interval"):
            if name == "prune_interval" and value.lower() in ("", "none", "off", "0"):
                return None
            return float(value)
        if name in ("max_entries", "max_bytes"):
            return None if value.lower() in ("", "none") else int(value)
    except ValueError:
        raise ConfigurationError(f"sqlite option {name}={value!r} is not a number") from None
    raise ConfigurationError(
        f"unknown sqlite option {name!r}; known: busy_timeout, max_bytes, max_entries, "
        "prune_interval, synchronous"
    )
