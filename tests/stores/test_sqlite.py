"""SQLiteStore beyond the contract: its file, schema, batching, bounds, leases and faults."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from asyncache import DecisionCache, cached_prediction
from asyncache.errors import ConfigurationError, SchemaVersionError, StoreError
from asyncache.stores import Entry, LeaseStore, open_store
from asyncache.stores.sqlite import SCHEMA_VERSION, SQLiteStore

from ..support import key, until
from ..support.stores import sqlite_file

HOUR = 3600.0

# Holds a lock on a database file until a line arrives on stdin.
# "exclusive" locks out readers too (before any WAL connection opened the file);
# "immediate" is a write transaction: in WAL mode readers go on, writers wait.
LOCKER = """
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=5)
if sys.argv[2] == "exclusive":
    con.execute("PRAGMA locking_mode = EXCLUSIVE")
    con.execute("BEGIN EXCLUSIVE")
else:
    con.execute("BEGIN IMMEDIATE")
con.execute("CREATE TABLE IF NOT EXISTS locker_probe (x)")
print("locked", flush=True)
sys.stdin.readline()
con.execute("ROLLBACK")
con.close()
"""


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "decisions.db"


@pytest.fixture
async def store(path: Path) -> AsyncIterator[SQLiteStore]:
    opened = SQLiteStore(path)
    try:
        yield opened
    finally:
        await opened.aclose()


class Locker:
    """Another process holding a lock on the database file."""

    def __init__(self, path: Path, mode: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", LOCKER, str(path), mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        assert line == "locked", f"the locker did not lock {path} (said {line!r})"

    def release(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.write("\n")
            self.process.stdin.close()
            self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


LockFactory = Callable[[str], Locker]


@pytest.fixture
def lock(path: Path) -> Iterator[LockFactory]:
    lockers: list[Locker] = []

    def take(mode: str) -> Locker:
        locker = Locker(path, mode)
        lockers.append(locker)
        return locker

    yield take
    for locker in lockers:
        locker.release()


# -- the file --------------------------------------------------------------------------


async def test_file_is_private(path: Path, store: SQLiteStore) -> None:
    await store.add(key(1), b"v", None)
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        assert _mode(name) == 0o600, name


async def test_existing_file_keeps_its_mode(path: Path) -> None:
    _write(path, b"")
    os.chmod(path, 0o640)
    async with SQLiteStore(path) as opened:
        await opened.add(key(1), b"v", None)
    assert _mode(path) == 0o640


async def test_wal_and_schema(path: Path, store: SQLiteStore) -> None:
    await store.count()
    with sqlite_file(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        columns = raw.execute("PRAGMA table_info(asyncache_entries)").fetchall()
    assert [(c[1], c[2], c[5]) for c in columns] == [
        ("key", "BLOB", 1),
        ("value", "BLOB", 0),
        ("expires_at", "REAL", 0),
    ]


async def test_entries_persist_across_stores(path: Path) -> None:
    async with SQLiteStore(path) as first:
        await first.add(key(1), b"kept", None)
    async with SQLiteStore(path) as second:
        assert await second.get(key(1)) == Entry(b"kept", None)


async def test_newer_schema_is_refused(path: Path) -> None:
    with sqlite_file(path) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    opened = SQLiteStore(path)
    try:
        with pytest.raises(SchemaVersionError, match=rf"version {SCHEMA_VERSION + 1}.*upgrade"):
            await opened.get(key(1))
    finally:
        await opened.aclose()
    with sqlite_file(path) as raw:
        # Refused before anything was written.
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
        assert raw.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0


async def test_not_a_database(path: Path) -> None:
    _write(path, b"this is not SQLite" * 100)
    opened = SQLiteStore(path)
    try:
        with pytest.raises(StoreError, match="not a database"):
            await opened.get(key(1))
    finally:
        await opened.aclose()


async def test_missing_directory(tmp_path: Path) -> None:
    opened = SQLiteStore(tmp_path / "absent" / "decisions.db")
    try:
        with pytest.raises(StoreError, match="absent"):
            await opened.get(key(1))
    finally:
        await opened.aclose()


async def test_in_memory_database() -> None:
    async with SQLiteStore(":memory:") as opened:
        assert (await opened.add(key(1), b"v", None)).value == b"v"
        assert await opened.get(key(1)) == Entry(b"v", None)


def test_constructed_outside_a_loop(path: Path) -> None:
    opened = SQLiteStore(path)
    assert not path.exists()  # lazily opened

    async def use() -> Entry | None:
        await opened.add(key(1), b"v", None)
        try:
            return await opened.get(key(1))
        finally:
            await opened.aclose()

    assert asyncio.run(use()) == Entry(b"v", None)


async def test_async_with_opens_at_once(path: Path) -> None:
    async with SQLiteStore(path):
        assert _size(path) >= 0  # the file is there


async def test_closed_store_raises(store: SQLiteStore) -> None:
    await store.add(key(1), b"v", None)
    await store.aclose()
    with pytest.raises(StoreError, match="closed"):
        await store.get(key(1))
    with pytest.raises(StoreError, match="closed"):
        await store.add(key(2), b"v", None)


async def test_delete(store: SQLiteStore) -> None:
    await store.add(key(1), b"v", None)
    await store.delete(key(1))
    await store.delete(key(2))
    assert await store.get(key(1)) is None
    assert (await store.add(key(1), b"w", None)).value == b"w"


# -- URLs ------------------------------------------------------------------------------


def test_from_url_absolute(tmp_path: Path) -> None:
    opened = SQLiteStore.from_url(
        f"sqlite:///{tmp_path}/a.db?synchronous=full&busy_timeout=0.25"
        "&max_entries=10&max_bytes=1048576&prune_interval=5"
    )
    assert opened.path == f"{tmp_path}/a.db"
    assert opened.path.startswith("/")
    assert opened.synchronous == "FULL"
    assert opened.busy_timeout == 0.25
    assert opened.max_entries == 10
    assert opened.max_bytes == 1048576
    assert opened.prune_interval == 5.0


def test_from_url_relative_and_defaults() -> None:
    opened = SQLiteStore.from_url("sqlite:///cache/decisions.db?prune_interval=none")
    assert opened.path == "cache/decisions.db"
    assert opened.synchronous == "NORMAL"
    assert opened.max_entries is None
    assert opened.prune_interval is None


def test_open_store_dispatches(tmp_path: Path) -> None:
    opened = open_store(f"sqlite:///{tmp_path}/b.db?max_entries=3")
    assert isinstance(opened, SQLiteStore)
    assert opened.max_entries == 3


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite:///a.db?synchronous=OFF", "synchronous"),
        ("sqlite:///a.db?max_entries=lots", "not a number"),
        ("sqlite:///a.db?max_entries=0", "max_entries"),
        ("sqlite:///a.db?max_bytes=-1", "max_bytes"),
        ("sqlite:///a.db?busy_timeout=-1", "busy_timeout"),
        ("sqlite:///a.db?prune_interval=-5", "prune_interval"),
        ("sqlite:///a.db?cache_size=10", "unknown sqlite option"),
        ("sqlite:///a.db?max_entries=1&max_entries=2", "twice"),
        ("sqlite://host/a.db", "no host"),
        ("sqlite://", "without a path"),
        ("sqlite:///", "without a path"),
        ("postgres:///a.db", "not a sqlite URL"),
    ],
)
def test_bad_urls(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        SQLiteStore.from_url(url)


def test_bad_options(path: Path) -> None:
    with pytest.raises(ConfigurationError):
        SQLiteStore(path, max_entries=True)
    with pytest.raises(ConfigurationError):
        SQLiteStore(path, busy_timeout=float("nan"))
    with pytest.raises(ConfigurationError):
        SQLiteStore("")


# -- gathering -------------------------------------------------------------------------


async def test_concurrent_gets_are_batched(store: SQLiteStore) -> None:
    keys = [key(n) for n in range(64)]
    await store.add_many([(k, k[-1:] * 100, time.time() + HOUR) for k in keys])
    await store.get(key(999))  # opened, and a lone get is one query
    before = store.read_queries
    assert await store.get(key(0)) is not None
    assert store.read_queries == before + 1

    before = store.read_queries
    results = await asyncio.gather(*(store.get(k) for k in [*keys, key(1000)]))
    # The first get goes at once; the 64 that arrive while it is in flight go as one query.
    assert store.read_queries - before <= 2
    assert [e.value if e else None for e in results] == [k[-1:] * 100 for k in keys] + [None]


async def test_batched_gets_with_repeated_keys(store: SQLiteStore) -> None:
    await store.add_many([(key(n), str(n).encode(), None) for n in range(4)])
    before = store.read_queries
    results = await asyncio.gather(*(store.get(key(n % 5)) for n in range(100)))
    assert store.read_queries - before <= 2
    assert [e.value if e else None for e in results] == [
        str(n % 5).encode() if n % 5 < 4 else None for n in range(100)
    ]


async def test_concurrent_adds_are_one_statement(store: SQLiteStore) -> None:
    await store.count()
    before = store.write_queries
    winners = await asyncio.gather(
        *(store.add(key(n % 10), str(n).encode(), None) for n in range(50))
    )
    assert store.write_queries == before + 1
    assert [w.value for w in winners] == [str(n % 10).encode() for n in range(50)]


async def test_cancelled_batch_leader_does_not_strand_followers(store: SQLiteStore) -> None:
    keys = [key(n) for n in range(10)]
    await store.add_many([(k, k, None) for k in keys])
    tasks = [asyncio.create_task(store.get(k)) for k in keys]
    await asyncio.sleep(0)
    # tasks[0] went to the database at once; tasks[1] leads the batch of the rest.
    tasks[1].cancel()
    tasks[5].cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[1], asyncio.CancelledError)
    assert isinstance(results[5], asyncio.CancelledError)
    for n in (0, 2, 3, 4, 6, 7, 8, 9):
        assert results[n] == Entry(keys[n], None)


async def test_cancelled_add_leader_still_answers_followers(store: SQLiteStore) -> None:
    await store.count()
    tasks = [asyncio.create_task(store.add(key(n), b"v", None)) for n in range(5)]
    await asyncio.sleep(0)
    tasks[0].cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[0], asyncio.CancelledError)
    assert results[1:] == [Entry(b"v", None)] * 4


async def test_get_many_is_one_query(store: SQLiteStore) -> None:
    keys = [key(n) for n in range(300)]
    await store.add_many([(k, b"v", None) for k in keys[::2]])
    before = store.read_queries
    results = await store.get_many(keys)
    assert store.read_queries == before + 1
    assert [e is not None for e in results] == [n % 2 == 0 for n in range(300)]


async def test_large_batches_are_chunked(store: SQLiteStore) -> None:
    keys = [key(n) for n in range(10_000)]
    winners = await store.add_many([(k, k, None) for k in keys])
    assert [w.value for w in winners] == keys
    assert await store.count() == 10_000
    results = await store.get_many(keys)
    assert [e.value if e else None for e in results] == keys


# -- bounds and pruning ----------------------------------------------------------------


async def test_prune_deletes_expired(path: Path) -> None:
    async with SQLiteStore(path, prune_interval=None) as opened:
        now = time.time()
        await opened.add_many([(key(n), b"old", now - 1) for n in range(1200)])
        await opened.add(key(5000), b"live", now + HOUR)
        assert await opened.count() == 1201
        assert await opened.prune() == 1200
        assert await opened.count() == 1
        assert opened.stats()["pruned"] == 1200


async def test_eviction_order(path: Path) -> None:
    async with SQLiteStore(path, max_entries=5, prune_interval=None) as opened:
        now = time.time()
        for n in range(3):
            await opened.add(key(n), b"forever", None)
        for n in range(10, 16):
            await opened.add(key(n), b"expiring", now + HOUR + n)
        await opened.prune()
        # Soonest-expiring first.
        assert await _present(opened, range(20)) == [0, 1, 2, 14, 15]
        for n in range(3, 6):
            await opened.add(key(n), b"forever", None)
        await opened.prune()
        # Then entries without expiry, oldest first.
        assert await _present(opened, range(20)) == [1, 2, 3, 4, 5]
        assert opened.stats()["evicted"] == 7


async def test_max_bytes_bound(path: Path) -> None:
    bound = 256 * 1024
    async with SQLiteStore(path, max_bytes=bound, prune_interval=None) as opened:
        now = time.time()
        await opened.add_many([(key(n), os.urandom(1024), now + HOUR + n) for n in range(1000)])
        assert _used_bytes(path) > bound
        await opened.prune()
        assert _used_bytes(path) <= bound
        left = await opened.count()
        assert 0 < left < 1000
        # The newest (latest-expiring) entries are the ones kept.
        assert await _present(opened, range(1000 - left, 1000)) == list(range(1000 - left, 1000))


async def test_bounds_are_kept_in_the_background(path: Path) -> None:
    async with SQLiteStore(path, max_entries=10, prune_interval=HOUR) as opened:
        for n in range(50):
            await opened.add(key(n), b"v", time.time() + HOUR + n)
        await until(lambda: _count_is(opened, 10), "the store to hold 10 entries")
        assert await _present(opened, range(40, 50)) == list(range(40, 50))


async def test_expired_entries_are_pruned_in_the_background(path: Path) -> None:
    async with SQLiteStore(path, prune_interval=0.05) as opened:
        await opened.add_many([(key(n), b"brief", time.time() + 0.05) for n in range(5)])
        await opened.add(key(100), b"live", None)
        # The prune runs on a thread of its own: its count lands just after its deletes.
        await until(lambda: opened.stats()["pruned"] >= 5, "the prune to count 5 entries")
        assert await opened.count() == 1
        assert await opened.get(key(100)) == Entry(b"live", None)


def _checkpoint(path: Path) -> None:
    """Move the WAL into the file and empty it, from a connection of the test's own."""
    db = sqlite3.connect(path)
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()


