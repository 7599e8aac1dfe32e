"""End to end: a FastAPI app with pydantic models under uvicorn on loopback, driven by httpx.

What a user sees: hits that skip the model, one model call for a burst of
identical requests (even when the first client hangs up), bypasses for
private requests, and the counters on the stats routes.
"""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import BaseModel

from asyncache import DecisionCache
from asyncache.middleware import CacheStatsEndpoint, DecisionCacheMiddleware, cache_stats

from ..support import until
from . import uvicorn_serving


class Review(BaseModel):
    text: str
    lang: str = "en"


class Sentiment(BaseModel):
    label: str
    score: float
    calls: int


@dataclass
class Service:
    cache: DecisionCache = field(default_factory=DecisionCache)
    calls: Counter[str] = field(default_factory=Counter)
    lifespan: list[str] = field(default_factory=list)
    gate: asyncio.Event | None = None
    entered: int = 0

    def app(self) -> FastAPI:
        @asynccontextmanager
        async def lifespan(app: FastAPI) -> AsyncIterator[None]:
            self.lifespan.append("startup")
            yield
            self.lifespan.append("shutdown")

        app = FastAPI(lifespan=lifespan)

        @app.post("/v1/sentiment")
        async def sentiment(review: Review) -> Sentiment:
            self.calls["sentiment"] += 1
            self.entered += 1
            if self.gate is not None:
                await self.gate.wait()
            label = "positive" if "good" in review.text else "negative"
            return Sentiment(label=label, score=0.9, calls=self.calls["sentiment"])

        @app.get("/cache/stats")
        async def stats() -> dict[str, Any]:
            return cache_stats(self.cache)

        app.add_route("/health/cache", CacheStatsEndpoint(self.cache))
        app.add_middleware(
            DecisionCacheMiddleware, cache=self.cache, routes=["/v1/sentiment"], cache_status=True
        )
        return app


def serving(service: Service) -> Any:
    return uvicorn_serving(service.app(), lifespan="on")


@pytest.fixture
async def service() -> AsyncIterator[tuple[Service, str]]:
    service = Service()
    async with serving(service) as url:
        yield service, url
    assert service.lifespan == ["startup", "shutdown"]


async def test_hits_skip_the_model(service: tuple[Service, str]) -> None:
    svc, url = service
    async with httpx.AsyncClient(base_url=url) as client:
        first = await client.post("/v1/sentiment", json={"text": "good food", "lang": "en"})
        # The same JSON in another key order; only the model's answer is cached.
        again = await client.post("/v1/sentiment", json={"lang": "en", "text": "good food"})
        other = await client.post("/v1/sentiment", json={"text": "cold soup"})
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json() == {"label": "positive", "score": 0.9, "calls": 1}
    assert other.json()["label"] == "negative"
    assert [r.headers["x-cache"] for r in (first, again, other)] == ["miss", "hit", "miss"]
    assert again.headers["cache-status"] == "asyncache; hit"
    assert again.headers["content-length"] == str(len(again.content))
    assert svc.calls["sentiment"] == 2


async def test_a_burst_of_identical_requests_runs_the_model_once(
    service: tuple[Service, str],
) -> None:
    svc, url = service
    svc.gate = asyncio.Event()
    followers = 5
    async with httpx.AsyncClient(base_url=url) as client:
        body = {"text": "good service"}
        leader = asyncio.create_task(client.post("/v1/sentiment", json=body))
        await until(lambda: svc.entered == 1, "the leader reached the model")
        rest = [
            asyncio.create_task(client.post("/v1/sentiment", json=body)) for _ in range(followers)
        ]
        await until(
            lambda: svc.cache.stats()["coalesced"] == followers, "the followers are waiting"
        )
        svc.gate.set()
        responses = [await leader, *await asyncio.gather(*rest)]
    assert svc.calls["sentiment"] == 1
    assert Counter(r.headers["x-cache"] for r in responses) == {"miss": 1, "shared": followers}
    assert {r.headers["cache-status"] for r in responses[1:]} == {
        "asyncache; fwd=uri-miss; collapsed"
    }
    assert len({r.content for r in responses}) == 1


async def test_a_leader_that_hangs_up_still_serves_the_burst(
    service: tuple[Service, str],
) -> None:
    svc, url = service
    svc.gate = asyncio.Event()
    port = int(url.rsplit(":", 1)[1])
    payload = b'{"text": "good morning"}'
    raw = socket.create_connection(("127.0.0.1", port))
    raw.sendall(
        # The same Host as httpx sends: the host is part of the key.
        b"POST /v1/sentiment HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (port, len(payload), payload)
    )
    await until(lambda: svc.entered == 1, "the leader reached the model")
    raw.close()  # the first client hangs up while the model runs
    async with httpx.AsyncClient(base_url=url) as client:
        rest = [
            asyncio.create_task(client.post("/v1/sentiment", content=payload, headers=JSON))
            for _ in range(3)
        ]
        await until(lambda: svc.cache.stats()["coalesced"] == 3, "the followers are waiting")
        svc.gate.set()
        responses = await asyncio.gather(*rest)
        later = await client.post("/v1/sentiment", content=payload, headers=JSON)
    assert svc.calls["sentiment"] == 1
    assert {r.headers["x-cache"] for r in responses} == {"shared"}
    assert later.headers["x-cache"] == "hit"


JSON = {"content-type": "application/json"}


async def test_private_and_no_store_requests_bypass(service: tuple[Service, str]) -> None:
    svc, url = service
    body = {"text": "good"}
    async with httpx.AsyncClient(base_url=url) as client:
        await client.post("/v1/sentiment", json=body)
        authorized = await client.post(
            "/v1/sentiment", json=body, headers={"Authorization": "Bearer alice"}
        )
        no_store = await client.post(
            "/v1/sentiment", json=body, headers={"Cache-Control": "no-store"}
        )
        invalid = await client.post("/v1/sentiment", json={"txt": "typo"})
        stats = (await client.get("/cache/stats")).json()
        health = await client.get("/health/cache")
    assert authorized.headers["x-cache"] == no_store.headers["x-cache"] == "bypass"
    assert authorized.headers["cache-status"] == "asyncache; fwd=bypass; detail=credentials"
    assert no_store.headers["cache-status"] == "asyncache; fwd=request; detail=no-store"
    assert invalid.status_code == 422
    assert invalid.headers["x-cache"] == "miss"
    assert svc.calls["sentiment"] == 3
    middleware = stats["middleware"]
    assert middleware["bypass_reasons"] == {"credentials": 1, "method": 1, "no_store": 1}
    assert middleware["not_admitted_reasons"] == {"status": 1}
    assert (middleware["miss"], middleware["bypass"]) == (2, 2)
    assert stats["stores"] == 1
    assert health.status_code == 200
    # The GET of /cache/stats (a route of the app) passed by; the endpoint's own GET is not counted.
    assert health.json()["middleware"]["bypass_reasons"]["method"] == 1
