"""Counters a cache keeps about itself, and a bounded-rate logger for failures.

What each ``cache.stats()`` counter means: the help text of every metrics exporter.
"""

from __future__ import annotations

import logging
import time
from typing import Any

__all__ = ["COUNTER_MEANINGS", "CacheStats", "RateLimitedLog"]

COUNTER_MEANINGS: dict[str, str] = {
    "hits": "Lookups answered from the store.",
    "misses": "Lookups that found no usable decision.",
    "coalesced": "Misses that waited for a computation already running in this process.",
    "stores": "Decisions this cache added to the store.",
    "conflicts": "Adds where another writer's decision won.",
    "bypassed": "Calls that skipped the cache (disabled).",
    "not_admitted": "Results not stored because of ttl <= 0 or the admit hook.",
    "too_large": (
        "Results not stored because they exceeded max_entry_bytes or would inflate "
        "past max_decoded_bytes."
    ),
    "unencodable": "Results not stored because the codec cannot encode them.",
    "errors": "Store calls that failed or timed out.",
    "renewals": "Expiries pushed out on hits.",
    "corrupt": "Stored values that failed to decode (deleted).",
    "coalesce_timeouts": "Waiters that gave up on a flight or lease and computed themselves.",
    "lease_waits": "Misses that waited for another process's lease.",
    "lease_takeovers": "Leases taken over after their owner went away without a decision.",
    "lease_wait_seconds": "Seconds spent waiting on other processes' leases.",
    "audits": "Sampled hits recomputed and compared.",
    "audit_agreed": "Audits where the fresh decision agreed with the stored one.",
    "audit_mismatched": "Audits where the fresh decision disagreed with the stored one.",
    "audits_dropped": "Sampled hits not audited because audit_concurrency was reached.",
    "audit_errors": "Audits whose recomputation failed.",
    "repairs": "Stored decisions an audit or a doubt computation disagreed with, replaced.",
    "verified_hits": "Hits served while their namespace's wrong-rate bound was within the limit.",
    "doubt_computes": "Hits computed instead: their namespace's bound was past max_wrong_rate.",
    "breaches": "Times a namespace's bound passed max_wrong_rate and its hits stopped serving.",
    "wrong_rate_upper": "The highest upper confidence bound of the audited wrong rate.",
    "shadow_would_hit": "Shadow-mode calls that the stored decision would have answered.",
    "shadow_agreed": "Shadow-mode would-be hits that agreed with the fresh decision.",
    "shadow_mismatched": "Shadow-mode would-be hits that disagreed with the fresh decision.",
    "stale_hits": "Hits served past their ttl, within stale_while_revalidate, while a refresh ran.",
    "refreshes": "Refreshes of stale entries started (one per key at a time in a process).",
    "refresh_failures": "Refreshes whose computation failed (the stale entry kept serving).",
    "stale_if_error_hits": "Failed computations answered with a stale decision (stale_if_error).",
    "error_hits": "Calls answered by raising a cached error again (cache_errors, error_ttl).",
    "passes": "Requests sent straight to the app because their key was uncacheable (pass_ttl).",
    "compute_seconds_saved": "Compute seconds hits saved (each hit adds its entry's compute time).",
    "streams": "Calls of streamed predictions (async generators), hits and misses alike.",
    "stream_chunks": "Chunks streamed to callers' flights or replayed from the store.",
    "forgotten": "Decisions dropped by forget(tags=..., scope=...).",
    "in_flight": "Computations running now.",
    "hit_rate": "hits / (hits + misses) since the last reset.",
}
"""One line per ``stats()`` field, for Prometheus's HELP and OpenTelemetry's descriptions."""


_COUNTERS = (
    "hits",
    "misses",
    "coalesced",
    "stores",
    "conflicts",
    "bypassed",
    "not_admitted",
    "too_large",
    "unencodable",
    "errors",
    "renewals",
    "corrupt",
    "coalesce_timeouts",
    "lease_waits",
    "lease_takeovers",
    "audits",
    "audit_agreed",
    "audit_mismatched",
    "audits_dropped",
    "audit_errors",
    "repairs",
    "verified_hits",
    "doubt_computes",
    "breaches",
    "shadow_would_hit",
    "shadow_agreed",
    "shadow_mismatched",
    "stale_hits",
    "refreshes",
    "refresh_failures",
    "stale_if_error_hits",
    "error_hits",
    "passes",
    "streams",
    "stream_chunks",
    "forgotten",
)


class CacheStats:
    """Plain integer counters: incrementing one is a single attribute store.

    ``in_flight`` is a gauge read from the flight table when ``as_dict`` is called.
    """

    __slots__ = (*_COUNTERS, "compute_seconds_saved", "lease_wait_seconds")

    hits: int
    misses: int
    coalesced: int
    stores: int
    conflicts: int
    bypassed: int
    not_admitted: int
    too_large: int
    unencodable: int
    errors: int
    renewals: int
    corrupt: int
    coalesce_timeouts: int
    lease_waits: int
    lease_takeovers: int
    audits: int
    audit_agreed: int
    audit_mismatched: int
    audits_dropped: int
    audit_errors: int
    repairs: int
    verified_hits: int
    doubt_computes: int
    breaches: int
    shadow_would_hit: int
    shadow_agreed: int
    shadow_mismatched: int
    stale_hits: int
    refreshes: int
    refresh_failures: int
    stale_if_error_hits: int
    error_hits: int
    passes: int
    streams: int
    stream_chunks: int
    forgotten: int
    compute_seconds_saved: float
    lease_wait_seconds: float

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Set every counter back to zero."""
        for name in _COUNTERS:
            setattr(self, name, 0)
        self.compute_seconds_saved = 0.0
        self.lease_wait_seconds = 0.0

    def as_dict(self) -> dict[str, Any]:
        """Every counter by name."""
        counters: dict[str, Any] = {name: getattr(self, name) for name in _COUNTERS}
        counters["compute_seconds_saved"] = self.compute_seconds_saved
        counters["lease_wait_seconds"] = self.lease_wait_seconds
        lookups = self.hits + self.misses
        counters["hit_rate"] = self.hits / lookups if lookups else 0.0
        return counters


class RateLimitedLog:
    """Logs a warning at most once per ``interval`` seconds per kind of event.

    A store that is down fails every call; logging each one would flood the
    service's logs exactly when they are needed.
    """

    def __init__(self, logger: logging.Logger, interval: float = 10.0) -> None:
        self._logger = logger
        self._interval = interval
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def warning(self, kind: str, message: str, *args: object) -> None:
        self._log(logging.WARNING, kind, message, args, None)

    def error(self, kind: str, message: str, *args: object, exc_info: BaseException) -> None:
        """Log an error with ``exc_info``'s traceback, at most once per interval per kind."""
        self._log(logging.ERROR, kind, message, args, exc_info)

    def _log(
        self,
        level: int,
        kind: str,
        message: str,
        args: tuple[object, ...],
        exc_info: BaseException | None,
    ) -> None:
        now = time.monotonic()
        last = self._last.get(kind)
        if last is not None and now - last < self._interval:
            self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
            return
        self._last[kind] = now
        suppressed = self._suppressed.pop(kind, 0)
        if suppressed:
            message += f" ({suppressed} similar messages suppressed)"
        self._logger.log(level, message, *args, exc_info=exc_info)
