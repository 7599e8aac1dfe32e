"""What each ``cache.stats()`` counter means: the help text of every metrics exporter."""

from __future__ import annotations

__all__ = ["COUNTER_MEANINGS"]

COUNTER_MEANINGS: dict[str, str] = {
    "hits": "Lookups answered from the store.",
    "misses": "Lookups that found no usable decision.",
    "coalesced": "Misses that waited for a computation already running in this process.",
    "stores": "Decisions this cache added to the store.",
    "conflicts": "Adds where another writer's decision won.",
    "bypassed": "Calls that skipped the cache (disabled).",
    "not_admitted": "Results not stored because of ttl <= 0 or the admit hook.",
    "too_large": "Results not stored because they exceeded max_entry_bytes.",
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
    "shadow_would_hit": "Shadow-mode calls that the stored decision would have answered.",
    "shadow_agreed": "Shadow-mode would-be hits that agreed with the fresh decision.",
    "shadow_mismatched": "Shadow-mode would-be hits that disagreed with the fresh decision.",
    "compute_seconds_saved": "Compute seconds hits saved (each hit adds its entry's compute time).",
    "in_flight": "Computations running now.",
    "hit_rate": "hits / (hits + misses) since the last reset.",
}
"""One line per ``stats()`` field, for Prometheus's HELP and OpenTelemetry's descriptions."""
