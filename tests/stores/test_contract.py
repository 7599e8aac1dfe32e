"""The store contract of ``asyncache.testing``, run against every store of the project.

One subclass of ``StoreContract`` per store: memory, SQLite, memory in front
of SQLite, Redis, Redis Cluster and memory in front of Redis; the stores with
leases (SQLite, Redis, Redis Cluster) subclass ``LeaseStoreContract`` too, and
every one ``EntryScanContract`` (the walk ``asyncache copy`` uses).
These are the tests a third-party store runs (docs/stores.md, "Writing your own
store"). Every test gets a fresh, empty store (its own file or its own key prefix).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import ClassVar

import pytest

from asyncache.stores import DecisionStore
from asyncache.stores.memory import MemoryStore
from asyncache.stores.tiered import TieredStore
from asyncache.testing import (
    EntryScanContract,
    ForgetContract,
    LeaseStoreContract,
    StoreContract,
)

from ..support import GENEROUS_REDIS_TIMEOUTS, require

Cleanup = Callable[[], Awaitable[None]]


def _redis_store(request: pytest.FixtureRequest, fixture: str) -> tuple[DecisionStore, Cleanup]:
    """A RedisStore under a prefix of its own on the session's server (or cluster)."""
    try:
        from asyncache.stores.redis import RedisStore
    except ImportError as exc:
        require(False, f"RedisStore is not available: {exc}")
        raise
    try:
        url: str = request.getfixturevalue(fixture)
    except pytest.FixtureLookupError:
        require(False, f"the {fixture} fixture is not defined")
        raise
    prefix = f"asyncache-contract:{uuid.uuid4().hex}:"
    url = f"{url}?{GENEROUS_REDIS_TIMEOUTS}"

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
    from asyncache.stores.sqlite import SQLiteStore

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


@asynccontextmanager
async def store_of(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[DecisionStore]:
    """A fresh store of ``kind`` (``memory``, ``sqlite``, ``redis``...), closed and swept after."""
    made, cleanup = _make(kind, request, tmp_path)
    try:
        yield made
    finally:
        await made.aclose()
        await cleanup()


class ProjectStore:
    """Gives the contract its ``store``: a fresh one of ``kind``, closed and swept after."""

    kind: ClassVar[str]

    @pytest.fixture
    async def store(
        self, request: pytest.FixtureRequest, tmp_path: Path
    ) -> AsyncIterator[DecisionStore]:
        async with store_of(self.kind, request, tmp_path) as made:
            yield made


class TestMemoryStore(ProjectStore, StoreContract, EntryScanContract, ForgetContract):
    kind = "memory"


class TestSQLiteStore(
    ProjectStore, StoreContract, EntryScanContract, ForgetContract, LeaseStoreContract
):
    kind = "sqlite"


class TestTieredSQLiteStore(ProjectStore, StoreContract, EntryScanContract, ForgetContract):
    kind = "tiered-sqlite"


@pytest.mark.engines  # on redis-server and on Valkey (tests/conftest.py)
class TestRedisStore(
    ProjectStore, StoreContract, EntryScanContract, ForgetContract, LeaseStoreContract
):
    kind = "redis"


@pytest.mark.engines  # on redis-server and on Valkey (tests/conftest.py)
class TestRedisClusterStore(
    ProjectStore, StoreContract, EntryScanContract, ForgetContract, LeaseStoreContract
):
    kind = "redis-cluster"


@pytest.mark.engines  # on redis-server and on Valkey (tests/conftest.py)
class TestTieredRedisStore(ProjectStore, StoreContract, EntryScanContract, ForgetContract):
    kind = "tiered-redis"
