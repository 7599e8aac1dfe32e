"""The Prometheus exporter, scraped over HTTP and parsed like Prometheus would."""

from __future__ import annotations

import gc
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from asyncache import DecisionCache, cached_prediction, open_store

from ..support import free_port

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from asyncache.adapters.prometheus import PrometheusMetrics, instrument  # noqa: E402


@pytest.fixture
def registry() -> Any:
    return prometheus_client.CollectorRegistry()


@pytest.fixture
def scrape(registry: Any) -> Iterator[Any]:
    """Scrape ``registry`` from a real HTTP exporter: ``{(metric, namespace): value}``."""
    port = free_port()
    server, thread = prometheus_client.start_http_server(port, addr="127.0.0.1", registry=registry)

    def read() -> dict[tuple[str, str], float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
        samples: dict[tuple[str, str], float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                label = sample.labels.get("namespace")
                if label is None:
                    continue
                name = sample.name
                if "le" in sample.labels:
                    name += f"[le={sample.labels['le']}]"
                samples[(name, label)] = sample.value
        return samples

    yield read
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def _cached(cache: DecisionCache, runs: list[int]) -> Any:
    @cached_prediction(cache, namespace="f")
    async def f(x: int) -> int:
        runs.append(x)
        return x * 2

    return f


async def test_every_counter_and_the_histogram_are_exported(registry: Any, scrape: Any) -> None:
    runs: list[int] = []
    async with DecisionCache(namespace="sentiment") as a, DecisionCache(namespace="spam") as b:
        instrument(a, registry=registry)
        instrument(b, registry=registry)
        fa, fb = _cached(a, runs), _cached(b, runs)
        for x in (1, 1, 1, 2):
            await fa(x)
        await fb(5)
        samples = scrape()
        assert samples[("asyncache_hits_total", "sentiment")] == 2
        assert samples[("asyncache_misses_total", "sentiment")] == 2
        assert samples[("asyncache_stores_total", "sentiment")] == 2
        assert samples[("asyncache_hits_total", "spam")] == 0
        assert samples[("asyncache_misses_total", "spam")] == 1
        assert samples[("asyncache_hit_rate", "sentiment")] == 0.5
        assert samples[("asyncache_in_flight", "sentiment")] == 0
        assert samples[("asyncache_compute_seconds_count", "sentiment")] == 2
        assert samples[("asyncache_compute_seconds_count", "spam")] == 1
        assert samples[("asyncache_compute_seconds_bucket[le=+Inf]", "sentiment")] == 2
        # Every numeric stats() field is there, for both caches.
        for field, value in a.stats().items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                gauges = ("hit_rate", "in_flight", "wrong_rate_upper")
                name = field if field in gauges else f"{field}_total"
                assert (f"asyncache_{name}", "sentiment") in samples, field
        # Scrapes read stats() when they happen.
        await fa(1)
        assert scrape()[("asyncache_hits_total", "sentiment")] == 3


async def test_trust_figures_are_exported(registry: Any, scrape: Any) -> None:
    async with DecisionCache(
        namespace="trusted", audit_rate=1.0, max_wrong_rate=0.2, trust_window=20
    ) as cache:
        instrument(cache, registry=registry)
        f = _cached(cache, [])
        await f(1)
        for _ in range(16):  # doubted (cold), until 14 agreeing audits earn trust
            await f(1)
        samples = scrape()
        assert samples[("asyncache_doubt_computes_total", "trusted")] == 14
        assert samples[("asyncache_verified_hits_total", "trusted")] == 2
        assert samples[("asyncache_breaches_total", "trusted")] == 0
        assert samples[("asyncache_repairs_total", "trusted")] == 0
        upper = cache.trust()["f"].upper
        assert 0 < upper <= 0.2
        assert samples[("asyncache_wrong_rate_upper", "trusted")] == upper


async def test_store_stats_are_gauges(registry: Any, scrape: Any, tmp_path: Path) -> None:
    async with DecisionCache(open_store(f"sqlite:///{tmp_path / 'm.db'}")) as cache:
        instrument(cache, name="scored", registry=registry)
        await _cached(cache, [])(1)
        samples = scrape()
        store_fields = {name for name, label in samples if name.startswith("asyncache_store_")}
        assert store_fields == {f"asyncache_store_{k}" for k in cache.stats()["store"]}


async def test_names_are_unique_and_caches_can_leave(registry: Any, scrape: Any) -> None:
    metrics = PrometheusMetrics(registry, prefix="svc")
    cache = DecisionCache()
    metrics.add(cache, name="one")
    with pytest.raises(ValueError, match="already exported"):
        metrics.add(DecisionCache(), name="one")
    await _cached(cache, [])(1)
    assert scrape()[("svc_misses_total", "one")] == 1
    metrics.remove(cache)
    assert cache.on_compute is None
    assert ("svc_misses_total", "one") not in scrape()
    # A cache that is gone is simply no longer exported.
    other = DecisionCache()
    metrics.add(other, name="two")
    assert ("svc_misses_total", "two") in scrape()
    del other
    gc.collect()
    assert ("svc_misses_total", "two") not in scrape()
    await cache.aclose()


async def test_an_existing_compute_hook_is_kept(registry: Any) -> None:
    seen: list[float] = []
    cache = DecisionCache(namespace="kept")
    cache.on_compute = seen.append
    instrument(cache, registry=registry)
    await _cached(cache, [])(3)
    assert len(seen) == 1
    await cache.aclose()


async def test_the_freshness_counters_are_exported(registry: Any, scrape: Any) -> None:
    import asyncio

    cache = DecisionCache(ttl=0.1, stale_while_revalidate=60, namespace="fresh")
    instrument(cache, registry=registry, name="fresh")
    runs: list[int] = []
    f = _cached(cache, runs)
    await f(1)
    await asyncio.sleep(0.15)
    await f(1)  # stale: served, one refresh
    while cache.stats()["in_flight"]:  # noqa: ASYNC110 - a counter, with no event
        await asyncio.sleep(0.005)
    samples = scrape()
    assert samples[("asyncache_stale_hits_total", "fresh")] == 1
    assert samples[("asyncache_refreshes_total", "fresh")] == 1
    for name in ("refresh_failures", "stale_if_error_hits", "error_hits", "passes"):
        assert samples[(f"asyncache_{name}_total", "fresh")] == 0
    await cache.aclose()
