"""Streams, failures and extension messages through the middleware (raw ASGI, in process).

Followers of a shareable stream get each chunk as the app sends it (one app
call); a private start releases them at once; a failed run is shared, not
stored; a run that ends before its start elects one new leader; a leader whose
client never reads holds nobody.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest
import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from asyncache import DecisionCache
from asyncache.middleware import DecisionCacheMiddleware

from ..support import until
from . import Message, call, make_scope

NDJSON = (b"content-type", b"application/x-ndjson")


class Client:
    """A client of one request: records what arrived, and can stop reading."""

    def __init__(self, *, reads: bool = True) -> None:
        self.messages: list[Message] = []
        self.reads = reads
        self.done = asyncio.Event()

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages if "body" in m)

    def header(self, name: bytes) -> bytes | None:
        for message in self.messages:
            if message["type"] == "http.response.start":
                return dict(message["headers"]).get(name)
        return None

    async def receive(self) -> Message:
        if not hasattr(self, "_sent"):
            self._sent = True
            return {"type": "http.request", "body": b'{"prompt": "hi"}', "more_body": False}
        await self.done.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if not self.reads and message["type"] == "http.response.body":
            await asyncio.Event().wait()  # a socket that never drains
        self.messages.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.done.set()


class TokenStream:
    """An app streaming tokens, one per ``step`` event, counting its runs."""

    def __init__(self, tokens: int = 3, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        self.tokens = tokens
        self.headers = headers if headers is not None else [NDJSON]
        self.calls = 0
        self.sent = 0
        self.step = asyncio.Semaphore(0)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.calls += 1
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": self.headers})
        for index in range(self.tokens):
            await self.step.acquire()
            more = index < self.tokens - 1
            chunk = b'{"token": %d}\n' % index
            await send({"type": "http.response.body", "body": chunk, "more_body": more})
            self.sent += 1


def scope() -> dict[str, Any]:
    return make_scope("POST", "/generate")


async def test_followers_get_each_chunk_as_the_app_sends_it() -> None:
    app = TokenStream()
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache(), routes=["/generate"])
    leader, follower = Client(), Client()
    first = asyncio.create_task(middleware(scope(), leader.receive, leader.send))
    await until(lambda: len(leader.messages) == 1, "the leader has its start message")
    second = asyncio.create_task(middleware(scope(), follower.receive, follower.send))
    # Not held back: the follower has the status line before the app sent a single chunk.
    await until(lambda: len(follower.messages) == 1, "the follower has its start message")
    assert follower.header(b"x-cache") == b"shared"
    for token in range(3):
        app.step.release()
        # Each chunk reaches the follower while the app is still streaming the rest.
        await until(
            lambda token=token: len(follower.messages) == 2 + token, f"the follower has {token}"
        )
        assert app.sent == token + 1
    await asyncio.gather(first, second)
    assert app.calls == 1
    assert leader.body == follower.body == b'{"token": 0}\n{"token": 1}\n{"token": 2}\n'
    hit = await call(middleware, path="/generate", body=b'{"prompt": "hi"}')
    assert hit.cache == "hit" and hit.body == leader.body
    assert hit.header("content-type") == "application/x-ndjson"


async def test_a_private_start_releases_the_followers_at_once() -> None:
    app = TokenStream(headers=[NDJSON, (b"set-cookie", b"sid=alice")])
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache(), routes=["/generate"])
    leader, follower = Client(), Client()
    first = asyncio.create_task(middleware(scope(), leader.receive, leader.send))
    await until(lambda: len(leader.messages) == 1, "the leader has its start message")
    second = asyncio.create_task(middleware(scope(), follower.receive, follower.send))
    # The leader's stream has not sent a chunk, yet the follower runs the app itself.
    await until(lambda: app.calls == 2, "the follower runs the app on its own")
    for _ in range(6):
        app.step.release()
    await asyncio.gather(first, second)
    assert follower.header(b"x-cache") == b"miss"
    assert await middleware.cache.store.count() == 0


async def test_a_leader_whose_client_never_reads_holds_no_follower() -> None:
    size = 8 * 1024 * 1024
    chunk = b"x" * 65536

    async def big(scope: Any, receive: Any, send: Any) -> None:
        calls.append(1)
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [NDJSON]})
        for index in range(size // len(chunk)):
            more = index < size // len(chunk) - 1
            await send({"type": "http.response.body", "body": chunk, "more_body": more})
            await asyncio.sleep(0)

    calls: list[int] = []
    cache = DecisionCache(max_entry_bytes=16 * 1024 * 1024, coalesce_timeout=300)
    middleware = DecisionCacheMiddleware(big, cache=cache, routes=["/generate"])
    stuck, follower = Client(reads=False), Client()
    leader = asyncio.create_task(middleware(scope(), stuck.receive, stuck.send))
    await until(lambda: len(stuck.messages) == 1, "the leader has its start message")
    await middleware(scope(), follower.receive, follower.send)
    assert len(follower.body) == size
    assert calls == [1]
    # Stored at the end, without the leader's client having read it.
    await until(lambda: cache.stats()["stores"] == 1, "the response is stored")
    assert (await call(middleware, path="/generate", body=b'{"prompt": "hi"}')).cache == "hit"
    assert calls == [1]
    leader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader


async def test_followers_of_a_run_that_ended_before_its_start_elect_one_leader() -> None:
    calls = 0
    gate = asyncio.Event()

    async def flaky(scope: Any, receive: Any, send: Any) -> None:
        nonlocal calls
        calls += 1
        await receive()
        if calls == 1:
            await gate.wait()
            return  # gave up (its client left) without a response
        await send({"type": "http.response.start", "status": 200, "headers": [NDJSON]})
        await send({"type": "http.response.body", "body": b"{}\n"})

    cache = DecisionCache()
    middleware = DecisionCacheMiddleware(flaky, cache=cache, routes=["/generate"])
    leader = asyncio.create_task(call(middleware, path="/generate", body=b"{}"))
    await until(lambda: calls == 1, "the leader is in the app")
    followers = [
        asyncio.create_task(call(middleware, path="/generate", body=b"{}")) for _ in range(20)
    ]
    await until(lambda: cache.stats()["coalesced"] == 20, "the followers wait")
    gate.set()
    await leader
    results = await asyncio.gather(*followers)
    assert calls == 2  # one new leader, not twenty
    assert {r.body for r in results} == {b"{}\n"}
    assert sorted({r.cache for r in results}) == ["miss", "shared"]


async def test_a_streaming_response_that_raises_before_its_first_chunk_keeps_its_200() -> None:
    async def broken(request: Request) -> Response:
        async def chunks() -> Any:
            raise RuntimeError("the session broke")
            yield b""  # pragma: no cover

        return StreamingResponse(chunks(), media_type="text/plain")

    def app() -> Starlette:
        return Starlette(routes=[Route("/generate", broken, methods=["POST"])])

    seen = []
    raised = []
    for target in (app(), DecisionCacheMiddleware(app(), cache=DecisionCache())):
        client = Client()
        # Starlette 0.37 (its floor, in scripts/test-floors) raises it in
        # an ExceptionGroup of one; either way, the same with the middleware as without.
        with pytest.raises((RuntimeError, ExceptionGroup)) as error:
            await target(scope(), client.receive, client.send)
        raised.append(error.value)
        seen.append([(m["type"], m.get("status")) for m in client.messages])
    assert type(raised[0]) is type(raised[1])
    for exc in raised:
        while isinstance(exc, ExceptionGroup):
            (exc,) = exc.exceptions
        assert repr(exc) == "RuntimeError('the session broke')"
    # What the client gets is what it gets without the middleware: a 200, then a broken body.
    assert seen[0] == seen[1] == [("http.response.start", 200)]


async def test_extension_messages_pass_through_on_a_miss_and_never_break_a_hit() -> None:
    async def templated(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.debug", "info": {"template": "page.html"}})
        await send({"type": "http.response.push", "path": "/style.css", "headers": []})
        await send({"type": "http.response.start", "status": 200, "headers": [NDJSON]})
        await send({"type": "http.response.body", "body": b"{}\n"})

    middleware = DecisionCacheMiddleware(templated, cache=DecisionCache(), routes=["/generate"])
    miss, hit = Client(), Client()
    await middleware(scope(), miss.receive, miss.send)
    await middleware(scope(), hit.receive, hit.send)
    assert [m["type"] for m in miss.messages] == [
        "http.response.debug",
        "http.response.push",
        "http.response.start",
        "http.response.body",
    ]
    assert [m["type"] for m in hit.messages] == ["http.response.start", "http.response.body"]
    assert hit.header(b"x-cache") == b"hit" and hit.body == miss.body


@pytest.mark.parametrize(("status", "extra"), [(206, b"bytes 0-1/10"), (304, None)])
async def test_206_and_304_are_never_stored_whatever_statuses_says(
    status: int, extra: bytes | None
) -> None:
    async def partial(scope: Any, receive: Any, send: Any) -> None:
        calls.append(status)
        await receive()
        headers = [(b"content-range", extra)] if extra else []
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"ab" if extra else b""})

    calls: list[int] = []
    middleware = DecisionCacheMiddleware(
        partial, cache=DecisionCache(), routes=["/generate"], statuses=range(100, 600)
    )
    results = [await call(middleware, path="/generate", body=b"{}") for _ in range(2)]
    assert [r.cache for r in results] == ["miss", "miss"]
    assert len(calls) == 2


def test_followers_get_each_chunk_as_it_comes_under_trio() -> None:
    async def main() -> tuple[int, list[bytes], list[bytes]]:
        calls = 0
        step = trio.Semaphore(0)

        async def app(scope: Any, receive: Any, send: Any) -> None:
            nonlocal calls
            calls += 1
            await receive()
            await send({"type": "http.response.start", "status": 200, "headers": [NDJSON]})
            for index in range(2):
                await step.acquire()
                await send(
                    {"type": "http.response.body", "body": b"%d\n" % index, "more_body": index == 0}
                )

        middleware = DecisionCacheMiddleware(app, cache=DecisionCache(), routes=["/generate"])
        got: dict[str, list[bytes]] = {"leader": [], "follower": []}
        ended = trio.Event()

        def client(name: str) -> tuple[Any, Any]:
            asked = False

            async def receive() -> Message:
                nonlocal asked
                if not asked:
                    asked = True
                    return {"type": "http.request", "body": b"{}"}
                await ended.wait()
                return {"type": "http.disconnect"}

            async def send(message: Message) -> None:
                got[name].append(message.get("body", b"start"))

            return receive, send

        async with trio.open_nursery() as nursery:
            nursery.start_soon(middleware, scope(), *client("leader"))
            while not got["leader"]:  # noqa: ASYNC110 - polling another component's state
                await trio.sleep(0.001)
            nursery.start_soon(middleware, scope(), *client("follower"))
            while not got["follower"]:  # noqa: ASYNC110
                await trio.sleep(0.001)
            step.release()
            while len(got["follower"]) < 2:  # noqa: ASYNC110
                await trio.sleep(0.001)
            step.release()
        ended.set()
        return calls, got["leader"], got["follower"]

    calls, leader, follower = trio.run(main)
    assert calls == 1
    assert leader == follower == [b"start", b"0\n", b"1\n"]


async def test_the_leaders_client_gets_exactly_what_the_app_sent() -> None:
    # Trailers, and even a body after the last one: a server rejects that, not the middleware.
    sent = [
        {"type": "http.response.start", "status": 200, "headers": [NDJSON], "trailers": True},
        {"type": "http.response.body", "body": b"{}\n"},
        {"type": "http.response.trailers", "headers": [(b"x-sum", b"1")], "more_trailers": False},
        {"type": "http.response.body", "body": b"late"},
    ]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        for message in sent:
            await send(message)

    middleware = DecisionCacheMiddleware(app, cache=DecisionCache(), routes=["/generate"])
    client = Client()
    await middleware(scope(), client.receive, client.send)
    assert [m["type"] for m in client.messages] == [m["type"] for m in sent]
    assert client.messages[2]["headers"] == [(b"x-sum", b"1")]
    assert await middleware.cache.store.count() == 0  # trailers are not stored


async def test_alone_the_app_is_paced_by_its_clients_send() -> None:
    progress: list[str] = []
    release = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [NDJSON]})
        await send({"type": "http.response.body", "body": b"1", "more_body": True})
        progress.append("second chunk")
        await send({"type": "http.response.body", "body": b"2"})

    class SlowClient(Client):
        async def send(self, message: Message) -> None:
            if message["type"] == "http.response.body":
                await release.wait()
            await super().send(message)

    middleware = DecisionCacheMiddleware(app, cache=DecisionCache(), routes=["/generate"])
    client = SlowClient()
    task = asyncio.create_task(middleware(scope(), client.receive, client.send))
    await until(lambda: len(client.messages) == 1, "the client has its start")
    for _ in range(20):
        await asyncio.sleep(0)
    assert progress == []  # the first chunk is not taken yet: the app waits, as on a server
    release.set()
    await task
    assert client.body == b"12"


async def test_a_chunk_the_app_reuses_is_copied() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        buffer = bytearray(b"one")
        await send({"type": "http.response.start", "status": 200, "headers": [NDJSON]})
        await send({"type": "http.response.body", "body": memoryview(buffer), "more_body": True})
        buffer[:] = b"two"
        await send({"type": "http.response.body", "body": memoryview(buffer)})

    middleware = DecisionCacheMiddleware(app, cache=DecisionCache(), routes=["/generate"])
    await middleware(scope(), Client().receive, Client().send)
    hit = await call(middleware, path="/generate", body=b'{"prompt": "hi"}')
    assert (hit.cache, hit.body) == ("hit", b"onetwo")


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_extension_sent_right_after_the_start_reaches_the_client_in_its_step(
    backend: str,
) -> None:
    """Starlette's TestClient reads the debug extension as soon as the start arrives: a
    bare app's next message is there by then, and so must the middleware's be (it was
    missing in about half of these runs while the start message was paced)."""
    from starlette.testclient import TestClient

    from asyncache import DecisionCache
    from asyncache.middleware import DecisionCacheMiddleware

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        debug = {"template": "index.html", "context": {}}
        await send({"type": "http.response.debug", "info": debug})
        await send({"type": "http.response.body", "body": b"hello"})

    missing = 0
    for n in range(40):
        middleware = DecisionCacheMiddleware(
            app, cache=DecisionCache(), routes=None, methods=("GET",)
        )
        with warnings.catch_warnings():
            # Starlette 0.37.0's TestClient (its floor, in scripts/test-floors)
            # hands httpx 0.27 the app= shortcut it deprecates; the client is Starlette's.
            warnings.filterwarnings("ignore", "The 'app' shortcut", DeprecationWarning)
            client = TestClient(middleware, backend=backend)
        response = client.get(f"/{n}")
        assert response.text == "hello"
        # Starlette 0.37 (its floor) hands it on as response.template.
        missing += "http.response.debug" not in response.extensions and (
            getattr(response, "template", None) != "index.html"
        )
    assert missing == 0


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("last", ["body", "trailers"])
def test_the_apps_send_returns_once_its_client_has_the_message(backend: str, last: str) -> None:
    """A server's ``send`` returns once the message is on its way, and apps rely on it
    (Starlette's test_closing_completed_trailers_waits_for_application sets an event
    after sending its trailers and then reads them); the trailers were left unpaced."""
    import anyio

    from asyncache import DecisionCache
    from asyncache.middleware import DecisionCacheMiddleware

    received: list[str] = []
    seen_after_send: list[list[str]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        trailers = last == "trailers"
        await send({"type": "http.response.start", "status": 200, "trailers": trailers})
        await send({"type": "http.response.body", "body": b"hello"})
        seen_after_send.append(list(received))
        if trailers:
            await send({"type": "http.response.trailers", "headers": [(b"x-item", b"one")]})
            seen_after_send.append(list(received))

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        received.append(message["type"])

    async def main() -> None:
        middleware = DecisionCacheMiddleware(
            app, cache=DecisionCache(), routes=None, methods=("GET",)
        )
        scope = {"type": "http", "method": "GET", "path": "/", "headers": [], "query_string": b""}
        await middleware(scope, receive, send)

    anyio.run(main, backend=backend)
    start, body, trailers = "http.response.start", "http.response.body", "http.response.trailers"
    assert seen_after_send[0] == [start, body]
    if last == "trailers":
        assert seen_after_send[1] == [start, body, trailers]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_start_sent_before_the_app_waits_reaches_the_client_before_its_body(
    backend: str,
) -> None:
    """A whole response is held until the store decides, but only once the app sent it
    whole: an app that waits after its start message (for its client to have the
    headers, as a server-sent event's first beat does) gets them out at once."""
    import anyio

    async def main() -> list[str]:
        headers_arrived = anyio.Event()

        async def app(scope: Any, receive: Any, send: Any) -> None:
            await receive()
            await send({"type": "http.response.start", "status": 200, "headers": [NDJSON]})
            with anyio.fail_after(10):  # a hang guard: the start never left
                await headers_arrived.wait()
            await send({"type": "http.response.body", "body": b"{}\n"})

        middleware = DecisionCacheMiddleware(app, cache=DecisionCache(), routes=["/generate"])
        got: list[str] = []
        asked = False

        async def receive() -> Message:
            nonlocal asked
            if not asked:
                asked = True
                return {"type": "http.request", "body": b"{}", "more_body": False}
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

        async def send(message: Message) -> None:
            got.append(message["type"])
            if message["type"] == "http.response.start":
                headers_arrived.set()

        await middleware(make_scope(path="/generate"), receive, send)
        return got

    assert anyio.run(main, backend=backend) == ["http.response.start", "http.response.body"]
