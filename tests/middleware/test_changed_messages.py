"""What a send changes, or an app changes after sending it, changes nothing stored or shared.

ASGI hands message dicts from one side to the other. A middleware in front
(GZip rewrites ``body`` in place) or a server may change the messages it is
given, and an app may reuse one dict for its next chunk. The answer stored,
and what every other client gets, must still be what the app sent.
"""

from __future__ import annotations

import asyncio
from typing import Any

from asyncache import DecisionCache
from asyncache.middleware import DecisionCacheMiddleware

from ..support import until
from . import Answer, RecordingApp, call, make_scope

JSON = (b"content-type", b"application/json")
CHUNKS = [b'{"label":', b'"positive"}']


class Hostile:
    """A send that changes everything it is given, and counts what it got."""

    def __init__(self) -> None:
        self.sent = 0

    async def __call__(self, message: dict[str, Any]) -> None:
        self.sent += 1
        if message["type"] == "http.response.start":
            message["headers"].append((b"x-injected", b"yes"))
            message["headers"][0] = (b"content-type", b"text/evil")
            message["status"] = 500
        else:
            message["body"] = b"changed"


async def _request() -> dict[str, Any]:
    return {"type": "http.request", "body": b"{}", "more_body": False}


async def test_a_client_that_changes_what_a_hit_sent_changes_no_later_hit() -> None:
    app = RecordingApp(Answer(headers=[JSON, (b"x-model", b"v1")]))
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache())
    await call(middleware, body=b"{}")
    hostile = Hostile()
    for _ in range(3):
        await middleware(make_scope(headers=[JSON]), _request, hostile)
    clean = await call(middleware, body=b"{}")
    assert (clean.status, clean.cache, clean.body) == (200, "hit", b'{"label":"positive"}')
    assert clean.header("x-injected") is None
    assert clean.header("content-type") == "application/json"
    assert (app.calls, hostile.sent) == (1, 6)


async def test_a_send_that_changes_its_messages_changes_no_later_hit() -> None:
    app = RecordingApp(Answer(headers=[JSON, (b"x-model", b"v1")], chunks=CHUNKS))
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache())
    await middleware(make_scope(headers=[JSON]), _request, Hostile())  # the miss
    hit = await call(middleware, body=b"{}")
    assert (hit.status, hit.cache, hit.body) == (200, "hit", b"".join(CHUNKS))
    assert hit.header("content-type") == "application/json" and hit.header("x-model") == "v1"
    assert hit.header("x-injected") is None
    assert app.calls == 1


async def test_a_leaders_send_that_changes_its_messages_changes_no_follower_nor_the_entry() -> None:
    app = RecordingApp(Answer(headers=[JSON], chunks=CHUNKS))
    app.gate = asyncio.Event()
    cache = DecisionCache()
    middleware = DecisionCacheMiddleware(app, cache=cache)
    leader = asyncio.create_task(middleware(make_scope(headers=[JSON]), _request, Hostile()))
    await until(lambda: app.entered == 1, "the leader is in the app")
    follower = asyncio.create_task(call(middleware, body=b"{}"))
    await until(lambda: cache.stats()["coalesced"] == 1, "the follower waits")
    app.gate.set()
    await leader
    shared, hit = await follower, await call(middleware, body=b"{}")
    for result in (shared, hit):
        assert (result.status, result.body) == (200, b"".join(CHUNKS)), result.cache
        assert result.header("content-type") == "application/json"
        assert result.header("x-injected") is None
    assert (shared.cache, hit.cache, app.calls) == ("shared", "hit", 1)


async def test_an_app_that_reuses_one_message_for_each_chunk_is_stored_as_it_sent() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [JSON]})
        message = {"type": "http.response.body", "body": CHUNKS[0], "more_body": True}
        await send(message)
        message["body"], message["more_body"] = CHUNKS[1], False  # the same dict, reused
        await send(message)

    middleware = DecisionCacheMiddleware(app, cache=DecisionCache())
    first, second = await call(middleware, body=b"{}"), await call(middleware, body=b"{}")
    assert (first.cache, second.cache) == ("miss", "hit")
    assert first.body == second.body == b"".join(CHUNKS)
