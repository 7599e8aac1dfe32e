"""The middleware's promises against hostile or careless peers, over real servers.

- An app that gzips without ``Vary``: its encoded bytes are never replayed to a
  client that did not accept them (stored only when the key holds
  ``Accept-Encoding``).
- ``Authentication-Info`` (one client's) is never replayed on a hit.
- Cheap runs of other inputs do not shorten the follower wait of a slow input.
- A socket that never reads is detached from a shared stream; the others finish.
- Bodies held while they arrive are bounded across connections, not only each.
"""

from __future__ import annotations

import asyncio
import gzip
import socket
from collections import Counter
from typing import Any

import httpx
import pytest

from asyncache import DecisionCache, MemoryStore
from asyncache.middleware import DecisionCacheMiddleware

from ..support import until
from . import serving

PLAIN = b'{"label":"positive","score":0.97}'


class CountingApp:
    """Counts its HTTP requests, reads each body whole, then ``answer``s."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # hypercorn's lifespan
            return
        self.calls += 1
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        await self.answer(scope, body, send)

    async def answer(self, scope: Any, body: bytes, send: Any) -> None:
        raise NotImplementedError


class GzippingApp(CountingApp):
    """Answers gzip to a client whose ``Accept-Encoding`` allows it, and never says ``Vary``."""

    async def answer(self, scope: Any, body: bytes, send: Any) -> None:
        accepted = b""
        for name, value in scope["headers"]:
            if name == b"accept-encoding":
                accepted = value.replace(b" ", b"").lower()
        headers = [(b"content-type", b"application/json")]
        body = PLAIN
        if b"gzip" in accepted and b"gzip;q=0" not in accepted:
            body = gzip.compress(PLAIN)
            headers.append((b"content-encoding", b"gzip"))
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


# A client that sends no Accept-Encoding, or one that refuses gzip.
REFUSING = [None, "identity", "br", "gzip;q=0"]


@pytest.mark.parametrize("server", ["h11", "httptools", "hypercorn"])
async def test_gzip_bytes_are_never_replayed_to_a_client_that_did_not_accept_them(
    server: str,
) -> None:
    app = GzippingApp()
    cache = DecisionCache(MemoryStore())
    middleware = DecisionCacheMiddleware(app, cache=cache)
    async with serving(middleware, server) as url, httpx.AsyncClient(base_url=url) as client:
        del client.headers["accept-encoding"]  # httpx's default; each request says its own
        gzipped = await client.post("/", json={"x": 1}, headers={"accept-encoding": "gzip"})
        assert gzipped.headers["content-encoding"] == "gzip"
        for accepted in REFUSING:
            headers = {} if accepted is None else {"accept-encoding": accepted}
            answer = await client.post("/", json={"x": 1}, headers=headers)
            assert "content-encoding" not in answer.headers, accepted
            assert answer.content == PLAIN, accepted
    # The gzip answer was not stored; an identity one may be, and answers everyone.
    assert cache.stats()["stores"] <= 1
    await cache.aclose()


async def test_gzip_bytes_are_stored_when_the_key_holds_accept_encoding() -> None:
    app = GzippingApp()
    cache = DecisionCache(MemoryStore())
    middleware = DecisionCacheMiddleware(app, cache=cache, vary=["accept-encoding"])
    async with serving(middleware, "h11") as url, httpx.AsyncClient(base_url=url) as client:
        del client.headers["accept-encoding"]
        answers = [
            await client.post("/", json={"x": 1}, headers=headers)
            for headers in ({"accept-encoding": "gzip"}, {}, {"accept-encoding": "gzip"}, {})
        ]
    assert [a.headers.get("content-encoding") for a in answers] == ["gzip", None, "gzip", None]
    assert [a.headers["x-cache"] for a in answers] == ["miss", "miss", "hit", "hit"]
    assert {a.content for a in answers} == {PLAIN}
    assert app.calls == 2
    await cache.aclose()


async def test_authentication_info_is_never_replayed_on_a_hit() -> None:
    # What a server says of one client's authentication (its next nonce) is that client's.
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        headers = [
            (b"content-type", b"application/json"),
            (b"authentication-info", b'nextnonce="47364c23432d2e131a5fb210812c"'),
            (b"proxy-authentication-info", b'nextnonce="a8b4c1e0"'),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": PLAIN})

    cache = DecisionCache(MemoryStore())
    middleware = DecisionCacheMiddleware(app, cache=cache)
    async with serving(middleware, "h11") as url, httpx.AsyncClient(base_url=url) as client:
        miss = await client.post("/", json={"x": 1})
        hit = await client.post("/", json={"x": 1})
    assert miss.headers["authentication-info"].startswith("nextnonce=")
    assert (hit.headers["x-cache"], hit.content) == ("hit", PLAIN)
    assert "authentication-info" not in hit.headers
    assert "proxy-authentication-info" not in hit.headers
    await cache.aclose()


class CostlyApp(CountingApp):
    """A route whose ``"slow"`` inputs take ``SLOW`` seconds and the others none."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: Counter[bytes] = Counter()

    async def answer(self, scope: Any, body: bytes, send: Any) -> None:
        self.runs[body] += 1
        if b"slow" in body:
            await asyncio.sleep(SLOW)
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


SLOW = 1.0


