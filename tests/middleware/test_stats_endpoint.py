"""The stats endpoint's own requests are not traffic: they are never counted as bypasses."""

from __future__ import annotations

import httpx
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from asyncache import DecisionCache
from asyncache.middleware import CacheStatsEndpoint, DecisionCacheMiddleware, cache_stats


async def _health(request: object) -> PlainTextResponse:
    return PlainTextResponse("ok")


async def test_polling_the_stats_endpoint_counts_no_bypass() -> None:
    cache = DecisionCache()
    app = Starlette(
        routes=[
            Route("/cache/stats", CacheStatsEndpoint(cache)),
            Mount("/mounted/stats", CacheStatsEndpoint(cache)),
            Route("/health", _health),
            Route("/predict", _health, methods=["POST"]),
        ]
    )
    app.add_middleware(DecisionCacheMiddleware, cache=cache, routes=["/predict"])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
        for _ in range(3):
            assert (await client.get("/cache/stats")).status_code == 200
        assert (await client.get("/mounted/stats/")).status_code == 200
        assert (await client.head("/cache/stats")).status_code == 200
        await client.get("/health")  # real traffic passing by: counted
        await client.post("/other")  # a route that is not configured: counted
        served = (await client.get("/cache/stats")).json()
    assert served["middleware"]["bypass_reasons"] == {"method": 1, "route": 1}
    assert cache_stats(cache)["middleware"]["bypass_reasons"] == {"method": 1, "route": 1}


async def test_two_middlewares_in_front_both_take_it_back() -> None:
    outer_cache, inner_cache = DecisionCache(), DecisionCache()
    inner = DecisionCacheMiddleware(
        CacheStatsEndpoint(inner_cache), cache=inner_cache, routes=["/predict"]
    )
    app = DecisionCacheMiddleware(inner, cache=outer_cache, routes=["/other"])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
        assert (await client.get("/cache/stats")).status_code == 200
    assert cache_stats(outer_cache)["middleware"]["bypass_reasons"] == {}
    assert cache_stats(inner_cache)["middleware"]["bypass_reasons"] == {}


async def test_allow_keeps_the_counters_from_who_it_refuses() -> None:
    # Other tenants' counts reveal their traffic: only an operator sees them.
    cache = DecisionCache()

    async def operator(scope: dict[str, object]) -> bool:
        return (b"authorization", b"Bearer ops") in scope["headers"]  # type: ignore[operator]

    app = Starlette(routes=[Route("/cache/stats", CacheStatsEndpoint(cache, allow=operator))])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
        refused = await client.get("/cache/stats")
        assert refused.status_code == 403
        assert "hits" not in refused.text
        allowed = await client.get("/cache/stats", headers={"authorization": "Bearer ops"})
        assert allowed.status_code == 200
        assert "hits" in allowed.json()
