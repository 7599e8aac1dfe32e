"""The ASGI side: cache the responses of prediction endpoints.

``DecisionCacheMiddleware`` wraps any ASGI 3 app; no web framework is imported
here. ``CacheStatsEndpoint`` (or ``cache_stats``) serves the counters as JSON
for a health route. See ``docs/middleware.md``.
"""

from .asgi import DecisionCacheMiddleware, OnHit, ScopeFunction
from .health import CacheStatsEndpoint, cache_stats
from .response import AdmitResponse, StoredResponse
from .routes import Route
from .stats import MiddlewareStats, middleware_stats

__all__ = [
    "AdmitResponse",
    "CacheStatsEndpoint",
    "DecisionCacheMiddleware",
    "MiddlewareStats",
    "OnHit",
    "Route",
    "ScopeFunction",
    "StoredResponse",
    "cache_stats",
    "middleware_stats",
]
