"""Shared fixtures: real redis-server processes on free loopback ports.

Without ``redis-server`` on PATH the redis fixtures skip, except under
``CI=true`` where they fail (``tests.support.require_binary``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from .conftest_models import minilm_int8, minilm_model_dir, minilm_onnx, minilm_torch  # noqa: F401
from .servers import RedisServer, start_cluster
from .support import require_binary

# Hypothesis' per-example deadline is an assertion on wall time: on a loaded
# 2-core machine an ordinary example can pass 200 ms and fail the run.
settings.register_profile("asyncache", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("asyncache")


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``redis://127.0.0.1:<port>`` of a redis-server shared by the session.

    Tests sharing it keep apart by using ``redis_prefix``.
    """
    server = RedisServer(require_binary("redis-server"), tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``redis+cluster://...`` of three cluster masters shared by the session."""
    server_binary = require_binary("redis-server")
    cli_binary = require_binary("redis-cli")
    cluster = start_cluster(server_binary, cli_binary, tmp_path_factory.mktemp("redis-cluster"))
    try:
        yield cluster.url
    finally:
        cluster.stop()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own, which it may ``kill()`` and ``restart()``."""
    server = RedisServer(require_binary("redis-server"), tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_prefix() -> str:
    """A key prefix no other test uses, for stores on the shared servers."""
    return f"asyncache-test:{uuid.uuid4().hex[:12]}:"