async def test_clear_gives_space_back(path: Path, store: SQLiteStore) -> None:
    await store.add_many([(key(n), os.urandom(4096), None) for n in range(200)])
    await asyncio.to_thread(_checkpoint, path)
    full = _size(path)
    await store.clear()
    await asyncio.to_thread(_checkpoint, path)
    assert _size(path) < full / 10


# -- leases ----------------------------------------------------------------------------


async def test_leases(store: SQLiteStore) -> None:
    assert isinstance(store, LeaseStore)
    assert await store.acquire_lease(key(1), b"a", 10) is True
    assert await store.acquire_lease(key(1), b"b", 10) is False
    assert await store.acquire_lease(key(1), b"a", 10) is True  # the holder extends it
    await store.release_lease(key(1), b"b")  # not the holder: nothing happens
    assert await store.acquire_lease(key(1), b"b", 10) is False
    await store.release_lease(key(1), b"a")
    assert await store.acquire_lease(key(1), b"b", 10) is True


async def test_expired_lease_is_taken_over(store: SQLiteStore) -> None:
    assert await store.acquire_lease(key(1), b"a", 0.05) is True
    await asyncio.sleep(0.1)
    assert await store.acquire_lease(key(1), b"b", 10) is True


async def test_wait_for_entry(store: SQLiteStore) -> None:
    assert await store.acquire_lease(key(1), b"a", 10)

    async def compute() -> None:
        await asyncio.sleep(0.05)
        await store.add(key(1), b"decided", None)
        await store.release_lease(key(1), b"a")

    task = asyncio.create_task(compute())
    assert await store.wait_for_entry(key(1), 5) == Entry(b"decided", None)
    await task


