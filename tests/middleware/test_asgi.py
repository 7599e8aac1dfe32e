"""The middleware as an ASGI citizen: pass-through scopes, options, the stats endpoint, imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

import asyncache.middleware
from asyncache import DecisionCache
from asyncache.middleware import CacheStatsEndpoint, DecisionCacheMiddleware, cache_stats

from . import Answer, RecordingApp, call, make_scope


class Spy:
    """An app that records exactly which scope, receive and send it was given."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, Any, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.seen.append((scope, receive, send))


@pytest.mark.parametrize("kind", ["lifespan", "websocket"])
async def test_lifespan_and_websocket_scopes_pass_through_untouched(kind: str) -> None:
    spy = Spy()
    middleware = DecisionCacheMiddleware(spy, cache=DecisionCache(), routes=None)
    scope = make_scope(scope_type=kind)
    snapshot = dict(scope)

    async def receive() -> dict[str, Any]:
        return {"type": f"{kind}.connect"}

    async def send(message: dict[str, Any]) -> None:
        pass

    await middleware(scope, receive, send)
    assert spy.seen == [(scope, receive, send)]
    assert spy.seen[0][1] is receive
    assert spy.seen[0][2] is send
    assert scope == snapshot


async def test_a_starlette_websocket_and_lifespan_work_under_the_middleware() -> None:
    events: list[str] = []

    async def echo(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.send_text(await websocket.receive_text())
        await websocket.close()

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app: Any) -> Any:
        events.append("startup")
        yield
        events.append("shutdown")

    app = Starlette(routes=[WebSocketRoute("/ws", echo)], lifespan=lifespan)
    app.add_middleware(DecisionCacheMiddleware, cache=DecisionCache(), routes=None)

    # Lifespan, as a server runs it.
    inbox = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    outbox: list[dict[str, Any]] = []

    async def lifespan_receive() -> dict[str, Any]:
        return inbox.pop(0)

    async def lifespan_send(message: dict[str, Any]) -> None:
        outbox.append(message)

    await app({"type": "lifespan", "asgi": {"version": "3.0"}}, lifespan_receive, lifespan_send)
    assert events == ["startup", "shutdown"]
    assert [m["type"] for m in outbox] == [
        "lifespan.startup.complete",
        "lifespan.shutdown.complete",
    ]

    # A websocket session.
    ws_inbox = [
        {"type": "websocket.connect"},
        {"type": "websocket.receive", "text": "ping"},
    ]
    ws_out: list[dict[str, Any]] = []

    async def ws_receive() -> dict[str, Any]:
        return ws_inbox.pop(0)

    async def ws_send(message: dict[str, Any]) -> None:
        ws_out.append(message)

    await app(make_scope("GET", "/ws", scope_type="websocket"), ws_receive, ws_send)
    assert [m["type"] for m in ws_out] == ["websocket.accept", "websocket.send", "websocket.close"]
    assert ws_out[1]["text"] == "ping"


async def test_options_are_checked() -> None:
    app = RecordingApp()
    with pytest.raises(ValueError, match="routes or paths"):
        DecisionCacheMiddleware(app, cache=DecisionCache(), routes=["/a"], paths=["/b"])
    with pytest.raises(ValueError, match="max_body_bytes"):
        DecisionCacheMiddleware(app, cache=DecisionCache(), max_body_bytes=-1)


async def test_paths_is_another_name_for_routes_and_methods_are_configurable() -> None:
    app = RecordingApp()
    middleware = DecisionCacheMiddleware(
        app, cache=DecisionCache(), paths=["/score"], methods=["post", "put"]
    )
    await call(middleware, method="PUT", path="/score", body=b"{}")
    assert (await call(middleware, method="PUT", path="/score", body=b"{}")).cache == "hit"
    assert (await call(middleware, method="POST", path="/score", body=b"{}")).cache == "miss"
    assert (await call(middleware, method="POST", path="/predict", body=b"{}")).cache is None


async def test_templated_routes_key_on_the_path() -> None:
    app = RecordingApp()
    middleware = DecisionCacheMiddleware(
        app, cache=DecisionCache(), routes=["/models/{name}/predict"]
    )
    for name in ("a", "b", "a"):
        await call(middleware, path=f"/models/{name}/predict", body=b"{}")
    assert app.calls == 2


async def test_query_strings_are_keyed_sorted() -> None:
    app = RecordingApp()
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache())
    await call(middleware, body=b"{}", query=b"a=1&b=2")
    assert (await call(middleware, body=b"{}", query=b"b=2&a=1")).cache == "hit"
    assert (await call(middleware, body=b"{}", query=b"b=3&a=1")).cache == "miss"


