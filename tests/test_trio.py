"""The engine under trio: coalescing, shared failures, hits and the middleware.

Starlette and FastAPI run on anyio, so a cache may be awaited under trio
(``TestClient(backend="trio")``, hypercorn's trio worker). Each test runs its
own ``trio.run``; the cache uses a ``MemoryStore`` (the SQLite and Redis
drivers are asyncio libraries).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from asyncache import DecisionCache, cached_prediction
from asyncache.middleware import DecisionCacheMiddleware

CALLERS = 20


def test_identical_concurrent_misses_run_the_model_once_under_trio() -> None:
    runs = 0

    async def main() -> list[str]:
        cache = DecisionCache(ttl=3600, renew_on_hit=True)

        @cached_prediction(cache)
        async def predict(text: str) -> str:
            nonlocal runs
            runs += 1
            await trio.sleep(0.05)
            return text.upper()

        answers: list[str] = []

        async def ask() -> None:
            answers.append(await predict("x"))

        async with trio.open_nursery() as nursery:
            for _ in range(CALLERS):
                nursery.start_soon(ask)
        answers.append(await predict("x"))  # a hit
        assert cache.stats()["coalesced"] >= 1 and cache.stats()["hits"] >= 1
        await cache.aclose()
        return answers

    assert trio.run(main) == ["X"] * (CALLERS + 1)
    assert runs == 1


def test_followers_share_a_failure_under_trio() -> None:
    runs = 0

    async def main() -> list[BaseException]:
        cache = DecisionCache()

        @cached_prediction(cache)
        async def predict(text: str) -> str:
            nonlocal runs
            runs += 1
            await trio.sleep(0.05)
            raise ValueError("the model failed")

        failures: list[BaseException] = []

        async def ask() -> None:
            try:
                await predict("x")
            except ValueError as exc:
                failures.append(exc)

        async with trio.open_nursery() as nursery:
            for _ in range(CALLERS):
                nursery.start_soon(ask)
        await cache.aclose()
        return failures

    assert len(trio.run(main)) == CALLERS
    assert runs == 1


def test_a_waiter_that_times_out_computes_by_itself_under_trio() -> None:
    runs = 0

    async def main() -> list[str]:
        cache = DecisionCache(coalesce_timeout=0.05)

        @cached_prediction(cache)
        async def predict(text: str) -> str:
            nonlocal runs
            runs += 1
            await trio.sleep(0.3 if runs == 1 else 0)
            return text.upper()

        answers: list[str] = []

        async def ask() -> None:
            answers.append(await predict("x"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            await trio.sleep(0.01)
            nursery.start_soon(ask)
        assert cache.stats()["coalesce_timeouts"] == 1
        await cache.aclose()
        return answers

    assert trio.run(main) == ["X", "X"]
    assert runs == 2


@pytest.mark.parametrize("requests", [CALLERS])
def test_the_middleware_runs_the_app_once_for_identical_requests_under_trio(
    requests: int,
) -> None:
    runs = 0

    async def predict(request: Request) -> JSONResponse:
        nonlocal runs
        runs += 1
        body = await request.json()
        await trio.sleep(0.05)
        return JSONResponse({"label": body["text"].upper()})

    async def main() -> list[tuple[int, str, Any]]:
        cache = DecisionCache()
        app = DecisionCacheMiddleware(
            Starlette(routes=[Route("/predict", predict, methods=["POST"])]),
            cache=cache,
            routes=["/predict"],
        )
        seen: list[tuple[int, str, Any]] = []
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:

            async def ask() -> None:
                response = await client.post("/predict", json={"text": "refund"})
                seen.append((response.status_code, response.headers["x-cache"], response.json()))

            async with trio.open_nursery() as nursery:
                for _ in range(requests):
                    nursery.start_soon(ask)
            await ask()  # a hit
        await cache.aclose()
        return seen

    seen = trio.run(main)
    assert runs == 1
    assert {(status, body["label"]) for status, _, body in seen} == {(200, "REFUND")}
    assert sorted({cache for _, cache, _ in seen}) == ["hit", "miss", "shared"]
