"""The middleware's tags: ``tags=fn(scope)`` and the app's ``Cache-Tag`` header.

The header's tags are stored with the response and the header never reaches a
client: not on the miss that stored it, not on hits, not on answers the cache
does not store (bypasses, private responses). ``tag_header=None`` leaves it alone.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from asyncache import DecisionCache, MemoryStore
from asyncache.middleware import DecisionCacheMiddleware
from asyncache.tags import MARGIN


def _app(runs: list[int], header: bytes = b"cache-tag") -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        doc = json.loads(body)["doc"]
        runs.append(doc)
        headers = [
            (b"content-type", b"application/json"),
            (header, f"doc:{doc}, policy:7".encode()),
        ]
        if doc < 0:
            headers.append((b"cache-control", b"private"))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": json.dumps({"doc": doc}).encode()})

    return app


def _client(middleware: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=middleware), base_url="http://t")


async def test_the_cache_tag_header_is_stored_and_never_reaches_a_client() -> None:
    runs: list[int] = []
    cache = DecisionCache(MemoryStore(), namespace="api")
    middleware = DecisionCacheMiddleware(_app(runs), cache=cache, routes=["/p"])
    async with _client(middleware) as client:
        seen = []
        for doc in (1, 2, 1, 2, -1):
            response = await client.post("/p", json={"doc": doc})
            seen.append((response.headers["x-cache"], response.headers.get("cache-tag")))
        bypass = await client.post("/p", json={"doc": 3}, headers={"authorization": "x"})
        assert bypass.headers["x-cache"] == "bypass"
        assert "cache-tag" not in bypass.headers
        assert seen == [
            ("miss", None),
            ("miss", None),
            ("hit", None),
            ("hit", None),
            ("miss", None),
        ]
        assert await cache.forget(tags=["doc:1"]) == 1
        await asyncio.sleep(MARGIN)
        assert (await client.post("/p", json={"doc": 1})).headers["x-cache"] == "miss"
        assert (await client.post("/p", json={"doc": 2})).headers["x-cache"] == "hit"
        assert await cache.forget(tags=["policy:7"]) == 2
    assert runs == [1, 2, -1, 3, 1]


async def test_tags_from_the_request_and_the_scope() -> None:
    runs: list[int] = []
    cache = DecisionCache(MemoryStore(), namespace="api")

    async def tags(scope: Any) -> list[str]:
        return [f"route:{scope['path']}"]

    def tenant(scope: Any) -> str | None:
        value = dict(scope["headers"]).get(b"x-tenant")
        return None if value is None else value.decode()

    middleware = DecisionCacheMiddleware(
        _app(runs), cache=cache, routes=["/p", "/q"], tags=tags, scope=tenant
    )
    async with _client(middleware) as client:
        for path in ("/p", "/q"):
            for who in ("acme", "globex"):
                await client.post(path, json={"doc": 5}, headers={"x-tenant": who})
        assert await cache.forget(tags=["route:/p"]) == 2
        assert await cache.forget(scope="acme") == 1
        await asyncio.sleep(MARGIN)
        answers = [
            (await client.post(path, json={"doc": 5}, headers={"x-tenant": who})).headers["x-cache"]
            for path in ("/p", "/q")
            for who in ("acme", "globex")
        ]
    assert answers == ["miss", "miss", "miss", "hit"]


async def test_another_header_name_or_none() -> None:
    runs: list[int] = []
    cache = DecisionCache(MemoryStore(), namespace="api")
    named = DecisionCacheMiddleware(
        _app(runs, b"surrogate-key"), cache=cache, routes=["/p"], tag_header="Surrogate-Key"
    )
    async with _client(named) as client:
        response = await client.post("/p", json={"doc": 1})
        assert "surrogate-key" not in response.headers
    assert await cache.forget(tags=["doc:1"]) == 1

    untouched = DecisionCacheMiddleware(_app(runs), cache=cache, routes=["/p"], tag_header=None)
    async with _client(untouched) as client:
        miss = await client.post("/p", json={"doc": 2})
        hit = await client.post("/p", json={"doc": 2})
    assert miss.headers["cache-tag"] == hit.headers["cache-tag"] == "doc:2, policy:7"
    assert await cache.forget(tags=["doc:2"]) == 0