async def test_wait_for_entry_gives_up(store: SQLiteStore) -> None:
    # No lease, no entry: nobody is computing it, so there is nothing to wait for.
    assert await asyncio.wait_for(store.wait_for_entry(key(1), 3600), 30) is None
    # A lease but no entry: wait until the timeout, then give up.
    assert await store.acquire_lease(key(2), b"a", 60)
    assert await asyncio.wait_for(store.wait_for_entry(key(2), 0.1), 30) is None
    # A lease that is released without an entry: stop waiting.
    waiter = asyncio.create_task(store.wait_for_entry(key(2), 3600))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    await store.release_lease(key(2), b"a")
    assert await asyncio.wait_for(waiter, 30) is None


# -- faults ----------------------------------------------------------------------------


async def test_exclusive_lock_fails_fast_and_recovers(path: Path, lock: LockFactory) -> None:
    locker = lock("exclusive")
    opened = SQLiteStore(path, busy_timeout=0.05)
    try:
        calls = [opened.get(key(1)) for _ in range(10)] + [opened.add(key(2), b"v", None)]
        results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 30)
        assert all(isinstance(r, StoreError) for r in results), results
        assert "locked" in str(results[0])
        locker.release()
        assert (await opened.add(key(2), b"v", None)).value == b"v"
        assert await opened.get(key(2)) == Entry(b"v", None)
    finally:
        await opened.aclose()


