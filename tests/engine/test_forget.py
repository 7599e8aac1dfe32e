"""``cache.forget`` through the decorator's doors, the modes, and the counters.

Tags come from ``tags=`` (sync or async; per item with ``batch=True``; on
streams too), a scope is always forgettable, a computation that began before
a forget stores nothing after it, replay refuses to forget and record does,
and a store without the capability is named in the error.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from asyncache import DecisionCache, MemoryStore, ReplayRefused, cached_prediction
from asyncache.tags import MARGIN


def _documents(cache: DecisionCache, computed: list[Any], *, async_tags: bool = False) -> Any:
    async def tags_async(doc: int, tenant: str) -> list[str]:
        await asyncio.sleep(0)
        return [f"doc:{doc}"]

    @cached_prediction(
        cache,
        scope=lambda doc, tenant: tenant,
        tags=tags_async if async_tags else (lambda doc, tenant: [f"doc:{doc}"]),
    )
    async def classify(doc: int, tenant: str) -> str:
        computed.append((doc, tenant))
        return f"label of {doc}"

    return classify


@pytest.mark.parametrize("async_tags", [False, True])
async def test_forget_a_tag_then_a_scope(async_tags: bool) -> None:
    computed: list[Any] = []
    cache = DecisionCache(MemoryStore(), namespace="docs")
    classify = _documents(cache, computed, async_tags=async_tags)
    for doc in (42, 7):
        for tenant in ("acme", "globex"):
            await classify(doc, tenant)
    assert await cache.forget(tags=["doc:42"]) == 2
    assert await cache.forget(scope="acme") == 1  # doc:7 of acme; its doc:42 is gone already
    await asyncio.sleep(MARGIN)
    computed.clear()
    for doc in (42, 7):
        for tenant in ("acme", "globex"):
            await classify(doc, tenant)
    assert sorted(computed) == [(7, "acme"), (42, "acme"), (42, "globex")]
    assert cache.stats()["forgotten"] == 3


async def test_tags_and_scope_together_drop_either() -> None:
    computed: list[Any] = []
    cache = DecisionCache(MemoryStore(), namespace="docs")
    classify = _documents(cache, computed)
    for doc, tenant in ((1, "acme"), (2, "globex"), (3, "globex")):
        await classify(doc, tenant)
    assert await cache.forget(tags=["doc:2"], scope="acme") == 2
    assert await cache.forget(tags=["doc:3"], dry_run=True) == 1
    assert cache.stats()["forgotten"] == 2


async def test_a_computation_that_began_before_the_forget_stores_nothing() -> None:
    started = asyncio.Event()
    release = asyncio.Event()
    cache = DecisionCache(MemoryStore(), namespace="docs")

    @cached_prediction(cache, tags=lambda doc: [f"doc:{doc}"])
    async def slow(doc: int) -> str:
        started.set()
        await release.wait()
        return f"old reading of {doc}"

    flight = asyncio.create_task(slow(42))
    await started.wait()
    assert await cache.forget(tags=["doc:42"]) == 0  # nothing stored yet
    release.set()
    assert await flight == "old reading of 42"  # its caller still gets it
    assert await cache.store.get(slow.key(42)) is None  # but it was not stored


async def test_batch_tags_take_one_item() -> None:
    cache = DecisionCache(MemoryStore(), namespace="docs")
    runs: list[list[int]] = []

    @cached_prediction(cache, batch=True, tags=lambda item: [f"item:{item % 2}"])
    async def double(items: list[int]) -> list[int]:
        runs.append(items)
        return [item * 2 for item in items]

    assert await double.many([1, 2, 3, 4]) == [2, 4, 6, 8]
    assert await double(5) == 10
    assert await cache.forget(tags=["item:1"]) == 3
    await asyncio.sleep(MARGIN)
    runs.clear()
    assert await double.many([1, 2, 3, 4, 5]) == [2, 4, 6, 8, 10]
    assert runs == [[1, 3, 5]]


async def test_streams_carry_their_tags() -> None:
    cache = DecisionCache(MemoryStore(), namespace="docs")
    runs: list[int] = []

    @cached_prediction(cache, tags=lambda doc: [f"doc:{doc}"])
    async def tokens(doc: int) -> AsyncIterator[str]:
        runs.append(doc)
        for word in ("a", "b"):
            yield f"{word}{doc}"

    assert [chunk async for chunk in tokens(1)] == ["a1", "b1"]
    assert [chunk async for chunk in tokens(2)] == ["a2", "b2"]
    assert [chunk async for chunk in tokens(1)] == ["a1", "b1"]
    assert runs == [1, 2]
    assert await cache.forget(tags=["doc:1"]) == 1
    await asyncio.sleep(MARGIN)
    assert [chunk async for chunk in tokens(1)] == ["a1", "b1"]
    assert [chunk async for chunk in tokens(2)] == ["a2", "b2"]
    assert runs == [1, 2, 1]


async def test_the_tag_function_is_not_called_on_a_hit() -> None:
    cache = DecisionCache(MemoryStore(), namespace="docs")
    asked: list[int] = []

    def tags(doc: int) -> list[str]:
        asked.append(doc)
        return [f"doc:{doc}"]

    @cached_prediction(cache, tags=tags)
    async def read(doc: int) -> int:
        return doc

    for _ in range(3):
        await read(1)
    assert asked == [1]


async def test_a_tag_that_is_not_a_string_is_an_error() -> None:
    cache = DecisionCache(MemoryStore(), namespace="docs")
    with pytest.raises(TypeError, match="iterable of tags"):
        await cache.forget(tags="doc:1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="non-empty str"):
        await cache.forget(tags=[42])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="needs tags"):
        await cache.forget()


async def test_replay_refuses_to_forget_and_record_forgets(tmp_path: Any) -> None:
    from asyncache.stores.sqlite import SQLiteStore

    path = tmp_path / "recording.db"
    recording = DecisionCache(SQLiteStore(path), mode="record", namespace="docs")
    computed: list[Any] = []
    classify = _documents(recording, computed)
    await classify(1, "acme")
    await classify(2, "acme")
    assert await recording.forget(tags=["doc:1"]) == 1
    await recording.aclose()

    replaying = DecisionCache(SQLiteStore(path), mode="replay", namespace="docs")
    try:
        with pytest.raises(ReplayRefused, match="replay never writes"):
            await replaying.forget(tags=["doc:2"])
        assert await replaying.forget(tags=["doc:2"], dry_run=True) == 1
        assert await _documents(replaying, computed)(2, "acme") == "label of 2"
    finally:
        await replaying.aclose()


class _ThirdPartyStore:
    """A store written before forgetting: the protocol's methods only."""

    def __init__(self) -> None:
        self._memory = MemoryStore()

    def __getattr__(self, name: str) -> Any:
        if name in (
            "get",
            "get_many",
            "add",
            "add_many",
            "renew",
            "prune",
            "count",
            "clear",
            "aclose",
        ):
            return getattr(self._memory, name)
        raise AttributeError(name)


