"""What the middleware did, by outcome and by reason.

The counters belong to the cache the middleware uses (every middleware over
one cache adds to the same counters), so that a health endpoint given only the
cache finds them, whatever built the middleware (Starlette builds it lazily).
"""

from __future__ import annotations

import weakref
from typing import Any

from ..cache import DecisionCache

__all__ = ["BYPASS_COUNTED", "OUTCOMES", "MiddlewareStats", "middleware_stats"]

# ``replay_miss``: mode="replay" answered 500 where the app would have run.
OUTCOMES = ("hit", "stale", "miss", "shared", "bypass", "disabled", "replay_miss")

BYPASS_COUNTED = "asyncache.bypass_counted"
"""The scope key a passed-through request carries: the ``(stats, reason)`` pairs it was
counted under, so that the stats endpoint takes its own requests back out of the counts."""


class MiddlewareStats:
    """Counters of the middleware's outcomes and of why it bypassed or did not store.

    Attributes:
        outcomes: responses by ``X-Cache`` value (configured routes only).
        bypass_reasons: requests that did not use the cache, by reason,
            including ``method`` and ``route`` (not configured).
        not_admitted_reasons: misses whose response was not stored, by reason.
    """

    __slots__ = ("__weakref__", "bypass_reasons", "not_admitted_reasons", "outcomes")

    def __init__(self) -> None:
        self.outcomes: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
        self.bypass_reasons: dict[str, int] = {}
        self.not_admitted_reasons: dict[str, int] = {}

    def bypassed(self, reason: str) -> None:
        """Count a request that did not use the cache."""
        self.bypass_reasons[reason] = self.bypass_reasons.get(reason, 0) + 1

    def uncount(self, reason: str) -> None:
        """Take back one ``bypassed(reason)``: the request was the stats endpoint's own."""
        left = self.bypass_reasons.get(reason, 0) - 1
        if left > 0:
            self.bypass_reasons[reason] = left
        else:
            self.bypass_reasons.pop(reason, None)

    def not_admitted(self, reason: str) -> None:
        """Count a response that was not stored."""
        self.not_admitted_reasons[reason] = self.not_admitted_reasons.get(reason, 0) + 1

    def reset(self) -> None:
        """Set every counter back to zero."""
        self.outcomes = dict.fromkeys(OUTCOMES, 0)
        self.bypass_reasons = {}
        self.not_admitted_reasons = {}

    def as_dict(self) -> dict[str, Any]:
        """Every counter, reasons sorted by name."""
        return {
            **self.outcomes,
            "bypass_reasons": dict(sorted(self.bypass_reasons.items())),
            "not_admitted_reasons": dict(sorted(self.not_admitted_reasons.items())),
        }


_BY_CACHE: weakref.WeakKeyDictionary[DecisionCache, MiddlewareStats] = weakref.WeakKeyDictionary()


def middleware_stats(cache: DecisionCache) -> MiddlewareStats:
    """The middleware counters kept for ``cache`` (created on first use)."""
    stats = _BY_CACHE.get(cache)
    if stats is None:
        stats = _BY_CACHE[cache] = MiddlewareStats()
    return stats