async def test_write_lock_fails_writes_not_reads(path: Path, lock: LockFactory) -> None:
    opened = SQLiteStore(path, busy_timeout=0.05)
    try:
        await opened.add(key(1), b"v", None)
        locker = lock("immediate")
        assert await asyncio.wait_for(opened.get(key(1)), 30) == Entry(b"v", None)
        with pytest.raises(StoreError, match="locked"):
            await asyncio.wait_for(opened.add(key(2), b"w", None), 30)
        with pytest.raises(StoreError, match="locked"):
            await asyncio.wait_for(opened.renew(key(1), None), 30)
        locker.release()
        assert (await opened.add(key(2), b"w", None)).value == b"w"
    finally:
        await opened.aclose()


async def test_cached_prediction_fails_open(path: Path, lock: LockFactory) -> None:
    locker = lock("exclusive")
    store = SQLiteStore(path, busy_timeout=0.05)
    calls = 0
    async with DecisionCache(store, fingerprint="double/1", ttl=HOUR) as cache:

        @cached_prediction(cache)
        async def double(x: int) -> int:
            nonlocal calls
            calls += 1
            return 2 * x

        assert await asyncio.wait_for(double(21), 30) == 42
        assert calls == 1
        assert cache.stats()["errors"] >= 1
        locker.release()
        assert await double(4) == 8
        assert await double(4) == 8
        assert calls == 2
        assert cache.stats()["hits"] >= 1
    assert await _count_in(path) == 1


