"""OpenTelemetry: a span per miss, and the cache's counters, through the OpenTelemetry API.

``instrument(cache)`` hooks one cache in:

- **A span per miss**, ``asyncache.miss``, around the one computation of a
  missed key (its flight), current while the model runs, so the model's own
  spans are its children. Attributes: ``asyncache.namespace``,
  ``asyncache.outcome`` (``computed``, ``unshared``, ``error``,
  ``cancelled``), ``asyncache.compute_seconds`` (the model call's seconds)
  and ``asyncache.coalesced_waiters`` (callers that waited on it instead of
  computing). A failed computation records its exception and an error status.
  Hits open no span: a hit is microseconds, and a span would cost more.
- **Counters**, read from ``cache.stats()`` when the metrics are collected
  (observable instruments, so counting costs the hit path nothing):
  ``asyncache.hits``, ``asyncache.misses`` and every other numeric field,
  each with the ``asyncache.namespace`` attribute (``in_flight`` and
  ``hit_rate`` as gauges); and the ``asyncache.compute.duration`` histogram
  (seconds per model call; a batch is one call).

Only the API is used: the application configures the SDK (exporters,
sampling) as for any other library, or passes providers explicitly.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from typing import Any

try:
    from opentelemetry import context, metrics, trace
    from opentelemetry.metrics import CallbackOptions, Observation
    from opentelemetry.trace import Span, Status, StatusCode
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("asyncache.adapters.otel needs: pip install 'asyncache-ml[otel]'") from exc

from .. import __version__
from ..cache import DecisionCache
from ..stats import COUNTER_MEANINGS

__all__ = ["GAUGES", "OpenTelemetryInstrumentation", "instrument"]

logger = logging.getLogger("asyncache")

GAUGES = frozenset({"in_flight", "hit_rate", "wrong_rate_upper"})
"""``stats()`` fields that go up and down; every other numeric one only grows."""

# The span of the flight running in this task, for on_compute to annotate.
_FLIGHT: ContextVar[Span | None] = ContextVar("asyncache_otel_flight", default=None)


class OpenTelemetryInstrumentation:
    """The spans and instruments of one cache; made by ``instrument``.

    Args:
        cache: the cache to observe.
        name: the ``asyncache.namespace`` attribute; the cache's namespace
            (or ``"default"``) when omitted.
        tracer_provider: the global one when omitted.
        meter_provider: the global one when omitted.

    Raises:
        ValueError: the cache is already instrumented.
    """

    def __init__(
        self,
        cache: DecisionCache,
        *,
        name: str | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        if cache.engine.observer is not None:
            raise ValueError(f"{cache!r} is already instrumented")
        self.namespace = name or cache.namespace or "default"
        self.attributes = {"asyncache.namespace": self.namespace}
        self.tracer = trace.get_tracer("asyncache", __version__, tracer_provider=tracer_provider)
        meter = metrics.get_meter("asyncache", __version__, meter_provider=meter_provider)
        self._cache = weakref.ref(cache)
        for field, value in cache.stats().items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue  # the store's own counters (a dict) are not exported here
            make = (
                meter.create_observable_gauge
                if field in GAUGES
                else meter.create_observable_counter
            )
            make(
                f"asyncache.{field}",
                callbacks=[self._reader(field)],
                unit="s" if field.endswith("seconds") or field.endswith("seconds_saved") else "1",
                description=COUNTER_MEANINGS.get(field, f"asyncache {field.replace('_', ' ')}."),
            )
        self.compute_duration = meter.create_histogram(
            "asyncache.compute.duration",
            unit="s",
            description="Seconds each model call took on a miss (a batch is one call).",
        )
        self._previous = cache.on_compute
        cache.on_compute = self._computed
        cache.engine.observer = self

    def uninstrument(self) -> None:
        """Stop opening spans and recording compute time (the counters stop with the cache)."""
        cache = self._cache()
        if cache is not None and cache.engine.observer is self:
            cache.engine.observer = None
            if cache.on_compute == self._computed:
                cache.on_compute = self._previous

    # -- the engine's FlightObserver ---------------------------------------------

    def start(self) -> Any:
        """Open the miss span and make it current for the flight's task."""
        try:
            span = self.tracer.start_span("asyncache.miss", attributes=self.attributes)
            attached = context.attach(trace.set_span_in_context(span))
            return span, attached, _FLIGHT.set(span)
        except Exception:  # the cache never fails a prediction over telemetry
            logger.exception("asyncache: could not start an OpenTelemetry span")
            return None

    def end(self, token: Any, outcome: str, waiters: int, error: BaseException | None) -> None:
        """Close the miss span with the flight's outcome and waiters."""
        if token is None:
            return
        span, attached, flight = token
        try:
            span.set_attribute("asyncache.outcome", outcome)
            span.set_attribute("asyncache.coalesced_waiters", waiters)
            if error is not None:
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            _FLIGHT.reset(flight)
            context.detach(attached)
        except Exception:
            logger.exception("asyncache: could not end an OpenTelemetry span")
        finally:
            span.end()

    # -- hooks -------------------------------------------------------------------

    def _computed(self, seconds: float) -> None:
        if self._previous is not None:
            self._previous(seconds)
        self.compute_duration.record(seconds, self.attributes)
        span = _FLIGHT.get()
        if span is not None:
            span.set_attribute("asyncache.compute_seconds", seconds)

    def _reader(self, field: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def read(options: CallbackOptions) -> Iterable[Observation]:
            cache = self._cache()
            if cache is None:
                return []
            value = cache.stats().get(field, 0)
            return [Observation(value, self.attributes)]

        return read


def instrument(
    cache: DecisionCache,
    *,
    name: str | None = None,
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
) -> OpenTelemetryInstrumentation:
    """Trace ``cache``'s misses and export its counters through OpenTelemetry.

    Args:
        cache: the cache to observe.
        name: the ``asyncache.namespace`` attribute (the cache's namespace, or
            ``"default"``).
        tracer_provider: where spans go; the global provider when omitted.
        meter_provider: where the instruments live; the global provider when omitted.

    Raises:
        ValueError: the cache is already instrumented.
    """
    return OpenTelemetryInstrumentation(
        cache, name=name, tracer_provider=tracer_provider, meter_provider=meter_provider
    )