async def test_a_store_without_forget_is_named() -> None:
    cache = DecisionCache(_ThirdPartyStore(), namespace="docs")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="_ThirdPartyStore cannot forget"):
        await cache.forget(tags=["doc:1"])


async def test_a_tier_over_a_store_without_forget_is_named() -> None:
    from asyncache.stores import TieredStore

    tiered = TieredStore(MemoryStore(), _ThirdPartyStore())  # type: ignore[arg-type]
    cache = DecisionCache(tiered, namespace="docs")
    with pytest.raises(TypeError, match="_ThirdPartyStore cannot forget"):
        await cache.forget(tags=["doc:1"])


async def test_tombstones_and_indexes_of_a_memory_store_go_with_their_entries() -> None:
    store = MemoryStore()
    cache = DecisionCache(store, namespace="docs", ttl=0.2)
    computed: list[Any] = []
    classify = _documents(cache, computed)
    await classify(1, "acme")
    assert store._index and store._labels_of
    await asyncio.sleep(0.3)
    await store.prune()
    assert not store._index and not store._labels_of
    assert await cache.forget(tags=["doc:1"]) == 0


async def test_the_forgotten_counter_reaches_prometheus_and_opentelemetry() -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from asyncache.adapters import otel, prometheus

    cache = DecisionCache(MemoryStore(), namespace="docs")
    registry = prometheus_client.CollectorRegistry()
    prometheus.instrument(cache, registry=registry)
    reader = InMemoryMetricReader()
    otel.instrument(cache, meter_provider=MeterProvider(metric_readers=[reader]))
    await _documents(cache, [])(1, "acme")
    assert await cache.forget(scope="acme") == 1
    assert registry.get_sample_value("asyncache_forgotten_total", {"namespace": "docs"}) == 1
    points = [
        point.value
        for resource in reader.get_metrics_data().resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "asyncache.forgotten"
        for point in metric.data.data_points
    ]
    assert points == [1]