# -- describe --------------------------------------------------------------------------


async def _fill(store: SQLiteStore) -> float:
    """Two live entries (one without expiry), one expired, one lease; returns now."""
    now = time.time()
    await store.add_many(
        [
            (key(1), b"x" * 100, now + HOUR),
            (key(2), b"x" * 100, None),
            (key(3), b"x" * 10, now - 60),
        ]
    )
    assert await store.acquire_lease(key(9), b"token", 60)
    return now


def _assert_filled(facts: dict[str, object], now: float) -> None:
    assert facts["schema_version"] == SCHEMA_VERSION
    assert (facts["entries"], facts["live"], facts["expired"]) == (3, 2, 1)
    assert facts["without_expiry"] == 1
    assert facts["stored_bytes"] == 210
    assert facts["leases"] == 1
    next_expiry = facts["next_expiry"]
    assert isinstance(next_expiry, float) and now < next_expiry <= now + HOUR + 1
    assert facts["last_expiry"] == next_expiry


async def test_describe_an_open_store(path: Path, store: SQLiteStore) -> None:
    now = await _fill(store)
    facts = await store.describe()
    _assert_filled(facts, now)
    assert (facts["kind"], facts["path"]) == ("sqlite", str(path))
    assert isinstance(facts["file_bytes"], int) and facts["file_bytes"] > 0


