"""The DecisionStore contract, run against every store.

One class of tests parametrized by the ``store`` fixture: memory, SQLite,
memory in front of SQLite, Redis, Redis Cluster and memory in front of Redis.
Every test gets a fresh, empty store (its own file or its own key prefix).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from asyncache.stores import DecisionStore, Entry
from asyncache.stores.memory import MemoryStore
from asyncache.stores.tiered import TieredStore

from ..support import key, require

KINDS = ["memory", "sqlite", "tiered-sqlite", "redis", "redis-cluster", "tiered-redis"]
HOUR = 3600.0

Cleanup = Callable[[], Awaitable[None]]


def _redis_store(request: pytest.FixtureRequest, fixture: str) -> tuple[DecisionStore, Cleanup]:
    """A RedisStore under a prefix of its own on the session's server (or cluster)."""
    try:
        from asyncache.adapters.redis import RedisStore
    except ImportError as exc:
        require(False, f"RedisStore is not available: {exc}")
        raise
    try:
        url: str = request.getfixturevalue(fixture)
    except pytest.FixtureLookupError:
        require(False, f"the {fixture} fixture is not defined")
        raise
    prefix = f"asyncache-contract:{uuid.uuid4().hex}:"

    async def cleanup() -> None:
        # A store of its own: the test may have closed the one it was given.
        sweeper = RedisStore.from_url(url, prefix=prefix)
        try:
            await sweeper.clear()
        finally:
            await sweeper.aclose()

    return RedisStore.from_url(url, prefix=prefix), cleanup


async def _nothing() -> None:
    return None


