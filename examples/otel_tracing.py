"""OpenTelemetry: a span per miss (the model's spans inside it) and hit/miss counters."""

import asyncio

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from asyncache import DecisionCache, cached_prediction
from asyncache.adapters.otel import instrument

# In a service: configure the SDK as usual (OTLP exporters...) and call instrument(cache);
# it uses the global providers. Here, in-memory ones, to print what was recorded.
spans = InMemorySpanExporter()
tracing = TracerProvider()
tracing.add_span_processor(SimpleSpanProcessor(spans))
reader = InMemoryMetricReader()
metering = MeterProvider(metric_readers=[reader])
model_tracer = tracing.get_tracer("my-model")


async def main() -> None:
    cache = DecisionCache(namespace="sentiment")
    instrument(cache, tracer_provider=tracing, meter_provider=metering)

    @cached_prediction(cache)
    async def sentiment(text: str) -> str:
        with model_tracer.start_as_current_span("model.forward"):
            await asyncio.sleep(0.02)
        return "positive" if "love" in text else "negative"

    # Three callers of one new text share one computation; the fourth call is a hit.
    await asyncio.gather(*(sentiment("I love it") for _ in range(3)))
    await sentiment("I love it")

    for span in spans.get_finished_spans():
        parent = span.parent.span_id if span.parent else None
        inside = " (inside asyncache.miss)" if parent else ""
        print(f"span {span.name}{inside}")
        if span.name == "asyncache.miss":
            attributes = dict(span.attributes or {})
            print(
                f"  outcome={attributes['asyncache.outcome']}",
                f"namespace={attributes['asyncache.namespace']}",
                f"coalesced_waiters={attributes['asyncache.coalesced_waiters']}",
                f"compute_seconds>0: {attributes['asyncache.compute_seconds'] > 0}",
            )
    for metric in reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics:
        if metric.name in ("asyncache.hits", "asyncache.misses"):
            print(metric.name, [point.value for point in metric.data.data_points])
    await cache.aclose()


asyncio.run(main())
