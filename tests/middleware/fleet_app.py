"""One replica of the fleet test (``uvicorn tests.middleware.fleet_app:app``).

A Starlette app behind ``DecisionCacheMiddleware`` whose cache is a
``RedisStore`` with ``leases=True``, shared by every replica. Configured by
the environment:

- ``FLEET_REDIS_URL``: the shared redis-server;
- ``FLEET_PREFIX``: the store's key prefix (one per test);
- ``FLEET_RUNS_KEY``: a Redis key the app ``INCR``s on every run;
- ``FLEET_DELAY``: seconds each run takes (default 0.5).

``GET /healthz`` answers once the app is up (not cached); ``POST /predict``
with ``{"text": ...}`` answers ``{"answer": "fleet:<text>"}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator

from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from asyncache import DecisionCache
from asyncache.middleware import DecisionCacheMiddleware
from asyncache.stores.redis import RedisStore

REDIS_URL = os.environ["FLEET_REDIS_URL"]
PREFIX = os.environ["FLEET_PREFIX"]
RUNS_KEY = os.environ["FLEET_RUNS_KEY"]
DELAY = float(os.environ.get("FLEET_DELAY", "0.5"))

cache = DecisionCache(
    RedisStore.from_url(REDIS_URL, prefix=PREFIX),
    leases=True,
    lease_ttl=30.0,
    # Generous: a store call that times out computes without a lease (correctly), and a
    # loaded test machine must not turn that into a second run.
    store_timeout=30.0,
)
runs = Redis.from_url(REDIS_URL)


async def predict(request: Request) -> JSONResponse:
    body = await request.json()
    await runs.incr(RUNS_KEY)
    await asyncio.sleep(DELAY)
    return JSONResponse({"answer": f"fleet:{body['text']}"})


async def healthz(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    try:
        yield
    finally:
        await cache.aclose()
        await runs.aclose()


app = DecisionCacheMiddleware(
    Starlette(
        routes=[
            Route("/predict", predict, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
        ],
        lifespan=lifespan,
    ),
    cache=cache,
    routes=["/predict"],
)