async def test_describe_reads_an_unopened_file_read_only(path: Path) -> None:
    async with SQLiteStore(path) as writer:
        now = await _fill(writer)
    before = _snapshot(path)
    reader = SQLiteStore(path, max_entries=10)
    try:
        facts = await reader.describe()
        _assert_filled(facts, now)
        assert facts["max_entries"] == 10
        assert _snapshot(path) == before  # nothing written, nothing pruned
    finally:
        await reader.aclose()


async def test_describe_an_empty_private_database() -> None:
    async with SQLiteStore(":memory:") as opened:
        await opened.add(key(1), b"v", None)
        facts = await opened.describe()
    assert (facts["entries"], facts["without_expiry"], facts["leases"]) == (1, 1, 0)
    assert facts["next_expiry"] is None
    assert "file_bytes" not in facts


async def test_describe_refuses_a_file_of_another_application(path: Path) -> None:
    with sqlite_file(path) as raw:
        raw.execute("CREATE TABLE other (x)")
    reader = SQLiteStore(path)
    try:
        with pytest.raises(StoreError, match="not an asyncache SQLite store"):
            await reader.describe()
    finally:
        await reader.aclose()
    with sqlite_file(path) as raw:  # and it was left as it was
        tables = {row[0] for row in raw.execute("SELECT name FROM sqlite_master")}
    assert tables == {"other"}


async def test_describe_through_a_tier(path: Path) -> None:
    from asyncache.stores import MemoryStore, TieredStore

    shared = SQLiteStore(path)
    async with TieredStore(MemoryStore(), shared) as tiered:
        now = await _fill(shared)
        await tiered.get(key(1))  # one copy in L1
        facts = await tiered.describe()
    _assert_filled(facts, now)
    assert (facts["kind"], facts["l2_kind"], facts["l1_ttl"]) == ("tiered", "sqlite", 60.0)
    l1 = facts["l1"]
    assert isinstance(l1, dict)
    assert (l1["kind"], l1["entries"], l1["stored_bytes"]) == ("memory", 1, 100)
    assert l1["resident_bytes"] > 100


async def test_describe_after_close_raises(store: SQLiteStore) -> None:
    await store.aclose()
    with pytest.raises(StoreError, match="closed"):
        await store.describe()


# -- helpers ---------------------------------------------------------------------------


async def _present(store: SQLiteStore, numbers: range) -> list[int]:
    entries = await store.get_many([key(n) for n in numbers])
    return [n for n, e in zip(numbers, entries, strict=True) if e is not None]


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _snapshot(path: Path) -> tuple[int, bytes]:
    return _mode(path), path.read_bytes()


def _size(path: Path) -> int:
    return os.stat(path).st_size


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def _used_bytes(path: Path) -> int:
    with sqlite_file(path) as raw:
        pages, free, size = raw.execute(
            "SELECT * FROM pragma_page_count(), pragma_freelist_count(), pragma_page_size()"
        ).fetchone()
    return int((pages - free) * size)


async def _count_is(store: SQLiteStore, n: int) -> bool:
    return await store.count() == n


async def _count_in(path: Path) -> int:
    async with SQLiteStore(path) as reopened:
        return await reopened.count()


async def test_a_drop_logged_before_the_log_is_first_read_still_reaches_a_subscriber(
    path: Path,
) -> None:
    # The reading starts after subscribing (it opens the file first); a delete another
    # process logs in between was taken as already seen, and its tier's copy outlived it.
    async with SQLiteStore(path) as writer:
        await writer.add(key(1), b"v", None)
        await writer.delete(key(9))  # the log exists, with a row before the subscriber's
        heard: list[bytes | None] = []

        async def invalidated(k: bytes | None) -> None:
            heard.append(k)

        reader = SQLiteStore(path)
        try:
            reader.subscribe_invalidations(invalidated)
            await writer.delete(key(1))  # before the reader's first look at the log
            await until(lambda: key(1) in heard, "the reader to hear the delete")
            assert key(9) not in heard
        finally:
            await reader.aclose()
