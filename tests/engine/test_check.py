"""``DecisionCache.check()``: one round trip to the store at startup, naming what failed;
and the health endpoint that runs it (``CacheStatsEndpoint(check=True)``).

On the real stores: memory, a SQLite file, a redis-server, and one that was killed.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from asyncache import DecisionCache, MemoryStore, StoreCheck
from asyncache.middleware import CacheStatsEndpoint
from asyncache.stores.redis import RedisStore
from asyncache.stores.sqlite import SQLiteStore

from ..servers import RedisServer
from .test_store_bugs import BrokenStore, type_error


async def test_a_memory_store_passes() -> None:
    cache = DecisionCache(MemoryStore())
    found = await cache.check()
    assert found and found.ok
    assert found.steps == ("write", "read", "delete")
    assert found.store == "MemoryStore"
    assert "write, read, delete ok" in found.message
    assert len(cache.store) == 0  # type: ignore[arg-type]  # the probe is gone
    assert cache.stats()["errors"] == 0 and cache.stats()["misses"] == 0


async def test_a_sqlite_store_passes_and_replay_only_reads(tmp_path: Path) -> None:
    path = tmp_path / "decisions.sqlite"
    async with DecisionCache(SQLiteStore(path)) as cache:
        found = await cache.check()
        assert found.ok, found.message
        assert found.steps == ("write", "read", "delete")
    async with DecisionCache(SQLiteStore(path), mode="replay") as cache:
        found = await cache.check()
        assert found.ok, found.message
        assert found.steps == ("read",)


async def test_replay_of_a_missing_file_names_the_read(tmp_path: Path) -> None:
    async with DecisionCache(SQLiteStore(tmp_path / "none.sqlite"), mode="replay") as cache:
        found = await cache.check()
    assert not found
    assert found.failed == "read" and found.steps == ()
    assert not (tmp_path / "none.sqlite").exists()  # replay created nothing


async def test_a_redis_store_passes_then_names_what_failed_once_killed(
    redis_server: RedisServer,
) -> None:
    store = RedisStore.from_url(
        f"{redis_server.url}?socket_connect_timeout=2&socket_timeout=2", prefix="check:"
    )
    async with DecisionCache(store, store_timeout=5.0) as cache:
        found = await cache.check()
        assert found.ok, found.message
        assert found.steps == ("write", "read", "delete")
        redis_server.kill()
        found = await cache.check()
        assert not found.ok
        assert found.failed == "write" and found.steps == ()
        assert found.error is not None and "StoreError" in found.error
        assert found.message.startswith("RedisStore: write failed: StoreError: redis:")


async def test_a_store_with_a_bug_is_named_not_raised() -> None:
    cache = DecisionCache(BrokenStore({"get"}, type_error))  # type: ignore[arg-type]
    found = await cache.check()
    assert found.failed == "read" and found.steps == ("write",)
    assert found.error == "TypeError: run_sync() got an unexpected keyword argument " + (
        "'abandon_on_cancel'"
    )


async def test_a_store_that_loses_writes_fails_the_read() -> None:
    cache = DecisionCache(BrokenStore({"add"}, lambda: AssertionError("unreachable")))  # type: ignore[arg-type]
    cache.store.add = _lost  # type: ignore[method-assign]
    found = await cache.check()
    assert found.failed == "read"
    assert found.error == "read back None, expected b'asyncache check'"


async def _lost(key: bytes, value: bytes, expires_at: float | None) -> None:
    return None  # a store that acknowledges a write it never made


@pytest.mark.parametrize("broken", [False, True])
async def test_the_health_endpoint_runs_the_check(broken: bool) -> None:
    store = BrokenStore({"add"} if broken else set(), type_error)
    cache = DecisionCache(store)  # type: ignore[arg-type]
    app = Starlette(routes=[Route("/health", CacheStatsEndpoint(cache, check=True))])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
        response = await client.get("/health")
    check = response.json()["check"]
    if broken:
        assert response.status_code == 503
        assert check["failed"] == "write" and check["error"].startswith("TypeError:")
    else:
        assert response.status_code == 200
        assert check["ok"] is True and check["steps"] == ["write", "read", "delete"]
    assert StoreCheck("x", ()).ok
