"""Nothing private is ever stored or shared: real Starlette and FastAPI apps, in process."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from asyncache import DecisionCache
from asyncache.middleware import DecisionCacheMiddleware, cache_stats


class Service:
    """A Starlette service whose endpoints count their calls."""

    def __init__(self, **options: Any) -> None:
        self.calls: Counter[str] = Counter()
        self.bodies: list[bytes] = []
        self.cache = DecisionCache()
        routes = [
            Route("/predict", self.predict, methods=["POST", "GET"]),
            Route("/cookie", self.cookie, methods=["POST"]),
            Route("/private", self.private, methods=["POST"]),
            Route("/fail", self.fail, methods=["POST"]),
            Route("/raw", self.raw, methods=["POST"]),
            Route("/tenant", self.tenant, methods=["POST"]),
            Route("/vary", self.vary, methods=["POST"]),
            Route("/hop", self.hop, methods=["POST"]),
            Route("/stream", self.stream, methods=["POST"]),
            Route("/events", self.events, methods=["POST"]),
        ]
        options.setdefault("routes", [route.path for route in routes])
        self.app = Starlette(
            routes=routes,
            middleware=[Middleware(DecisionCacheMiddleware, cache=self.cache, **options)],
        )

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://svc")

    async def predict(self, request: Request) -> Response:
        self.calls["predict"] += 1
        data = await request.json() if request.method == "POST" else dict(request.query_params)
        return JSONResponse({"label": "positive", "echo": data, "n": self.calls["predict"]})

    async def cookie(self, request: Request) -> Response:
        self.calls["cookie"] += 1
        response = JSONResponse({"user": self.calls["cookie"]})
        response.set_cookie("session", f"secret-{self.calls['cookie']}")
        return response

    async def private(self, request: Request) -> Response:
        self.calls["private"] += 1
        return JSONResponse({"n": self.calls["private"]}, headers={"Cache-Control": "private"})

    async def fail(self, request: Request) -> Response:
        self.calls["fail"] += 1
        return JSONResponse({"error": "model crashed"}, status_code=500)

    async def raw(self, request: Request) -> Response:
        self.calls["raw"] += 1
        body = await request.body()
        self.bodies.append(body)
        return JSONResponse({"sha": hashlib.sha256(body).hexdigest(), "size": len(body)})

    async def tenant(self, request: Request) -> Response:
        self.calls["tenant"] += 1
        data = await request.json()
        return JSONResponse({"tenant": request.headers.get("x-tenant"), "text": data["text"]})

    async def vary(self, request: Request) -> Response:
        self.calls["vary"] += 1
        language = request.headers.get("accept-language")
        return JSONResponse({"language": language}, headers={"Vary": "Accept-Language"})

    async def hop(self, request: Request) -> Response:
        self.calls["hop"] += 1
        return Response(
            b"hello",
            media_type="text/plain",
            headers={"Connection": "keep-alive", "Keep-Alive": "timeout=5", "X-Model": "v3"},
        )

    async def stream(self, request: Request) -> Response:
        self.calls["stream"] += 1

        async def parts() -> AsyncIterator[bytes]:
            for part in (b"one,", b"two,", b"three"):
                yield part

        return StreamingResponse(parts(), media_type="text/plain")

    async def events(self, request: Request) -> Response:
        self.calls["events"] += 1

        async def parts() -> AsyncIterator[bytes]:
            yield b"data: 1\n\n"

        return StreamingResponse(parts(), media_type="text/event-stream")


async def test_a_hit_never_calls_the_app() -> None:
    service = Service()
    async with service.client() as client:
        first = await client.post("/predict", json={"text": "good"})
        hits = [await client.post("/predict", json={"text": "good"}) for _ in range(5)]
    assert service.calls["predict"] == 1
    assert first.headers["x-cache"] == "miss"
    assert {r.headers["x-cache"] for r in hits} == {"hit"}
    assert {r.content for r in hits} == {first.content}
    assert service.cache.stats()["hits"] == 5


async def test_set_cookie_responses_are_never_stored_or_shared() -> None:
    service = Service()
    async with service.client() as client:
        first = await client.post("/cookie", json={})
        # The client would send the cookie back (and bypass): this is another client.
        client.cookies.clear()
        second = await client.post("/cookie", json={})
    assert service.calls["cookie"] == 2
    assert (first.headers["x-cache"], second.headers["x-cache"]) == ("miss", "miss")
    assert first.cookies["session"] != second.cookies["session"]
    assert await service.cache.store.count() == 0


async def test_private_responses_are_never_stored() -> None:
    service = Service()
    async with service.client() as client:
        answers = [(await client.post("/private", json={})).json()["n"] for _ in range(3)]
    assert answers == [1, 2, 3]
    assert await service.cache.store.count() == 0


async def test_two_tenants_with_the_same_body_never_share_an_entry() -> None:
    service = Service(scope=lambda scope: dict(scope["headers"]).get(b"x-tenant"))
    async with service.client() as client:
        a1 = await client.post("/tenant", json={"text": "x"}, headers={"x-tenant": "a"})
        b1 = await client.post("/tenant", json={"text": "x"}, headers={"x-tenant": "b"})
        a2 = await client.post("/tenant", json={"text": "x"}, headers={"x-tenant": "a"})
        b2 = await client.post("/tenant", json={"text": "x"}, headers={"x-tenant": "b"})
    assert service.calls["tenant"] == 2
    assert a1.json()["tenant"] == a2.json()["tenant"] == "a"
    assert b1.json()["tenant"] == b2.json()["tenant"] == "b"
    assert (a2.headers["x-cache"], b2.headers["x-cache"]) == ("hit", "hit")


@pytest.mark.parametrize("header", ["Authorization", "Cookie"])
async def test_credentials_without_a_scope_function_bypass(header: str) -> None:
    service = Service()
    async with service.client() as client:
        for _ in range(3):
            response = await client.post("/predict", json={"t": 1}, headers={header: "x=secret"})
            assert response.headers["x-cache"] == "bypass"
    assert service.calls["predict"] == 3
    assert await service.cache.store.count() == 0
    assert cache_stats(service.cache)["middleware"]["bypass_reasons"] == {"credentials": 3}


async def test_credentials_with_a_scope_function_key_on_the_principal() -> None:
    def principal(scope: Any) -> str | None:
        token = dict(scope["headers"]).get(b"authorization", b"")
        return token.decode().removeprefix("Bearer ") or None

    service = Service(scope=principal)
    async with service.client() as client:
        alice = [
            await client.post("/predict", json={}, headers={"Authorization": "Bearer alice"})
            for _ in range(2)
        ]
        bob = await client.post("/predict", json={}, headers={"Authorization": "Bearer bob"})
        # A credential the scope function cannot place bypasses.
        odd = await client.post("/predict", json={}, headers={"Authorization": "Bearer "})
    assert [r.headers["x-cache"] for r in alice] == ["miss", "hit"]
    assert bob.headers["x-cache"] == "miss"
    assert odd.headers["x-cache"] == "bypass"
    assert service.calls["predict"] == 3


async def test_a_scope_function_that_raises_bypasses() -> None:
    def broken(scope: Any) -> str:
        raise PermissionError("no tenant")

    service = Service(scope=broken)
    async with service.client() as client:
        response = await client.post("/predict", json={})
    assert response.status_code == 200
    assert response.headers["x-cache"] == "bypass"


async def test_a_500_is_not_cached() -> None:
    service = Service()
    async with service.client() as client:
        statuses = [(await client.post("/fail", json={})).status_code for _ in range(3)]
    assert statuses == [500, 500, 500]
    assert service.calls["fail"] == 3
    assert cache_stats(service.cache)["middleware"]["not_admitted_reasons"] == {"failure": 3}


async def test_a_body_over_the_cap_reaches_the_app_intact() -> None:
    service = Service(max_body_bytes=1000)
    body = bytes(range(256)) * 40  # 10 KiB, every byte value

    async def chunks() -> AsyncIterator[bytes]:
        # No Content-Length: the middleware finds out while reading.
        for start in range(0, len(body), 777):
            yield body[start : start + 777]

    async with service.client() as client:
        declared = await client.post("/raw", content=body)
        streamed = await client.post("/raw", content=chunks())
    assert service.bodies == [body, body]
    assert declared.json()["sha"] == hashlib.sha256(body).hexdigest()
    assert declared.headers["x-cache"] == streamed.headers["x-cache"] == "bypass"
    reasons = cache_stats(service.cache)["middleware"]["bypass_reasons"]
    assert reasons == {"body_too_large": 2}


async def test_malformed_json_reaches_the_app_untouched() -> None:
    service = Service()
    body = b'{"text": "unterminated \xff'
    async with service.client() as client:
        first = await client.post(
            "/raw", content=body, headers={"content-type": "application/json"}
        )
        again = await client.post(
            "/raw", content=body, headers={"content-type": "application/json"}
        )
    assert service.bodies == [body]
    assert first.json()["size"] == len(body)
    assert again.headers["x-cache"] == "hit"


async def test_vary_on_an_unkeyed_header_is_not_stored_and_on_a_keyed_one_is() -> None:
    unkeyed = Service()
    async with unkeyed.client() as client:
        for _ in range(2):
            await client.post("/vary", json={}, headers={"Accept-Language": "en"})
    assert unkeyed.calls["vary"] == 2

    keyed = Service(vary=["Accept-Language"])
    async with keyed.client() as client:
        en = [await client.post("/vary", json={}, headers={"Accept-Language": "en"}) for _ in "ab"]
        fr = await client.post("/vary", json={}, headers={"Accept-Language": "fr"})
        empty = [await client.post("/vary", json={}, headers={"Accept-Language": ""}) for _ in "ab"]
        absent = await client.post("/vary", json={})
    assert [r.headers["x-cache"] for r in en] == ["miss", "hit"]
    assert fr.json() == {"language": "fr"}
    assert [r.headers["x-cache"] for r in empty] == ["miss", "hit"]
    assert empty[1].json() == {"language": ""}
    assert absent.headers["x-cache"] == "miss"
    assert absent.json() == {"language": None}
    assert keyed.calls["vary"] == 4


async def test_hop_by_hop_headers_are_not_replayed_and_length_is_right() -> None:
    service = Service()
    async with service.client() as client:
        await client.post("/hop", json={})
        hit = await client.post("/hop", json={})
    assert hit.headers["x-cache"] == "hit"
    assert "keep-alive" not in hit.headers
    assert "connection" not in hit.headers
    assert hit.headers["x-model"] == "v3"
    assert hit.headers["content-length"] == "5"
    assert hit.content == b"hello"


async def test_a_streamed_response_is_stored_whole() -> None:
    service = Service()
    async with service.client() as client:
        first = await client.post("/stream", json={})
        hit = await client.post("/stream", json={})
    assert first.content == hit.content == b"one,two,three"
    assert hit.headers["x-cache"] == "hit"
    # The app sent no length (it streamed): neither does its hit, so both read alike.
    assert "content-length" not in first.headers
    assert "content-length" not in hit.headers


async def test_event_streams_are_never_stored() -> None:
    service = Service()
    async with service.client() as client:
        for _ in range(2):
            await client.post("/events", json={})
    assert service.calls["events"] == 2


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({"Cache-Control": "max-age=0, No-Store"}, "no_store"),
        ({"Content-Encoding": "gzip"}, "content_encoding"),
    ],
)
async def test_request_side_bypasses(headers: dict[str, str], reason: str) -> None:
    service = Service(cache_status=True)
    async with service.client() as client:
        await client.post("/predict", json={"a": 1})
        response = await client.post("/predict", json={"a": 1}, headers=headers)
    assert response.headers["x-cache"] == "bypass"
    assert service.calls["predict"] == 2
    detail = "no-store" if reason == "no_store" else reason
    assert response.headers["cache-status"].endswith(f"detail={detail}")


async def test_unconfigured_methods_and_routes_pass_through_without_a_header() -> None:
    service = Service(routes=["/predict"])
    async with service.client() as client:
        get = await client.get("/predict", params={"x": 1})
        other = await client.post("/raw", content=b"x")
    assert "x-cache" not in get.headers
    assert "x-cache" not in other.headers
    assert cache_stats(service.cache)["middleware"]["bypass_reasons"] == {"method": 1, "route": 1}


async def test_status_headers_never_carry_the_key() -> None:
    service = Service(status_header="X-Decision-Cache", cache_status="edge-1")
    async with service.client() as client:
        miss = await client.post("/predict", json={"q": 1})
        hit = await client.post("/predict", json={"q": 1})
    assert miss.headers["x-decision-cache"] == "miss"
    assert hit.headers["x-decision-cache"] == "hit"
    assert "x-cache" not in hit.headers
    assert miss.headers["cache-status"] == "edge-1; fwd=uri-miss"
    assert hit.headers["cache-status"] == "edge-1; hit"
    (key,) = list(service.cache.store._data)  # type: ignore[attr-defined]
    for response in (miss, hit):
        text = str(response.headers.raw).lower()
        assert key.hex() not in text
        assert "key=" not in text


async def test_no_status_header_when_disabled_by_config() -> None:
    service = Service(status_header=None)
    async with service.client() as client:
        await client.post("/predict", json={})
        hit = await client.post("/predict", json={})
    assert "x-cache" not in hit.headers
    assert service.calls["predict"] == 1


async def test_a_disabled_cache_says_so_and_calls_the_app() -> None:
    service = Service()
    service.cache.enabled = False
    async with service.client() as client:
        responses = [await client.post("/predict", json={}) for _ in range(2)]
    assert [r.headers["x-cache"] for r in responses] == ["disabled", "disabled"]
    assert service.calls["predict"] == 2


async def test_on_hit_meters_and_can_refuse_hits() -> None:
    seen: list[str] = []

    async def on_hit(scope: Any) -> bool:
        seen.append(scope["path"])
        return dict(scope["headers"]).get(b"x-plan") != b"free"

    service = Service(on_hit=on_hit)
    async with service.client() as client:
        await client.post("/predict", json={"a": 1})
        paid = await client.post("/predict", json={"a": 1}, headers={"x-plan": "pro"})
        free = await client.post("/predict", json={"a": 1}, headers={"x-plan": "free"})
    assert seen == ["/predict", "/predict"]
    assert paid.headers["x-cache"] == "hit"
    assert free.headers["x-cache"] == "bypass"
    assert service.calls["predict"] == 2


class Query(BaseModel):
    text: str
    top_k: int = 1


async def test_fastapi_add_middleware_and_pydantic_bodies() -> None:
    # Imported here: the floors job (scripts/test-floors) has no FastAPI to import.
    from fastapi import FastAPI

    calls = Counter[str]()
    app = FastAPI()
    cache = DecisionCache()

    @app.post("/predict")
    async def predict(query: Query) -> dict[str, Any]:
        calls["predict"] += 1
        return {"label": "positive", "text": query.text}

    app.add_middleware(DecisionCacheMiddleware, cache=cache, routes=["/predict"])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
        first = await client.post("/predict", json={"text": "hi", "top_k": 1})
        # The same JSON with other spacing and key order is the same request.
        reordered = await client.post(
            "/predict",
            content=b'{ "top_k":1,\n "text":"hi"}',
            headers={"content-type": "application/json"},
        )
        invalid = [await client.post("/predict", json={"top_k": 1}) for _ in range(2)]
    assert first.json() == reordered.json() == {"label": "positive", "text": "hi"}
    assert (first.headers["x-cache"], reordered.headers["x-cache"]) == ("miss", "hit")
    assert [r.status_code for r in invalid] == [422, 422]
    assert [r.headers["x-cache"] for r in invalid] == ["miss", "miss"]
    assert calls["predict"] == 1
