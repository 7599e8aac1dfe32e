"""The OpenTelemetry adapter, read back through the SDK's in-memory exporter and reader."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from asyncache import DecisionCache, cached_prediction
from asyncache.adapters.otel import instrument


class Telemetry:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def instrument(self, cache: DecisionCache, **options: Any) -> Any:
        return instrument(
            cache,
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider,
            **options,
        )

    def metrics(self) -> dict[str, list[tuple[dict[str, Any], Any]]]:
        found: dict[str, list[tuple[dict[str, Any], Any]]] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        value = getattr(point, "value", None)
                        if value is None:
                            value = (point.count, point.sum)
                        found.setdefault(metric.name, []).append((dict(point.attributes), value))
        return found


@pytest.fixture
def telemetry() -> Telemetry:
    return Telemetry()


async def test_a_span_per_miss_with_outcome_waiters_and_compute_seconds(
    telemetry: Telemetry,
) -> None:
    cache = DecisionCache(namespace="triage")
    telemetry.instrument(cache)
    tracer = telemetry.tracer_provider.get_tracer("the-model")
    release = asyncio.Event()

    @cached_prediction(cache)
    async def classify(text: str) -> str:
        with tracer.start_as_current_span("model.forward"):
            await release.wait()
        return text.upper()

    callers = [asyncio.create_task(classify("refund")) for _ in range(5)]
    await asyncio.sleep(0.05)
    release.set()
    assert await asyncio.gather(*callers) == ["REFUND"] * 5
    assert await classify("refund") == "REFUND"  # a hit: no span

    spans = {span.name: span for span in telemetry.spans.get_finished_spans()}
    assert sorted(spans) == ["asyncache.miss", "model.forward"]
    miss = spans["asyncache.miss"]
    assert miss.attributes is not None
    assert miss.attributes["asyncache.namespace"] == "triage"
    assert miss.attributes["asyncache.outcome"] == "computed"
    assert miss.attributes["asyncache.coalesced_waiters"] == 4
    seconds = miss.attributes["asyncache.compute_seconds"]
    assert isinstance(seconds, float) and seconds > 0
    # The model's span is the miss span's child: the span was current while it ran.
    forward = spans["model.forward"]
    assert forward.parent is not None
    assert forward.parent.span_id == miss.context.span_id
    assert miss.status.status_code is StatusCode.UNSET


async def test_a_failed_miss_records_its_exception(telemetry: Telemetry) -> None:
    cache = DecisionCache()
    telemetry.instrument(cache, name="scoring")

    @cached_prediction(cache)
    async def score(x: int) -> int:
        raise ValueError(f"cannot score {x}")

    with pytest.raises(ValueError, match="cannot score 3"):
        await score(3)
    [span] = telemetry.spans.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes["asyncache.outcome"] == "error"
    assert span.attributes["asyncache.namespace"] == "scoring"
    assert span.status.status_code is StatusCode.ERROR
    assert [event.name for event in span.events] == ["exception"]
    assert "compute_seconds" not in "".join(span.attributes)


async def test_hit_and_miss_counters_and_the_compute_histogram(telemetry: Telemetry) -> None:
    cache = DecisionCache(namespace="sentiment")
    telemetry.instrument(cache)

    @cached_prediction(cache)
    async def sentiment(text: str) -> str:
        return "positive" if "good" in text else "negative"

    for text in ("good", "bad", "good", "good"):
        await sentiment(text)
    metrics = telemetry.metrics()
    labels = {"asyncache.namespace": "sentiment"}
    assert metrics["asyncache.hits"] == [(labels, 2)]
    assert metrics["asyncache.misses"] == [(labels, 2)]
    assert metrics["asyncache.stores"] == [(labels, 2)]
    assert metrics["asyncache.in_flight"] == [(labels, 0)]
    assert metrics["asyncache.hit_rate"] == [(labels, 0.5)]
    assert metrics["asyncache.lease_waits"] == [(labels, 0)]
    [(attributes, (count, total))] = metrics["asyncache.compute.duration"]
    assert attributes == labels
    assert count == 2 and total >= 0


async def test_trust_figures_are_exported(telemetry: Telemetry) -> None:
    cache = DecisionCache(namespace="trusted", audit_rate=1.0, max_wrong_rate=0.2, trust_window=20)
    telemetry.instrument(cache)

    @cached_prediction(cache, namespace="f")
    async def f(x: int) -> int:
        return x

    for _ in range(17):  # a miss, 14 doubted hits (cold) earning trust, 2 served hits
        await f(1)
    metrics = telemetry.metrics()
    labels = {"asyncache.namespace": "trusted"}
    assert metrics["asyncache.doubt_computes"] == [(labels, 14)]
    assert metrics["asyncache.verified_hits"] == [(labels, 2)]
    assert metrics["asyncache.breaches"] == [(labels, 0)]
    assert metrics["asyncache.wrong_rate_upper"] == [(labels, cache.trust()["f"].upper)]
    await cache.aclose()


async def test_instrumenting_twice_is_refused_and_uninstrument_stops_spans(
    telemetry: Telemetry,
) -> None:
    cache = DecisionCache()
    seen: list[float] = []
    cache.on_compute = seen.append  # another hook (Prometheus) keeps working
    otel = telemetry.instrument(cache)
    with pytest.raises(ValueError, match="already instrumented"):
        telemetry.instrument(cache)

    @cached_prediction(cache)
    async def f(x: int) -> int:
        return x

    await f(1)
    otel.uninstrument()
    await f(2)
    assert len(telemetry.spans.get_finished_spans()) == 1
    assert len(seen) == 2
    assert cache.on_compute == seen.append


async def test_the_freshness_counters_are_exported(telemetry: Telemetry) -> None:
    import asyncio

    cache = DecisionCache(namespace="fresh", ttl=0.1, stale_while_revalidate=60)
    telemetry.instrument(cache)

    @cached_prediction(cache)
    async def sentiment(text: str) -> str:
        return "positive"

    await sentiment("good")
    await asyncio.sleep(0.15)
    await sentiment("good")  # stale: served, one refresh
    while cache.stats()["in_flight"]:  # noqa: ASYNC110 - a counter, with no event
        await asyncio.sleep(0.005)
    metrics = telemetry.metrics()
    labels = {"asyncache.namespace": "fresh"}
    assert metrics["asyncache.stale_hits"] == [(labels, 1)]
    assert metrics["asyncache.refreshes"] == [(labels, 1)]
    for name in ("refresh_failures", "stale_if_error_hits", "error_hits", "passes"):
        assert metrics[f"asyncache.{name}"] == [(labels, 0)]
    await cache.aclose()
