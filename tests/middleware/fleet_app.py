"""One replica of the fleet test (``uvicorn tests.middleware.fleet_app:app``).

A Starlette app behind ``DecisionCacheMiddleware`` whose cache is a
``RedisStore`` with ``leases=True``, shared by every replica. Configured by
the environment:

- ``FLEET_REDIS_URL``: the shared redis-server;
- ``FLEET_PREFIX``: the store's key prefix (one per test);
- ``FLEET_RUNS_KEY``: a Redis key the app ``INCR``s on every run;
- ``FLEET_DELAY``: seconds each run takes (default 0.5);
- ``FLEET_LEASES``: ``0`` for a cache without leases (default ``1``);
- ``FLEET_SQLITE``: a SQLite file to share instead of Redis;
- ``FLEET_BARRIER``: a run waits until this many runs started across the fleet
  (so that several replicas surely run the app for one input);
- ``FLEET_UNIQUE``: ``1``: each run's answer also names the run (a model whose
  answers differ from run to run).

``GET /healthz`` answers once the app is up (not cached); ``POST /predict``
with ``{"text": ...}`` answers ``{"answer": "fleet:<text>"}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator

from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from asyncache import DecisionCache
from asyncache.middleware import DecisionCacheMiddleware
from asyncache.stores.redis import RedisStore
from asyncache.stores.sqlite import SQLiteStore

REDIS_URL = os.environ["FLEET_REDIS_URL"]
PREFIX = os.environ["FLEET_PREFIX"]
RUNS_KEY = os.environ["FLEET_RUNS_KEY"]
DELAY = float(os.environ.get("FLEET_DELAY", "0.5"))
LEASES = os.environ.get("FLEET_LEASES", "1") == "1"
SQLITE = os.environ.get("FLEET_SQLITE")
BARRIER = int(os.environ.get("FLEET_BARRIER", "0"))
UNIQUE = os.environ.get("FLEET_UNIQUE") == "1"

cache = DecisionCache(
    SQLiteStore(SQLITE) if SQLITE else RedisStore.from_url(REDIS_URL, prefix=PREFIX),
    leases=LEASES,
    lease_ttl=30.0,
    # Generous: a store call that times out computes without a lease (correctly), and a
    # loaded test machine must not turn that into a second run.
    store_timeout=30.0,
)
runs = Redis.from_url(REDIS_URL)


async def predict(request: Request) -> JSONResponse:
    body = await request.json()
    started = await runs.incr(RUNS_KEY)
    for _ in range(3000):  # a hang guard (30 s), never a timing assertion
        if started >= BARRIER:
            break
        await asyncio.sleep(0.01)
        started = int(await runs.get(RUNS_KEY) or 0)
    await asyncio.sleep(DELAY)
    answer = f"fleet:{body['text']}"
    if UNIQUE:
        answer += f":{uuid.uuid4().hex}"
    return JSONResponse({"answer": answer})


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
