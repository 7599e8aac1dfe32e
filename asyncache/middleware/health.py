"""Serving the cache's counters as JSON, for a health or metrics route."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from ..cache import DecisionCache
from .stats import BYPASS_COUNTED, middleware_stats
from .types import Receive, Scope, Send

__all__ = ["CacheStatsEndpoint", "cache_stats"]


def cache_stats(cache: DecisionCache) -> dict[str, Any]:
    """``cache.stats()`` with the middleware's counters under ``"middleware"``.

    Usable as the body of any framework's route, e.g. FastAPI's
    ``@app.get("/cache/stats")``.
    """
    stats = cache.stats()
    stats["middleware"] = middleware_stats(cache).as_dict()
    return stats


class CacheStatsEndpoint:
    """An ASGI app answering ``GET`` (and ``HEAD``) with ``cache_stats(cache)`` as JSON.

    Route it like any ASGI app: ``Route("/cache/stats", CacheStatsEndpoint(cache))``
    in Starlette, ``app.mount("/cache/stats", CacheStatsEndpoint(cache))`` in
    FastAPI. The answer says ``Cache-Control: no-store``: counters are live.
    Its own requests are not traffic: a ``DecisionCacheMiddleware`` in front
    that passed one through takes it back out of its bypass counts.

    The counters show every tenant's traffic (when another tenant stored,
    hit, missed): serve them to operators only, with ``allow`` or behind the
    app's own authentication.

    With ``check=True`` it is a health check too: each request makes one round
    trip to the store (``DecisionCache.check()``), its findings are under
    ``"check"``, and a store that failed answers ``503`` naming the failed step.

    Args:
        cache: the cache whose counters are served.
        allow: ``allow(asgi_scope)`` (sync or async) says whether this request
            may see the counters; a refused one gets ``403``. ``None``: every
            request may, for a route the app already guards.
        check: run ``cache.check()`` on each request and answer ``503`` when it fails.
    """

    def __init__(
        self,
        cache: DecisionCache,
        *,
        allow: Callable[[Scope], bool | Awaitable[bool]] | None = None,
        check: bool = False,
    ) -> None:
        self.cache = cache
        self.allow = allow
        self.check = check

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            # Served as the whole application: nothing to start or stop.
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if kind != "http":
            await send({"type": "websocket.close", "code": 1000})
            return
        for stats, reason in scope.pop(BYPASS_COUNTED, ()):
            stats.uncount(reason)
        if self.allow is not None:
            verdict = self.allow(scope)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if verdict is not True:
                await _respond(send, 403, b'{"detail":"forbidden"}')
                return
        method = scope["method"]
        if method not in ("GET", "HEAD"):
            await _respond(send, 405, b'{"detail":"method not allowed"}', allow=True)
            return
        stats = cache_stats(self.cache)
        status = 200
        if self.check:
            found = await self.cache.check()
            stats["check"] = found.as_dict()
            status = 200 if found.ok else 503
        body = orjson.dumps(stats, option=orjson.OPT_NON_STR_KEYS, default=str)
        await _respond(send, status, b"" if method == "HEAD" else body, length=len(body))


async def _respond(
    send: Send, status: int, body: bytes, *, length: int | None = None, allow: bool = False
) -> None:
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body) if length is None else length).encode()),
        (b"cache-control", b"no-store"),
    ]
    if allow:
        headers.append((b"allow", b"GET, HEAD"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
