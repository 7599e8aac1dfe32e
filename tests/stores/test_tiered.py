"""TieredStore beyond the contract: what L1 holds, for how long, and what reaches L2."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from asyncache import DecisionCache, cached_prediction
from asyncache.errors import StoreError
from asyncache.stores import Entry, open_store
from asyncache.stores.memory import MemoryStore
from asyncache.stores.sqlite import SQLiteStore
from asyncache.stores.tiered import TieredStore

from ..support import key

HOUR = 3600.0


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "shared.db"


@pytest.fixture
async def shared(path: Path) -> AsyncIterator[SQLiteStore]:
    """The L2 of the tier under test, which the test may also read and write directly."""
    l2 = SQLiteStore(path)
    try:
        yield l2
    finally:
        await l2.aclose()


@pytest.fixture
async def tier(shared: SQLiteStore) -> AsyncIterator[TieredStore]:
    store = TieredStore(MemoryStore(), shared, l1_ttl=60.0)
    try:
        yield store
    finally:
        await store.aclose()


async def test_hit_in_l1_skips_l2(tier: TieredStore, shared: SQLiteStore) -> None:
    await shared.add(key(1), b"v", time.time() + HOUR)
    before = shared.read_queries
    first = await tier.get(key(1))
    second = await tier.get(key(1))
    assert first == second
    assert first is not None and first.value == b"v"
    assert shared.read_queries == before + 1
    assert await tier.get(key(2)) is None
    stats = tier.stats()
    assert (stats["l1_hits"], stats["l2_hits"], stats["misses"]) == (1, 1, 1)


async def test_l1_copy_keeps_l2_expiry(tier: TieredStore, shared: SQLiteStore) -> None:
    expires_at = time.time() + HOUR
    await shared.add(key(1), b"v", expires_at)
    for _ in range(2):  # from L2, then from L1
        entry = await tier.get(key(1))
        assert entry is not None
        assert entry.expires_at == pytest.approx(expires_at)
    copy = tier.l1.get_now(key(1))
    assert copy is not None
    assert copy.expires_at is not None
    assert copy.expires_at <= time.time() + 60.0


async def test_l1_copy_never_outlives_l2(tier: TieredStore, shared: SQLiteStore) -> None:
    expires_at = time.time() + 10.0
    await shared.add(key(1), b"v", expires_at)
    await tier.get(key(1))
    copy = tier.l1.get_now(key(1))
    assert copy is not None
    assert copy.expires_at == pytest.approx(expires_at)


async def test_no_l1_ttl_keeps_entries_as_long_as_l2(shared: SQLiteStore) -> None:
    async with TieredStore(MemoryStore(), shared, l1_ttl=None) as store:
        await shared.add(key(1), b"forever", None)
        assert await store.get(key(1)) == Entry(b"forever", None)
        copy = store.l1.get_now(key(1))
        assert copy is not None and copy.expires_at is None


async def test_other_process_clear_reaches_within_l1_ttl(path: Path) -> None:
    # Two tiers over one file stand for two processes.
    here = TieredStore(MemoryStore(), SQLiteStore(path), l1_ttl=0.2)
    there = TieredStore(MemoryStore(), SQLiteStore(path), l1_ttl=0.2)
    try:
        await here.add(key(1), b"v", time.time() + HOUR)
        assert here.l1.get_now(key(1)) is not None  # a copy that "there" cannot reach
        await there.clear()
        await asyncio.sleep(0.25)
        # Once l1_ttl has passed, the clear is seen here too.
        assert await here.get(key(1)) is None
        assert here.stats()["misses"] == 1
    finally:
        await here.aclose()
        await there.aclose()


async def test_add_winner_goes_to_l1(path: Path) -> None:
    here = TieredStore(MemoryStore(), SQLiteStore(path))
    there = TieredStore(MemoryStore(), SQLiteStore(path))
    try:
        assert (await here.add(key(1), b"here", None)).value == b"here"
        assert (await there.add(key(1), b"there", None)).value == b"here"
        copy = there.l1.get_now(key(1))
        assert copy is not None and copy.value == b"here"
        assert await there.get(key(1)) == Entry(b"here", None)
        assert there.stats()["l1_hits"] == 1
    finally:
        await here.aclose()
        await there.aclose()


async def test_expired_winner_is_not_copied(tier: TieredStore) -> None:
    await tier.add(key(1), b"stale", time.time() - 1)
    assert tier.l1.get_now(key(1)) is None
    assert await tier.get(key(1)) is None


async def test_get_many_reads_only_l1_misses_from_l2(
    tier: TieredStore, shared: SQLiteStore
) -> None:
    await shared.add_many([(key(n), str(n).encode(), None) for n in range(4)])
    await tier.get(key(0))
    await tier.get(key(2))
    before = shared.read_queries
    results = await tier.get_many([key(n) for n in range(5)])
    assert shared.read_queries == before + 1  # one query, for keys 1, 3 and 4
    assert [e.value if e else None for e in results] == [b"0", b"1", b"2", b"3", None]
    before = shared.read_queries
    await tier.get_many([key(1), key(3)])
    assert shared.read_queries == before  # now both in L1
    stats = tier.stats()
    assert (stats["l1_hits"], stats["l2_hits"], stats["misses"]) == (4, 4, 1)


async def test_add_many_copies_winners(tier: TieredStore, shared: SQLiteStore) -> None:
    await shared.add(key(1), b"first", None)
    winners = await tier.add_many([(key(1), b"late", None), (key(2), b"two", None)])
    assert [w.value for w in winners] == [b"first", b"two"]
    before = shared.read_queries
    assert [e.value if e else None for e in await tier.get_many([key(1), key(2)])] == [
        b"first",
        b"two",
    ]
    assert shared.read_queries == before


async def test_renew_updates_both(tier: TieredStore, shared: SQLiteStore) -> None:
    await tier.add(key(1), b"v", time.time() + HOUR)
    later = time.time() + 2 * HOUR
    assert await tier.renew(key(1), later) is True
    entry = await tier.get(key(1))
    assert entry is not None and entry.expires_at == pytest.approx(later)
    from_l2 = await shared.get(key(1))
    assert from_l2 is not None and from_l2.expires_at == pytest.approx(later)


async def test_renew_of_missing_drops_l1_copy(tier: TieredStore, shared: SQLiteStore) -> None:
    await tier.add(key(1), b"v", time.time() + HOUR)
    await shared.delete(key(1))  # as another process would
    assert await tier.renew(key(1), time.time() + HOUR) is False
    assert tier.l1.get_now(key(1)) is None


async def test_delete_clear_and_prune_reach_both(tier: TieredStore, shared: SQLiteStore) -> None:
    await tier.add(key(1), b"v", None)
    await tier.delete(key(1))
    assert tier.l1.get_now(key(1)) is None
    assert await shared.get(key(1)) is None

    await tier.add(key(2), b"v", None)
    await tier.clear()
    assert len(tier.l1) == 0
    assert await shared.count() == 0

    await tier.add(key(3), b"brief", time.time() + 0.05)
    await asyncio.sleep(0.1)
    assert await tier.prune() == 1
    assert len(tier.l1) == 0
    assert await shared.count() == 0


async def test_count_is_l2s(tier: TieredStore, shared: SQLiteStore) -> None:
    await shared.add_many([(key(n), b"v", None) for n in range(3)])
    await tier.get(key(0))
    assert await tier.count() == 3


async def test_l1_serves_hits_while_l2_fails(tier: TieredStore, shared: SQLiteStore) -> None:
    await tier.add(key(1), b"v", None)
    await shared.aclose()  # L2 now fails every call
    assert await tier.get(key(1)) == Entry(b"v", None)
    with pytest.raises(StoreError):
        await tier.get(key(2))


async def test_stats_include_l2s(tier: TieredStore) -> None:
    await tier.get(key(1))
    stats = tier.stats()
    assert stats["misses"] == 1
    assert stats["l2_read_queries"] == 1


def test_bad_l1_ttl(path: Path) -> None:
    with pytest.raises(ValueError, match="l1_ttl"):
        TieredStore(MemoryStore(), SQLiteStore(path), l1_ttl=0)


def test_open_store_tiered(tmp_path: Path) -> None:
    store = open_store(
        f"tiered+sqlite:///{tmp_path}/t.db?l1_max_entries=10&l1_ttl=5&max_entries=99"
    )
    assert isinstance(store, TieredStore)
    assert store.l1.max_entries == 10
    assert store.l1_ttl == 5.0
    assert isinstance(store.l2, SQLiteStore)
    assert store.l2.path == f"{tmp_path}/t.db"
    assert store.l2.max_entries == 99
    default = open_store("tiered+sqlite:///relative.db")
    assert isinstance(default, TieredStore)
    assert default.l1_ttl == 60.0
    assert isinstance(default.l2, SQLiteStore) and default.l2.path == "relative.db"


async def test_peek_answers_from_l1_only_and_the_engine_hits_without_awaiting_l2(
    tmp_path: Path,
) -> None:
    tier = TieredStore(MemoryStore(), SQLiteStore(tmp_path / "peek.sqlite"))
    cache = DecisionCache(tier)
    runs: list[str] = []

    @cached_prediction(cache)
    async def predict(text: str) -> str:
        runs.append(text)
        return text.upper()

    try:
        key = predict.key("a")
        assert tier.peek(key) is None  # nothing anywhere: peek never reaches L2
        assert await predict("a") == "A"
        assert tier.peek(key) is not None
        hits_before = tier.stats()["l1_hits"]
        # A repeated hit is answered synchronously from L1: no coroutine, no L2 read.
        assert cache.hit_now(key) == "A"
        assert tier.stats()["l1_hits"] == hits_before + 1
        assert tier.stats()["l2_hits"] == 0
        await tier.l1.clear()
        assert tier.peek(key) is None
        assert await predict("a") == "A"  # L1 empty: the engine falls back to L2
        assert tier.stats()["l2_hits"] == 1
        assert runs == ["a"]
    finally:
        await cache.aclose()
