"""Prometheus metrics: every ``cache.stats()`` counter and a compute-time histogram.

``instrument(cache)`` registers the cache with a collector that reads
``cache.stats()`` when Prometheus scrapes, so counting costs the hit path
nothing; only the compute-time histogram is observed as it happens, once per
model call (a miss is already milliseconds; an observation is a microsecond).
Every series carries a ``namespace`` label naming the cache::

    asyncache_hits_total{namespace="sentiment"} 1520.0
    asyncache_compute_seconds_bucket{namespace="sentiment",le="0.05"} 31.0
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Histogram
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "asyncache.adapters.prometheus needs: pip install 'asyncache-ml[prometheus]'"
    ) from exc

from ..cache import DecisionCache
from ..stats import COUNTER_MEANINGS

__all__ = ["DEFAULT_BUCKETS", "PrometheusMetrics", "instrument"]

DEFAULT_BUCKETS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
"""Compute-time buckets in seconds: from a small ONNX model on CPU to a large batch on GPU."""

# stats() fields that go up and down; everything else numeric only grows (until reset_stats).
_GAUGES = frozenset({"in_flight", "hit_rate", "wrong_rate_upper"})

_HELP = COUNTER_MEANINGS


class PrometheusMetrics:
    """Exports the caches added to it into one Prometheus registry.

    Args:
        registry: where the metrics are registered; the global default registry
            when omitted.
        prefix: the metric names' prefix.
        buckets: the compute-time histogram's buckets, in seconds.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        prefix: str = "asyncache",
        buckets: Sequence[float] = DEFAULT_BUCKETS,
    ) -> None:
        self.registry = REGISTRY if registry is None else registry
        self.prefix = prefix
        self._caches: dict[str, weakref.ref[DecisionCache]] = {}
        self._hooks: dict[str, tuple[Callable[[float], None] | None, Callable[[float], None]]] = {}
        self._lock = threading.Lock()
        self.compute_seconds = Histogram(
            f"{prefix}_compute_seconds",
            "Seconds each model call took on a miss (a batch is one call).",
            ["namespace"],
            registry=self.registry,
            buckets=tuple(buckets),
        )
        self.registry.register(self)

    def add(self, cache: DecisionCache, *, name: str | None = None) -> None:
        """Export ``cache`` under ``namespace=name`` (its namespace, or ``"default"``).

        Raises:
            ValueError: another cache is already exported under that name.
        """
        label = name or cache.namespace or "default"
        with self._lock:
            known = self._caches.get(label)
            if known is not None and known() is not None:
                raise ValueError(f"a cache is already exported as namespace={label!r}")
            self._caches[label] = weakref.ref(cache)
        previous = cache.on_compute
        observe: Callable[[float], None] = self.compute_seconds.labels(label).observe
        if previous is None:
            cache.on_compute = observe
        else:
            first = previous

            def both(seconds: float) -> None:
                first(seconds)
                observe(seconds)

            cache.on_compute = both
        self._hooks[label] = (previous, cache.on_compute)

    def remove(self, cache: DecisionCache) -> None:
        """Stop exporting ``cache`` and stop observing its compute time."""
        with self._lock:
            for label, ref in list(self._caches.items()):
                if ref() is cache:
                    del self._caches[label]
                    previous, installed = self._hooks.pop(label)
                    if cache.on_compute is installed:
                        cache.on_compute = previous

    def describe(self) -> list[Any]:
        """Nothing up front: the series depend on the caches added later."""
        return []

    def collect(self) -> Iterator[Any]:
        """Read every cache's ``stats()`` (called by the registry at scrape time)."""
        with self._lock:
            caches = [(label, ref()) for label, ref in self._caches.items()]
        families: dict[str, Any] = {}
        for label, cache in caches:
            if cache is None:
                continue
            for field, value in cache.stats().items():
                if field == "store" and isinstance(value, dict):
                    for name, number in value.items():
                        self._sample(families, f"store_{name}", number, label, gauge=True)
                else:
                    self._sample(families, field, value, label, gauge=field in _GAUGES)
        yield from families.values()

    def _sample(
        self, families: dict[str, Any], field: str, value: Any, label: str, *, gauge: bool
    ) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return
        family = families.get(field)
        if family is None:
            name = f"{self.prefix}_{field}"
            doc = _HELP.get(field, f"asyncache {field.replace('_', ' ')}.")
            kind = GaugeMetricFamily if gauge else CounterMetricFamily
            family = families[field] = kind(name, doc, labels=["namespace"])
        family.add_metric([label], float(value))


_DEFAULTS: weakref.WeakKeyDictionary[Any, PrometheusMetrics] = weakref.WeakKeyDictionary()
_DEFAULTS_LOCK = threading.Lock()


def instrument(
    cache: DecisionCache, *, name: str | None = None, registry: CollectorRegistry | None = None
) -> PrometheusMetrics:
    """Export ``cache`` to Prometheus under ``namespace=name``; returns the exporter.

    One exporter is kept per registry, so any number of caches can be
    instrumented into the same registry.

    Args:
        cache: the cache to export.
        name: the ``namespace`` label; the cache's namespace (or ``"default"``).
        registry: the global default registry when omitted.

    Raises:
        ValueError: another cache is already exported under that name.
    """
    target = REGISTRY if registry is None else registry
    with _DEFAULTS_LOCK:
        metrics = _DEFAULTS.get(target)
        if metrics is None:
            metrics = _DEFAULTS[target] = PrometheusMetrics(target)
    metrics.add(cache, name=name)
    return metrics
