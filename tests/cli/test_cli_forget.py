"""``asyncache forget URL --tag T --scope S --namespace N --dry-run``: counts, drops, redacts."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from asyncache import DecisionCache, cached_prediction

from .test_cli import one_line_error, run


def _fill(url: str, namespace: str) -> None:
    """Six decisions: docs 1-3 for acme and globex, each tagged with its doc."""
    from asyncache import open_store

    async def fill() -> None:
        cache = DecisionCache(open_store(url), namespace=namespace)

        @cached_prediction(
            cache, scope=lambda doc, tenant: tenant, tags=lambda doc, t: [f"doc:{doc}"]
        )
        async def answer(doc: int, tenant: str) -> str:
            return f"{doc}/{tenant}"

        for doc in (1, 2, 3):
            for tenant in ("acme", "globex"):
                await answer(doc, tenant)
        await cache.aclose()

    asyncio.run(fill())


def test_forget_tags_and_a_scope_from_a_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cache.db'}"
    _fill(url, "app")
    dry = run("forget", url, "--tag", "doc:1", "--namespace", "app", "--dry-run", "--no-progress")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("would forget 2 entries with tag 'doc:1'")
    other = run("forget", url, "--tag", "doc:1", "--json")  # another namespace: nothing
    assert json.loads(other.stdout)["decisions"] == 0
    both = run("forget", url, "--tag", "doc:1", "--tag", "doc:2", "--namespace", "app")
    assert both.returncode == 0, both.stderr
    assert both.stdout.startswith("forgot 4 entries with tag 'doc:1' or tag 'doc:2'")
    assert "forgetting" in both.stderr  # the progress bar
    scope = run("forget", url, "--scope", "acme", "--namespace", "app", "--json")
    assert json.loads(scope.stdout)["decisions"] == 1
    stats = json.loads(run("stats", url, "--json").stdout)["store"]
    assert stats["entries"] == 1  # doc:3 of globex


def test_forget_on_redis(redis_url: str, redis_prefix: str) -> None:
    pytest.importorskip("redis")
    url = f"{redis_url}?prefix={redis_prefix}f:"
    _fill(url, "app")
    result = run("forget", url, "--tag", "doc:3", "--scope", "globex", "--namespace", "app")
    assert result.returncode == 0, result.stderr
    assert "forgot 4 entries" in result.stdout
    assert run("clear", url, "--yes").returncode == 0


def test_forget_needs_a_tag_or_a_scope(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cache.db'}"
    _fill(url, "app")
    assert "needs --tag" in one_line_error(run("forget", url))


def test_forget_redacts_the_url() -> None:
    result = run(
        "forget",
        "redis://user:hunter2@127.0.0.1:1/0?socket_connect_timeout=0.2",
        "--tag",
        "doc:1",
        "--no-progress",
    )
    assert "hunter2" not in one_line_error(result)
    assert "hunter2" not in result.stdout
