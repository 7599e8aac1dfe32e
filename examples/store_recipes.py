"""Opening each store (the snippets of docs/stores.md), and the shape of a store of your own.

Nothing here talks to a server: a RedisStore connects on its first command,
so building one names where it will connect and nothing more.
"""

import asyncio

from asyncache import open_store
from asyncache.stores import DecisionStore


async def main() -> None:
    # --8<-- [start:memory]
    from asyncache import MemoryStore

    store = MemoryStore(max_entries=100_000, max_bytes=256 * 1024 * 1024)
    # --8<-- [end:memory]
    print("memory:", store.max_entries, store.max_bytes)
    await store.aclose()

    # --8<-- [start:sqlite]
    from asyncache.stores.sqlite import SQLiteStore

    store = SQLiteStore("decisions.sqlite", max_entries=1_000_000)
    # or: open_store("sqlite:///decisions.sqlite?max_entries=1000000")
    # --8<-- [end:sqlite]
    same = open_store("sqlite:///decisions.sqlite?max_entries=1000000")
    print("sqlite:", type(same).__name__, store.max_entries == same.max_entries)
    await asyncio.gather(store.aclose(), same.aclose())

    # --8<-- [start:check]
    from asyncache import DecisionCache
    from asyncache.stores.sqlite import SQLiteStore

    cache = DecisionCache(SQLiteStore("decisions.sqlite"))
    found = await cache.check()  # at startup: write, read back and delete a probe key
    if not found:  # e.g. "RedisStore: write failed: StoreError: redis: ConnectionError: ..."
        raise SystemExit(found.message)
    # --8<-- [end:check]
    print("check:", found.steps, found.ok)
    await cache.aclose()

    # --8<-- [start:redis]
    from asyncache.stores.redis import RedisStore

    store = RedisStore.from_url("redis://cache.internal:6379/0", prefix="myapp:")
    # or: open_store("rediss://:password@cache.internal:6380/0?prefix=myapp:")
    # --8<-- [end:redis]
    print("redis:", store.prefix, store.cluster)
    await store.aclose()

    # --8<-- [start:cluster]
    from asyncache.stores.redis import RedisStore

    store = RedisStore.from_url("redis+cluster://10.0.0.1:7000,10.0.0.2:7000", prefix="myapp:")
    # --8<-- [end:cluster]
    print("cluster:", store.prefix, store.cluster)
    await store.aclose()

    # --8<-- [start:tiered]
    from asyncache import MemoryStore
    from asyncache.stores.sqlite import SQLiteStore
    from asyncache.stores.tiered import TieredStore

    store = TieredStore(MemoryStore(max_entries=10_000), SQLiteStore("decisions.sqlite"), l1_ttl=60)
    # or: open_store("tiered+redis://cache.internal:6379/0?l1_max_entries=10000&l1_ttl=60")
    # --8<-- [end:tiered]
    print("tiered:", type(store.l2).__name__, store.l1.max_entries, store.l1_ttl)
    await store.aclose()

    # A store of your own only needs these ten methods (see DictStore below).
    store = DictStore()
    print("a DecisionStore:", isinstance(store, DecisionStore))
    async with DecisionCache(store) as cache:
        for _ in range(2):
            await cache.get_or_compute(cache.key("hello"), lambda: asyncio.sleep(0, "hi"))
        print("hits:", cache.stats()["hits"], "entries:", await store.count())


# --8<-- [start:protocol]
import time
from collections.abc import Sequence

from asyncache import Entry


class DictStore:  # the DecisionStore protocol, on a dict
    def __init__(self) -> None:
        self.data: dict[bytes, Entry] = {}

    async def get(self, key: bytes) -> Entry | None:
        entry = self.data.get(key)
        live = entry is not None and (entry.expires_at is None or entry.expires_at > time.time())
        return entry if live else None

    async def get_many(self, keys: Sequence[bytes]) -> list[Entry | None]:
        return [await self.get(key) for key in keys]

    async def add(self, key: bytes, value: bytes, expires_at: float | None) -> Entry:
        # The one rule: a live entry stays, and is returned. The first decision wins.
        existing = await self.get(key)
        if existing is not None:
            return existing
        self.data[key] = Entry(value, expires_at)
        return self.data[key]

    async def add_many(self, items: Sequence[tuple[bytes, bytes, float | None]]) -> list[Entry]:
        return [await self.add(key, value, expires_at) for key, value, expires_at in items]

    async def renew(self, key: bytes, expires_at: float | None) -> bool:
        entry = await self.get(key)
        if entry is not None:
            self.data[key] = Entry(entry.value, expires_at)
        return entry is not None

    async def delete(self, key: bytes) -> None:  # corrupt entries, mode="record"
        self.data.pop(key, None)

    async def prune(self) -> int:
        expired = [key for key in self.data if await self.get(key) is None]
        for key in expired:
            del self.data[key]
        return len(expired)

    async def count(self) -> int:
        return len(self.data)

    async def clear(self) -> None:
        self.data.clear()

    async def aclose(self) -> None:
        pass


# --8<-- [end:protocol]


asyncio.run(main())
