"""Tag indexes expire with their decisions: no index rows or members outlive them.

SQLite: ``prune`` deletes the index rows of expired decisions (and old
tombstones). Redis and Redis Cluster: an index's members are trimmed as it is
written, and the index itself expires with its latest decision.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from pathlib import Path

import pytest

from asyncache.tags import TOMBSTONE_SECONDS, Tagging, tag_label, tagging

from ..support import GENEROUS_REDIS_TIMEOUTS, require

SHORT = 3.0
"""Seconds a short-lived decision lives."""


def _key(n: int) -> bytes:
    return n.to_bytes(16, "big")


def _tags(*keys: bytes) -> dict[bytes, Tagging]:
    return {key: Tagging("ns", source=lambda: ["doc:1", "all"]) for key in keys}


async def test_sqlite_prune_leaves_no_index_rows(tmp_path: Path) -> None:
    from asyncache.stores.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "tags.db", prune_interval=None)
    try:
        with tagging(_tags(_key(1), _key(2))):
            await store.add(_key(1), b"short", time.time() + 0.2)
            await store.add(_key(2), b"long", time.time() + 3600)
        await store.forget([tag_label("ns", "other")])
        read = store._database.read
        assert (await read("SELECT count(*) FROM asyncache_tags", ()))[0][0] == 4
        await asyncio.sleep(0.3)
        assert await store.prune() == 1
        rows = await read("SELECT key FROM asyncache_tags", ())
        assert sorted(rows) == [(_key(2),), (_key(2),)]
        # Tombstones go once no computation could still be running from before them.
        await store._tags.prune(time.time() + TOMBSTONE_SECONDS + 10)
        assert (await read("SELECT count(*) FROM asyncache_forgotten", ()))[0][0] == 0
    finally:
        await store.aclose()


@pytest.mark.parametrize("fixture", ["redis_url", "redis_cluster_url"])
async def test_redis_indexes_expire_with_their_decisions(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    try:
        from asyncache.stores.redis import RedisStore
    except ImportError as exc:
        require(False, f"RedisStore is not available: {exc}")
        raise
    url = request.getfixturevalue(fixture)
    prefix = f"asyncache-tags:{uuid.uuid4().hex}:"
    store = RedisStore.from_url(f"{url}?{GENEROUS_REDIS_TIMEOUTS}", prefix=prefix)
    client = store.client

    async def names() -> list[bytes]:
        return sorted([name async for name in client.scan_iter(match=f"{prefix}tags:*")])

    try:
        # Lifetimes far longer than a loaded machine takes between two commands.
        short = time.time() + SHORT
        with tagging(_tags(_key(1))):
            await store.add(_key(1), b"short", short)
        found = await names()
        assert len(found) == 2  # doc:1 and all
        for name in found:  # each index expires when its one decision does
            assert await client.pexpiretime(name) == math.ceil(short * 1000)
        await asyncio.sleep(SHORT + 0.5)
        assert await names() == []
        with tagging(_tags(_key(2), _key(3))):
            await store.add(_key(2), b"short", time.time() + SHORT)
            await store.add(_key(3), b"long", time.time() + 3600)
        await asyncio.sleep(SHORT + 0.5)
        with tagging(_tags(_key(4))):
            await store.add(_key(4), b"later", time.time() + 3600)
        members = set()
        for name in await names():
            members |= set(await client.zrange(name, 0, -1))
            assert 0 < await client.pttl(name) <= 3600 * 1000
        assert members == {_key(3), _key(4)}  # the expired one was trimmed
        assert await store.count() == 2  # indexes are not entries
        assert len([e async for batch in store.entries() for e in batch]) == 2
    finally:
        await store.clear()
        await store.aclose()


async def test_a_cluster_index_lives_in_the_slot_of_the_decisions_it_lists(
    redis_cluster_url: str,
) -> None:
    try:
        from asyncache.stores.redis import RedisStore
    except ImportError as exc:
        require(False, f"RedisStore is not available: {exc}")
        raise
    prefix = f"asyncache-slots:{uuid.uuid4().hex}:"
    store = RedisStore.from_url(f"{redis_cluster_url}?{GENEROUS_REDIS_TIMEOUTS}", prefix=prefix)
    client = store.client
    try:
        keys = [_key(n) for n in range(64)]  # spread over many slots
        with tagging(_tags(*keys)):
            await asyncio.gather(*(store.add(key, b"v", None) for key in keys))
        indexes = [name async for name in client.scan_iter(match=f"{prefix}tags:*")]
        assert len(indexes) == 2 * len({client.keyslot(prefix.encode() + k) for k in keys})
        for name in indexes:
            slot = client.keyslot(name)
            for member in await client.zrange(name, 0, -1):
                assert client.keyslot(prefix.encode() + member) == slot
    finally:
        await store.clear()
        await store.aclose()