async def test_head_replays_the_apps_length() -> None:
    app = RecordingApp(Answer(headers=[(b"content-length", b"20")], chunks=[b""]))
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache(), methods=["HEAD"])
    await call(middleware, method="HEAD")
    hit = await call(middleware, method="HEAD")
    assert hit.cache == "hit"
    assert hit.header_values("content-length") == ["20"]


async def test_an_entry_that_is_not_a_response_is_not_replayed() -> None:
    cache = DecisionCache()
    app = RecordingApp()
    middleware = DecisionCacheMiddleware(app, cache=cache, routes=["/predict"])
    await call(middleware, body=b"{}")
    # Overwrite the entry with a decision of another shape under the same key.
    (key,) = list(cache.store._data)  # type: ignore[attr-defined]
    cache.store._data.clear()  # type: ignore[attr-defined]
    await cache.store_result(key, {"label": "not a response"})
    result = await call(middleware, body=b"{}")
    assert result.status == 200
    assert result.cache == "bypass"
    assert cache_stats(cache)["middleware"]["bypass_reasons"] == {"invalid_shape": 1}
    # The entry is deleted and counted: the next request stores a valid one.
    assert cache.stats()["corrupt"] == 1
    assert (await call(middleware, body=b"{}")).cache == "miss"
    assert (await call(middleware, body=b"{}")).cache == "hit"


async def test_the_stats_endpoint_serves_json() -> None:
    cache = DecisionCache()
    app = Starlette(routes=[Route("/cache/stats", CacheStatsEndpoint(cache))])
    app.add_middleware(DecisionCacheMiddleware, cache=cache, routes=["/predict"])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
        await client.post("/predict", json={})
        response = await client.get("/cache/stats")
        head = await client.head("/cache/stats")
        post = await client.post("/cache/stats")
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"
    stats = response.json()
    assert stats["misses"] == 1
    assert stats["middleware"]["miss"] == 1
    # The GET passed the middleware by (only POST is configured), and is the endpoint's own.
    assert stats["middleware"]["bypass_reasons"] == {}
    assert "hit_rate" in stats
    assert head.status_code == 200
    assert head.content == b""
    assert int(head.headers["content-length"]) > 0
    assert post.status_code == 405
    assert post.headers["allow"] == "GET, HEAD"


async def test_the_stats_endpoint_as_a_whole_app_handles_lifespan() -> None:
    endpoint = CacheStatsEndpoint(DecisionCache())
    inbox = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return inbox.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await endpoint({"type": "lifespan"}, receive, send)
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    result = await call(endpoint, method="GET", path="/")
    assert orjson.loads(result.body)["middleware"]["hit"] == 0


def test_the_middleware_imports_no_web_framework() -> None:
    code = (
        "import sys, asyncache.middleware\n"
        "bad = [m for m in ('starlette', 'fastapi', 'httpx', 'uvicorn') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_exports() -> None:
    assert sorted(asyncache.middleware.__all__) == asyncache.middleware.__all__
    for name in asyncache.middleware.__all__:
        assert getattr(asyncache.middleware, name) is not None


async def test_shadow_mode_serves_no_hits_but_fills_the_store() -> None:
    app = RecordingApp()
    cache = DecisionCache(mode="shadow")
    middleware = DecisionCacheMiddleware(app, cache=cache)
    results = [await call(middleware, body=b"{}") for _ in range(3)]
    assert [r.cache for r in results] == ["miss"] * 3
    assert app.calls == 3
    assert await cache.store.count() == 1


async def test_on_compute_sees_each_app_run() -> None:
    seconds: list[float] = []
    cache = DecisionCache()
    cache.on_compute = seconds.append
    middleware = DecisionCacheMiddleware(RecordingApp(), cache=cache)
    for _ in range(3):
        await call(middleware, body=b"{}")
    assert len(seconds) == 1
    assert seconds[0] >= 0.0


async def test_hits_from_a_store_on_disk_survive_a_new_cache(tmp_path: Path) -> None:
    from asyncache.stores.sqlite import SQLiteStore

    path = tmp_path / "decisions.db"
    app = RecordingApp(Answer(chunks=[b"\x00\xff binary \r\n", b"answer"]))
    async with DecisionCache(SQLiteStore(path)) as cache:
        first = await call(DecisionCacheMiddleware(app, cache=cache), body=b'{"a": 1}')
    async with DecisionCache(SQLiteStore(path)) as cache:
        middleware = DecisionCacheMiddleware(app, cache=cache)
        again = await call(middleware, body=b'{ "a" : 1 }')
    assert app.calls == 1
    assert (first.cache, again.cache) == ("miss", "hit")
    assert again.body == first.body == b"\x00\xff binary \r\nanswer"
    assert again.status == 200