def _make(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> tuple[DecisionStore, Cleanup]:
    from asyncache.adapters.sqlite import SQLiteStore

    if kind == "memory":
        return MemoryStore(), _nothing
    if kind == "sqlite":
        return SQLiteStore(tmp_path / "contract.db"), _nothing
    if kind == "tiered-sqlite":
        return TieredStore(MemoryStore(), SQLiteStore(tmp_path / "contract.db")), _nothing
    if kind == "redis":
        return _redis_store(request, "redis_url")
    if kind == "redis-cluster":
        return _redis_store(request, "redis_cluster_url")
    if kind == "tiered-redis":
        l2, cleanup = _redis_store(request, "redis_url")
        return TieredStore(MemoryStore(), l2), cleanup
    raise AssertionError(kind)


@pytest.fixture(params=KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[DecisionStore]:
    made, cleanup = _make(request.param, request, tmp_path)
    try:
        yield made
    finally:
        await made.aclose()
        await cleanup()


class TestStoreContract:
    async def test_is_a_decision_store(self, store: DecisionStore) -> None:
        assert isinstance(store, DecisionStore)

    async def test_starts_empty(self, store: DecisionStore) -> None:
        assert await store.count() == 0
        assert await store.get(key(1)) is None

    async def test_add_then_get(self, store: DecisionStore) -> None:
        expires_at = time.time() + HOUR
        added = await store.add(key(1), b"decision", expires_at)
        assert added == Entry(b"decision", expires_at)  # expiries round-trip exactly
        got = await store.get(key(1))
        assert got is not None
        assert got.value == b"decision"
        assert got.expires_at == expires_at

    async def test_entry_without_expiry(self, store: DecisionStore) -> None:
        assert await store.add(key(1), b"forever", None) == Entry(b"forever", None)
        assert await store.get(key(1)) == Entry(b"forever", None)

    async def test_first_add_wins(self, store: DecisionStore) -> None:
        expires_at = time.time() + HOUR
        first = await store.add(key(1), b"first", expires_at)
        second = await store.add(key(1), b"second", expires_at + 10)
        assert first.value == second.value == b"first"
        assert second.expires_at == expires_at
        got = await store.get(key(1))
        assert got is not None and got.value == b"first"

    async def test_keys_are_distinct(self, store: DecisionStore) -> None:
        await store.add(key(1), b"one", None)
        await store.add(key(2), b"two", None)
        assert await store.get(key(1)) == Entry(b"one", None)
        assert await store.get(key(2)) == Entry(b"two", None)

    async def test_expired_entry_is_not_returned_and_is_replaced(
        self, store: DecisionStore
    ) -> None:
        await store.add(key(1), b"stale", time.time() - 1)
        assert await store.get(key(1)) is None
        assert await store.get_many([key(1)]) == [None]
        fresh = await store.add(key(1), b"fresh", time.time() + HOUR)
        assert fresh.value == b"fresh"
        got = await store.get(key(1))
        assert got is not None and got.value == b"fresh"

    async def test_entry_expires(self, store: DecisionStore) -> None:
        expires_at = time.time() + 0.5
        await store.add(key(1), b"brief", expires_at)
        got = await store.get(key(1))
        assert got is not None and got.value == b"brief"
        await asyncio.sleep(max(0.0, expires_at - time.time()) + 0.05)
        assert await store.get(key(1)) is None
        replaced = await store.add(key(1), b"next", time.time() + HOUR)
        assert replaced.value == b"next"

    async def test_renew_live_entry(self, store: DecisionStore) -> None:
        await store.add(key(1), b"v", time.time() + HOUR)
        later = time.time() + 2 * HOUR
        assert await store.renew(key(1), later) is True
        got = await store.get(key(1))
        assert got is not None
        assert got.value == b"v"
        assert got.expires_at == later
        assert await store.renew(key(1), None) is True
        assert await store.get(key(1)) == Entry(b"v", None)

    async def test_renew_into_the_past_expires(self, store: DecisionStore) -> None:
        await store.add(key(1), b"v", time.time() + HOUR)
        await store.get(key(1))  # a tier now holds a copy too
        assert await store.renew(key(1), time.time() - 1) is True
        assert await store.get(key(1)) is None

    async def test_renew_missing_or_expired(self, store: DecisionStore) -> None:
        assert await store.renew(key(1), time.time() + HOUR) is False
        await store.add(key(2), b"stale", time.time() - 1)
        assert await store.renew(key(2), time.time() + HOUR) is False
        assert await store.get(key(2)) is None

    async def test_prune_keeps_live_entries(self, store: DecisionStore) -> None:
        now = time.time()
        for n in range(3):
            await store.add(key(n), b"stale", now - 1)
        await store.add(key(10), b"live", now + HOUR)
        await store.add(key(11), b"forever", None)
        pruned = await store.prune()
        assert pruned >= 0
        assert await store.count() == 2
        assert await store.get_many([key(10), key(11), key(0)]) == [
            Entry(b"live", now + HOUR),
            Entry(b"forever", None),
            None,
        ]

    async def test_count_and_clear(self, store: DecisionStore) -> None:
        for n in range(5):
            await store.add(key(n), b"v", time.time() + HOUR)
        assert await store.count() == 5
        await store.clear()
        assert await store.count() == 0
        assert await store.get(key(0)) is None
        assert await store.get_many([key(1), key(2)]) == [None, None]
        again = await store.add(key(0), b"after", None)
        assert again.value == b"after"
        assert await store.count() == 1

    async def test_get_many_keeps_order(self, store: DecisionStore) -> None:
        await store.add(key(1), b"one", None)
        await store.add(key(3), b"three", None)
        got = await store.get_many([key(3), key(2), key(1), key(3)])
        assert got == [
            Entry(b"three", None),
            None,
            Entry(b"one", None),
            Entry(b"three", None),
        ]
        assert await store.get_many([]) == []

    async def test_add_many_returns_winners(self, store: DecisionStore) -> None:
        expires_at = time.time() + HOUR
        await store.add(key(1), b"first", expires_at)
        winners = await store.add_many(
            [
                (key(1), b"late", expires_at),
                (key(2), b"two", expires_at),
                (key(2), b"two-again", expires_at),
                (key(3), b"three", None),
            ]
        )
        assert [w.value for w in winners] == [b"first", b"two", b"two", b"three"]
        assert winners[3].expires_at is None
        assert await store.get_many([key(1), key(2), key(3)]) == winners[:2] + winners[3:]
        assert await store.add_many([]) == []

    async def test_add_many_replaces_expired(self, store: DecisionStore) -> None:
        await store.add(key(1), b"stale", time.time() - 1)
        [winner] = await store.add_many([(key(1), b"fresh", None)])
        assert winner == Entry(b"fresh", None)

    @pytest.mark.parametrize(
        "value",
        [b"", bytes(range(256)), bytes(range(256))[::-1] * 4, os.urandom(1024 * 1024)],
        ids=["empty", "all-bytes", "all-bytes-reversed", "1MiB"],
    )
    async def test_values_are_exact_bytes(self, store: DecisionStore, value: bytes) -> None:
        k = bytes(range(240, 256))  # high bytes, and NUL-free keys elsewhere
        added = await store.add(k, value, None)
        assert added.value == value
        got = await store.get(k)
        assert got is not None and got.value == value
        [many] = await store.get_many([k])
        assert many is not None and many.value == value
        assert type(got.value) is bytes

    async def test_keys_are_exact_bytes(self, store: DecisionStore) -> None:
        keys = [bytes(16), b"\xff" * 16, bytes(range(16)), b"*?[]\\" + bytes(11)]
        for n, k in enumerate(keys):
            await store.add(k, str(n).encode(), None)
        assert [e.value if e else None for e in await store.get_many(keys)] == [
            b"0",
            b"1",
            b"2",
            b"3",
        ]
        assert await store.count() == len(keys)

    async def test_concurrent_adds_agree(self, store: DecisionStore) -> None:
        keys = [key(n) for n in range(20)]
        expires_at = time.time() + HOUR
        rng = random.Random(7)

        async def task(t: int) -> dict[bytes, bytes]:
            mine = rng.sample(keys, 10)
            seen: dict[bytes, bytes] = {}
            for k in mine:
                if rng.random() < 0.3:
                    await asyncio.sleep(0)
                # What the engine does: look, and on a miss compute and add.
                winner = await store.get(k)
                if winner is None:
                    winner = await store.add(k, f"task-{t}".encode(), expires_at)
                seen[k] = winner.value
            return seen

        results = await asyncio.gather(*(task(t) for t in range(200)))
        stored = dict(zip(keys, await store.get_many(keys), strict=True))
        answered: dict[bytes, set[bytes]] = {}
        for seen in results:
            for k, value in seen.items():
                answered.setdefault(k, set()).add(value)
        for k in keys:
            entry = stored[k]
            assert entry is not None
            assert answered[k] == {entry.value}
            assert entry.value.startswith(b"task-")

    async def test_concurrent_adds_without_looking(self, store: DecisionStore) -> None:
        keys = [key(n) for n in range(50)]

        async def task(t: int) -> list[bytes]:
            order = random.Random(t).sample(keys, len(keys))
            winners = {}
            for k in order:
                winners[k] = (await store.add(k, f"task-{t}".encode(), None)).value
            return [winners[k] for k in keys]

        results = await asyncio.gather(*(task(t) for t in range(200)))
        stored = [e.value if e else None for e in await store.get_many(keys)]
        assert all(result == stored for result in results)
        assert await store.count() == len(keys)

    async def test_aclose_twice(self, store: DecisionStore) -> None:
        await store.add(key(1), b"v", None)
        await store.aclose()
        await store.aclose()
