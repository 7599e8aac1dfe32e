"""The middleware behind real servers, over loopback TCP with a real HTTP client.

hypercorn with its trio worker, uvicorn with httptools, and a streamed
response shared live over TCP: a follower reads its first chunk while the
app has not yet produced the second.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from asyncache import DecisionCache
from asyncache.middleware import DecisionCacheMiddleware
from tests.support import free_port

from . import uvicorn_serving

BURST = 12


def counted_app(runs: list[int], pause: Any) -> Starlette:
    """A route that counts its runs; ``pause`` is ``(sleep, seconds)`` of the loop it runs on."""

    async def predict(request: Request) -> JSONResponse:
        runs.append(1)
        body = await request.json()
        sleep, seconds = pause
        await sleep(seconds)
        return JSONResponse({"label": body["text"].upper()})

    return Starlette(routes=[Route("/predict", predict, methods=["POST"])])


def test_hypercorn_with_the_trio_worker_runs_a_burst_once() -> None:
    runs: list[int] = []
    port = free_port()

    async def main() -> list[tuple[int, str]]:
        app = DecisionCacheMiddleware(
            counted_app(runs, (trio.sleep, 0.2)), cache=DecisionCache(), routes=["/predict"]
        )
        config = HypercornConfig()
        config.bind = [f"127.0.0.1:{port}"]
        config.loglevel = "WARNING"
        stop = trio.Event()
        seen: list[tuple[int, str]] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: hypercorn_serve(app, config, shutdown_trigger=stop.wait)  # type: ignore[arg-type]
            )
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                with trio.fail_after(20):
                    while True:
                        try:
                            await client.get("/")
                            break
                        except httpx.TransportError:
                            await trio.sleep(0.02)

                async def ask() -> None:
                    response = await client.post("/predict", json={"text": "refund"})
                    seen.append((response.status_code, response.headers["x-cache"]))

                with trio.fail_after(20):
                    async with trio.open_nursery() as burst:
                        for _ in range(BURST):
                            burst.start_soon(ask)
                    await ask()
            stop.set()
        return seen

    seen = trio.run(main)
    assert len(runs) == 1
    assert {status for status, _ in seen} == {200}
    assert seen[-1][1] == "hit"
    assert sorted({cache for _, cache in seen}) == ["hit", "miss", "shared"]


async def test_uvicorn_with_httptools_runs_a_burst_once() -> None:
    runs: list[int] = []
    app = DecisionCacheMiddleware(
        counted_app(runs, (asyncio.sleep, 0.2)), cache=DecisionCache(), routes=["/predict"]
    )
    async with (
        uvicorn_serving(app, http="httptools") as url,
        httpx.AsyncClient(base_url=url, timeout=20) as client,
    ):
        responses = await asyncio.gather(
            *(client.post("/predict", json={"text": "refund"}) for _ in range(BURST))
        )
        hit = await client.post("/predict", json={"text": "refund"})
    assert len(runs) == 1
    assert {r.status_code for r in responses} == {200}
    assert {r.json()["label"] for r in responses} == {"REFUND"}
    assert hit.headers["x-cache"] == "hit"
    assert hit.headers["content-length"] == responses[0].headers["content-length"]


async def test_a_stream_is_shared_live_over_tcp() -> None:
    runs: list[int] = []
    step = asyncio.Semaphore(0)
    produced: list[int] = []

    async def generate(request: Request) -> StreamingResponse:
        runs.append(1)
        await request.body()

        async def tokens() -> AsyncIterator[bytes]:
            for index in range(3):
                await step.acquire()
                produced.append(index)
                yield b'{"token": %d}\n' % index

        return StreamingResponse(tokens(), media_type="application/x-ndjson")

    app = DecisionCacheMiddleware(
        Starlette(routes=[Route("/generate", generate, methods=["POST"])]),
        cache=DecisionCache(),
        routes=["/generate"],
    )
    async with (
        uvicorn_serving(app) as url,
        httpx.AsyncClient(base_url=url, timeout=20) as leader_client,
        httpx.AsyncClient(base_url=url, timeout=20) as follower_client,
        leader_client.stream("POST", "/generate", json={"p": 1}) as leader,
    ):
        assert leader.headers["x-cache"] == "miss"  # the start is not held back
        async with follower_client.stream("POST", "/generate", json={"p": 1}) as follower:
            assert follower.headers["x-cache"] == "shared"
            lines = follower.aiter_lines()
            got = []
            for index in range(3):
                step.release()
                got.append(await anext(lines))
                # The follower read this line before the app produced the next one.
                assert produced == list(range(index + 1))
        body = b"".join([chunk async for chunk in leader.aiter_bytes()])
    assert runs == [1]
    assert got == [f'{{"token": {index}}}' for index in range(3)]
    assert body == b"".join(b'{"token": %d}\n' % index for index in range(3))


def cancelled_on_disconnect_app(runs: list[int]) -> Any:
    """An ASGI app that, as Quart 0.23 does, reads ``receive`` beside its handler and
    cancels the handler at ``http.disconnect``, which a server answers as soon as its
    client has the last body message. Its body goes out in two messages, as Quart's does."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        async def handle() -> None:
            runs.append(1)
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": b'{"ok":1}', "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        async def listen(handler: asyncio.Task[None]) -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    handler.cancel()
                    return

        handler = asyncio.ensure_future(handle())
        listener = asyncio.ensure_future(listen(handler))
        await asyncio.gather(handler, listener, return_exceptions=True)

    return app


async def test_an_app_cancelled_at_its_clients_disconnect_has_its_response_stored() -> None:
    # Before: the app's send of its last body message waited for the client (paced),
    # the server's disconnect reached the app first, the app cancelled its handler
    # inside that send, and the response was never stored: every request a miss.
    runs: list[int] = []
    cache = DecisionCache()
    app = DecisionCacheMiddleware(cancelled_on_disconnect_app(runs), cache=cache, routes=["/"])
    async with uvicorn_serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        replies = [await client.post("/", json={"text": "a"}) for _ in range(4)]
    assert [reply.json() for reply in replies] == [{"ok": 1}] * 4
    assert [reply.headers["x-cache"] for reply in replies] == ["miss", "hit", "hit", "hit"]
    assert len(runs) == 1
    assert cache.stats()["stores"] == 1
