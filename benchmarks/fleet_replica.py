"""One replica of the watched fleet (``benchmarks/fleet_watch.py`` runs it under uvicorn).

A Starlette app behind ``DecisionCacheMiddleware`` over a ``DecisionCache``
with leases on a ``RedisStore`` every replica shares. Its model is not
deterministic on purpose: each run answers with a fresh nonce, so two runs for
one input that both reach clients show up as two answers (a disagreement),
as two runs of a sampled or GPU-nondeterministic model would.

Configured by the environment:

- ``FLEET_STORE``: the store URL (``redis+cluster://...?prefix=...``);
- ``FLEET_RUNS``: a file each model run appends a line to
  (``<input> <replica> <unix time> <answer>``);
- ``FLEET_MODEL_MS``: how long a run takes (an awaited sleep; default 20);
- ``FLEET_REPLICA``: this replica's name;
- ``FLEET_CACHE_OPTIONS``: JSON of more ``DecisionCache`` keyword arguments
  (a consistency mode, timeouts...).

``POST /predict`` with ``{"input": n}`` answers ``{"input": n, "answer": ...}``;
``GET /cache/stats`` is the balancer's health check.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from asyncache import DecisionCache
from asyncache.middleware import CacheStatsEndpoint, DecisionCacheMiddleware
from asyncache.stores import open_store

REPLICA = os.environ.get("FLEET_REPLICA", "r?")
MODEL_SECONDS = float(os.environ.get("FLEET_MODEL_MS", "20")) / 1000
RUNS = os.environ["FLEET_RUNS"]

# The settings a fleet would pick: leases on (one run per fleet; their ttl the
# default, renewed by their owner), a store timeout far under the request's, and
# what the harness adds (--cache-option: store_wait, the waiting mode).
SETTINGS: dict[str, Any] = {"leases": True, "store_timeout": 1.0}
SETTINGS.update(json.loads(os.environ.get("FLEET_CACHE_OPTIONS", "{}")))

cache = DecisionCache(open_store(os.environ["FLEET_STORE"]), namespace="fleet", **SETTINGS)


async def predict(request: Request) -> JSONResponse:
    body = await request.json()
    item = int(body["input"])
    # O_APPEND writes of one short line are atomic: the fleet's shared count of runs.
    answer = f"{item}:{secrets.token_hex(4)}"
    descriptor = os.open(RUNS, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(descriptor, f"{item} {REPLICA} {time.time():.4f} {answer}\n".encode())
    finally:
        os.close(descriptor)
    await asyncio.sleep(MODEL_SECONDS)
    return JSONResponse({"input": item, "answer": answer})


@contextlib.asynccontextmanager
async def _closing(app: Any) -> AsyncIterator[None]:
    try:
        yield
    finally:
        await cache.aclose()


app = DecisionCacheMiddleware(
    Starlette(
        routes=[
            Route("/predict", predict, methods=["POST"]),
            Route("/cache/stats", CacheStatsEndpoint(cache)),
        ],
        lifespan=_closing,
    ),
    cache=cache,
    routes=["/predict"],
)