async def test_cheap_runs_of_other_inputs_do_not_shorten_a_slow_inputs_follower_wait() -> None:
    # 40 cheap distinct requests brought the wait (4x the moving average) to its 0.1 s
    # floor; the 10 identical slow requests that followed then ran the app 10 times.
    app = CostlyApp()
    cache = DecisionCache(MemoryStore())
    middleware = DecisionCacheMiddleware(app, cache=cache)
    async with serving(middleware, "h11") as url, httpx.AsyncClient(base_url=url) as client:
        await client.post("/", json={"slow": 0})  # the route's real runs take a second
        for n in range(40):
            await client.post("/", json={"cheap": n})
        # The body as bytes: httpx before 0.28 writes JSON with spaces (the floors job).
        slow = {"content": b'{"slow":1}', "headers": {"content-type": "application/json"}}
        burst = await asyncio.gather(*(client.post("/", **slow) for _ in range(10)))
    assert [answer.status_code for answer in burst] == [200] * 10
    assert app.runs[b'{"slow":1}'] == 1
    assert cache.stats()["coalesce_timeouts"] == 0
    await cache.aclose()


BIG = 24 * 1024 * 1024  # past LAG_LIMIT plus a socket's send buffer: the silent client is detached
CHUNK = 64 * 1024


class BigStreamApp(CountingApp):
    """Streams ``BIG`` bytes in ``CHUNK``s once ``go`` is set (after its start message)."""

    def __init__(self) -> None:
        super().__init__()
        self.go = asyncio.Event()

    async def answer(self, scope: Any, body: bytes, send: Any) -> None:
        headers = [(b"content-type", b"application/octet-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await self.go.wait()
        chunk = b"x" * CHUNK
        for _ in range(BIG // CHUNK - 1):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": chunk})


@pytest.mark.parametrize("silent", ["leads", "follows"])
@pytest.mark.parametrize("server", ["h11", "httptools", "hypercorn"])
async def test_a_client_that_never_reads_is_detached_and_the_others_finish(
    server: str, silent: str
) -> None:
    # Both readers of an 8 MiB stream were still incomplete after 15 s beside a socket
    # that never read (the stream was paced by its slowest reader).
    app = BigStreamApp()
    cache = DecisionCache(MemoryStore())
    middleware = DecisionCacheMiddleware(app, cache=cache)
    body = b'{"x":1}'
    loop = asyncio.get_running_loop()
    silent_socket = socket.socket()
    silent_socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    silent_socket.setblocking(False)
    async with serving(middleware, server) as url, httpx.AsyncClient(timeout=60) as client:
        host, port = url.removeprefix("http://").split(":")

        async def read() -> int:
            headers = {"content-type": "application/json"}
            async with client.stream("POST", url + "/", content=body, headers=headers) as answer:
                return sum([len(chunk) async for chunk in answer.aiter_raw()])

        async def never_read() -> None:
            await loop.sock_connect(silent_socket, (host, int(port)))
            request = (
                b"POST / HTTP/1.1\r\nhost: %s:%s\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%s" % (host.encode(), port.encode(), len(body), body)
            )
            await loop.sock_sendall(silent_socket, request)

        try:
            readers = []
            if silent == "leads":
                await never_read()
                await until(lambda: app.calls == 1, "the silent client's run started")
            readers.append(asyncio.create_task(read()))
            if silent == "follows":
                await until(lambda: app.calls == 1, "the run started")
                await never_read()
            await until(lambda: cache.stats()["coalesced"] == 1, "two requests share the run")
            readers.append(asyncio.create_task(read()))
            await until(lambda: cache.stats()["coalesced"] == 2, "three requests share the run")
            app.go.set()
            # A hang guard, not a timing claim: before, no reader ever finished.
            got = await asyncio.wait_for(asyncio.gather(*readers), 60)
        finally:
            silent_socket.close()
    assert got == [BIG, BIG]
    assert app.calls == 1
    await cache.aclose()


class BodyReadingApp:
    """Reads every request body to its end, counting the requests that reached it."""

    def __init__(self) -> None:
        self.calls = 0
        self.bodies: list[int] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.calls += 1
        size = 0
        while True:
            message = await receive()
            size += len(message.get("body", b""))
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        self.bodies.append(size)
        if message["type"] == "http.request":
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b'{"size":%d}' % size})


DECLARED, SENT, STALLED = 1_000_000, 900_000, 6


@pytest.mark.parametrize("server", ["h11", "httptools"])
async def test_bodies_held_while_they_arrive_are_bounded_across_connections(
    server: str,
) -> None:
    # 150 connections that declared 1,000,000 bytes and stalled after 900,000 held
    # +130 MiB: each connection's body was bounded, not all of them together.
    app = BodyReadingApp()
    cache = DecisionCache(MemoryStore())
    middleware = DecisionCacheMiddleware(app, cache=cache, max_held_body_bytes=2 * SENT)
    loop = asyncio.get_running_loop()
    sockets = [socket.socket() for _ in range(STALLED)]
    async with serving(middleware, server) as url:
        host, port = url.removeprefix("http://").split(":")
        try:
            for stalled in sockets:
                stalled.setblocking(False)
                await loop.sock_connect(stalled, (host, int(port)))
                head = (
                    b"POST / HTTP/1.1\r\nhost: %s:%s\r\ncontent-type: application/octet-stream"
                    b"\r\ncontent-length: %d\r\n\r\n" % (host.encode(), port.encode(), DECLARED)
                )
                await loop.sock_sendall(stalled, head + b"\0" * SENT)
            # The middleware holds at most two of them; the others reach the app, which
            # waits for the rest of its body as it would without the middleware.
            await until(lambda: app.calls == STALLED - 2, "the bodies past the budget bypass")
            assert middleware.stats.bypass_reasons == {"body_budget": STALLED - 2}
            assert middleware._bodies.held <= 2 * SENT
        finally:
            for stalled in sockets:
                stalled.close()
        await until(lambda: middleware._bodies.held == 0, "the budget is given back")
    await cache.aclose()
