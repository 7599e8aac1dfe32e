"""Web cache poisoning, tried over real servers: one client must never make the
middleware serve another an answer the app would not have given it.

Each test is a finding of issue 23, tried as a tester would: uvicorn with
httptools and with h11, and hypercorn where the server decides what reaches
the app (two ``Host`` headers, header names with ``_``).
"""

from __future__ import annotations

import asyncio
import gc
import time
import tracemalloc
from email.utils import formatdate
from typing import TYPE_CHECKING, Any

import httpx
import orjson
import pytest
from asgiref.wsgi import WsgiToAsgi
from pydantic import BaseModel, StrictInt
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from asyncache import DecisionCache
from asyncache.keys import canonical
from asyncache.middleware import DecisionCacheMiddleware
from asyncache.stores import MemoryStore
from tests.support import until

from . import raw_exchange, serving

if TYPE_CHECKING:
    from fastapi import FastAPI

SERVERS = ["httptools", "h11", "hypercorn"]
UVICORN = ["httptools", "h11"]


def cached(app: Any, **options: Any) -> DecisionCacheMiddleware:
    options.setdefault("cache", DecisionCache())
    return DecisionCacheMiddleware(app, routes=["/predict"], **options)


# -- 1. integers of any size --------------------------------------------------------


class Strict(BaseModel):
    x: StrictInt


def strict_app() -> FastAPI:
    # Imported here: the floors job (scripts/test-floors) has no FastAPI to import.
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/predict")
    async def predict(body: Strict) -> dict[str, int]:
        return {"x": body.x}

    return app


@pytest.mark.parametrize("server", UVICORN)
async def test_an_integer_past_64_bits_never_answers_its_float(server: str) -> None:
    async with (
        serving(cached(strict_app()), server) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        headers = {"content-type": "application/json"}
        big = b'{"x": 100000000000000000000}'
        whole = await client.post("/predict", content=big, headers=headers)
        assert whole.status_code == 200
        assert whole.json() == {"x": 10**20}
        # The app answers the float 422 (StrictInt); a shared key served it the stored 200.
        floating = await client.post("/predict", content=b'{"x": 1e20}', headers=headers)
        assert floating.status_code == 422
        assert floating.headers["x-cache"] != "hit"
        again = await client.post("/predict", content=big, headers=headers)
        assert again.status_code == 200


def test_argument_values_keep_an_integer_and_its_float_apart() -> None:
    # What held for the decorator's arguments (keys.py): pinned beside the bodies.
    assert canonical({"x": 10**20}) != canonical({"x": 1e20})
    assert canonical([2**64]) != canonical([float(2**64)])
    assert canonical({"x": -(2**63) - 1}) != canonical({"x": float(-(2**63) - 1)})


# -- 2. what the key reads of the request headers -------------------------------------


async def by_content_type(request: Request) -> JSONResponse:
    await request.body()
    version = request.headers.get("content-type", "").partition("version=")[2] or "1"
    return JSONResponse({"version": version}, headers={"vary": "Content-Type"})


@pytest.mark.parametrize("server", UVICORN)
async def test_vary_content_type_keys_its_whole_value(server: str) -> None:
    app = Starlette(routes=[Route("/predict", by_content_type, methods=["POST"])])
    async with serving(cached(app), server) as url, httpx.AsyncClient(base_url=url) as client:
        one = await client.post("/predict", json={"a": 1})
        assert one.json() == {"version": "1"}
        two = await client.post(
            "/predict", content=b'{"a": 1}', headers={"content-type": "application/json; version=2"}
        )
        assert two.json() == {"version": "2"}
        again = await client.post(
            "/predict", content=b'{"a": 1}', headers={"content-type": "application/json; version=2"}
        )
        assert (again.json(), again.headers["x-cache"]) == ({"version": "2"}, "hit")


@pytest.mark.parametrize("server", SERVERS)
async def test_two_content_type_headers_bypass(server: str) -> None:
    app = Starlette(routes=[Route("/predict", by_content_type, methods=["POST"])])
    async with serving(cached(app), server) as url, httpx.AsyncClient(base_url=url) as client:
        both = [
            ("content-type", "application/json; version=2"),
            ("content-type", "application/json"),
        ]
        answer = await client.post("/predict", content=b"[1]", headers=both)
        assert answer.json() == {"version": "2"}  # the app reads the first
        assert answer.headers["x-cache"] == "bypass"
        joined = {"content-type": "application/json; version=2,application/json"}
        other = await client.post("/predict", content=b"[1]", headers=joined)
        assert other.headers["x-cache"] == "miss"


def personal_wsgi(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    """A WSGI app behind an ASGI bridge: ``x-api-key`` and ``x_api_key`` are both HTTP_X_API_KEY."""
    environ["wsgi.input"].read()
    user = environ.get("HTTP_X_API_KEY", "anonymous")
    start_response("200 OK", [("content-type", "application/json")])
    return [orjson.dumps({"hello": user})]


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("spelling", ["x_api_key", "X_Api-Key", "x-api_key"])
async def test_a_credential_header_in_any_spelling_bypasses(server: str, spelling: str) -> None:
    app = cached(WsgiToAsgi(personal_wsgi), credentials=["authorization", "cookie", "x-api-key"])
    async with serving(app, server) as url, httpx.AsyncClient(base_url=url) as client:
        alice = await client.post("/predict", json={"q": 1}, headers=[(spelling, "alice")])
        assert alice.json() == {"hello": "alice"}
        assert alice.headers["x-cache"] == "bypass"
        anonymous = await client.post("/predict", json={"q": 1})
        assert anonymous.json() == {"hello": "anonymous"}


async def link_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers a link built the way many apps build one: from dict(scope["headers"]), so
    the last Host, and from the forwarding headers a proxy would set."""
    while (await receive()).get("more_body", False):
        pass
    headers = dict(scope["headers"])
    host = headers.get(b"x-forwarded-host", headers.get(b"host", b"")).decode()
    proto = headers.get(b"x-forwarded-proto", scope["scheme"].encode()).decode()
    forwarded = headers.get(b"forwarded", b"").decode()
    body = orjson.dumps({"next": f"{proto}://{host}/next", "forwarded": forwarded})
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def test_two_host_headers_bypass() -> None:
    # uvicorn with httptools hands both on; h11 (uvicorn's other parser, hypercorn) refuses.
    async with serving(cached(link_app), "httptools") as url:
        post = b"POST /predict HTTP/1.1\r\ncontent-type: application/json\r\ncontent-length: 2"
        status, headers, body = await raw_exchange(
            url, post + b"\r\nhost: shop.example\r\nhost: evil.example", b"{}"
        )
        assert status == 200
        assert orjson.loads(body)["next"] == "http://evil.example/next"
        assert headers[b"x-cache"] == b"bypass"
        status, headers, body = await raw_exchange(url, post + b"\r\nhost: shop.example", b"{}")
        assert orjson.loads(body)["next"] == "http://shop.example/next"


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("x-forwarded-host", "evil.example"),
        ("x-forwarded-proto", "gopher"),
        ("forwarded", "host=evil.example"),
        ("X_Forwarded_Host", "evil.example"),
    ],
)
async def test_a_forwarding_header_bypasses_by_default(server: str, name: str, value: str) -> None:
    async with serving(cached(link_app), server) as url, httpx.AsyncClient(base_url=url) as client:
        attack = await client.post("/predict", json={}, headers=[(name, value)])
        assert attack.headers["x-cache"] == "bypass"
        victim = await client.post("/predict", json={})
        assert victim.headers["x-cache"] == "miss"
        assert "evil" not in victim.text and "gopher" not in victim.text


@pytest.mark.parametrize("server", UVICORN)
async def test_forwarding_key_keys_every_forwarding_header(server: str) -> None:
    app = cached(link_app, forwarding="key")
    async with serving(app, server) as url, httpx.AsyncClient(base_url=url) as client:
        forwarded = [("x-forwarded-host", "other.example")]
        first = await client.post("/predict", json={}, headers=forwarded)
        assert first.headers["x-cache"] == "miss"
        plain = await client.post("/predict", json={})
        assert plain.headers["x-cache"] == "miss"
        assert "other.example" not in plain.text
        again = await client.post("/predict", json={}, headers=forwarded)
        assert again.headers["x-cache"] == "hit"
        assert again.json() == first.json()


# -- 3. memory kept from requests -----------------------------------------------------


async def test_memory_kept_from_requests_is_bounded_in_bytes() -> None:
    app = Starlette(routes=[Route("/predict", by_content_type, methods=["POST"])])
    async with serving(cached(app), "httptools") as url, httpx.AsyncClient(base_url=url) as client:
        await client.post("/predict", json={})  # the server and client warmed up
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for index in range(60):
                value = f"application/json; pad={index:02d}" + "x" * (1024 * 1024)
                await client.post("/predict", content=b"{}", headers={"content-type": value})
            gc.collect()
            kept = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
    # Each request sent a 1 MiB header; before, the first 256 distinct ones stayed for good.
    assert kept < 8 * 1024 * 1024


# -- 4. lifetimes and Age -------------------------------------------------------------


def answering(headers: list[tuple[bytes, bytes]]) -> Any:
    calls: list[int] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        while (await receive()).get("more_body", False):
            pass
        calls.append(1)
        start = {"type": "http.response.start", "status": 200, "headers": headers}
        await send(start)
        await send({"type": "http.response.body", "body": b'{"n": %d}' % len(calls)})

    app.calls = calls  # type: ignore[attr-defined]
    return app


async def stored_expiries(store: MemoryStore) -> list[float | None]:
    return [entry.expires_at async for batch in store.entries() for _, entry in batch]


@pytest.mark.parametrize("server", UVICORN)
@pytest.mark.parametrize(
    "lifetime",
    [
        [(b"cache-control", b"max-age=1")],
        [(b"cache-control", b"public, s-maxage=1, max-age=600")],
        [(b"expires", b"in 1 s")],
    ],
    ids=["max-age", "s-maxage", "expires"],
)
async def test_a_response_lifetime_caps_its_entry(
    server: str, lifetime: list[tuple[bytes, bytes]]
) -> None:
    if lifetime[0][0] == b"expires":
        # HTTP dates are whole seconds: one second ahead of now, rounded up.
        lifetime = [(b"expires", formatdate(int(time.time()) + 2, usegmt=True).encode())]
    store = MemoryStore()
    app = answering([(b"content-type", b"application/json"), *lifetime])
    middleware = cached(app, cache=DecisionCache(store, ttl=300))
    async with serving(middleware, server) as url, httpx.AsyncClient(base_url=url) as client:
        asked = time.time()
        first = await client.post("/predict", json={})
        assert first.headers["x-cache"] == "miss"
        [expires_at] = await stored_expiries(store)
        # The cache's ttl is 300 s; the response said 1 s (Expires: up to 2).
        assert expires_at is not None
        assert expires_at <= asked + 2


async def test_a_stale_entry_is_not_served_past_its_max_age() -> None:
    app = answering([(b"content-type", b"application/json"), (b"cache-control", b"max-age=1")])
    middleware = cached(app, cache=DecisionCache(ttl=300))
    async with serving(middleware, "httptools") as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.post("/predict", json={})).headers["x-cache"] == "miss"
        assert (await client.post("/predict", json={})).headers["x-cache"] == "hit"
        await _sleep_past(1.2)
        later = await client.post("/predict", json={})
        assert later.headers["x-cache"] == "miss"
        assert later.json() == {"n": 2}


async def _sleep_past(seconds: float) -> None:
    await asyncio.sleep(seconds)


@pytest.mark.parametrize("server", UVICORN)
async def test_a_hit_computes_its_age(server: str) -> None:
    generated = formatdate(time.time() - 30, usegmt=True).encode()
    app = answering(
        [
            (b"content-type", b"application/json"),
            (b"date", generated),
            (b"cache-control", b"max-age=600"),
        ]
    )
    async with serving(cached(app), server) as url, httpx.AsyncClient(base_url=url) as client:
        await client.post("/predict", json={})
        hit = await client.post("/predict", json={})
        assert hit.headers["x-cache"] == "hit"
        # Generated 30 s ago (its Date): a hit says so, counted from then.
        assert 30 <= int(hit.headers["age"]) < 600


@pytest.mark.parametrize("server", UVICORN)
async def test_the_apps_age_is_recomputed_not_replayed(server: str) -> None:
    app = answering(
        [
            (b"content-type", b"application/json"),
            (b"age", b"100"),
            (b"cache-control", b"max-age=103"),
        ]
    )
    async with serving(cached(app), server) as url, httpx.AsyncClient(base_url=url) as client:
        await client.post("/predict", json={})
        await _sleep_past(1.1)
        hit = await client.post("/predict", json={})
        assert hit.headers["x-cache"] == "hit"
        assert hit.headers.get_list("age") == [hit.headers["age"]]  # one Age, ours
        assert int(hit.headers["age"]) >= 101


# -- 6. the smaller ones --------------------------------------------------------------


@pytest.mark.parametrize("server", UVICORN)
@pytest.mark.parametrize(
    "header",
    [
        (b"cache-control", b"no-store;"),
        (b"cache-control", b"public, private;x=1"),
        (b"set-cookie2", b"session=alice"),
        (b"Set-Cookie2", b"session=alice"),
    ],
)
async def test_responses_a_shared_cache_must_not_keep_are_not_stored(
    server: str, header: tuple[bytes, bytes]
) -> None:
    app = answering([(b"content-type", b"application/json"), header])
    async with serving(cached(app), server) as url, httpx.AsyncClient(base_url=url) as client:
        await client.post("/predict", json={})
        again = await client.post("/predict", json={})
        assert again.headers["x-cache"] == "miss"
        assert again.json() == {"n": 2}


async def pairs(request: Request) -> JSONResponse:
    await request.body()
    return JSONResponse({"pairs": request.query_params.multi_items()})


@pytest.mark.parametrize("server", UVICORN)
async def test_interleaved_repeated_query_names_key_in_the_order_sent(server: str) -> None:
    app = Starlette(routes=[Route("/predict", pairs, methods=["POST"])])
    async with serving(cached(app), server) as url, httpx.AsyncClient(base_url=url) as client:
        one = await client.post("/predict?a=1&b=2&a=3", json={})
        other = await client.post("/predict?a=1&a=3&b=2", json={})
        assert other.headers["x-cache"] == "miss"
        assert one.json() != other.json()
        assert other.json() == {"pairs": [["a", "1"], ["a", "3"], ["b", "2"]]}
        swapped = await client.post("/predict?b=2&c=1", json={})
        same = await client.post("/predict?c=1&b=2", json={})  # no repeats: sorted, shared
        assert (swapped.headers["x-cache"], same.headers["x-cache"]) == ("miss", "hit")


# -- 5. one tenant cannot evict another past its budget ------------------------------


async def tenant_echo(request: Request) -> JSONResponse:
    return JSONResponse({"tenant": request.headers["x-tenant"], "body": await request.json()})


@pytest.mark.parametrize("server", UVICORN)
async def test_one_tenant_cannot_evict_another_past_its_budget(server: str) -> None:
    store = MemoryStore(max_entries=1000, max_entries_per_scope=4)
    app = Starlette(routes=[Route("/predict", tenant_echo, methods=["POST"])])
    middleware = cached(
        app,
        cache=DecisionCache(store),
        scope=lambda scope: dict(scope["headers"]).get(b"x-tenant", b"").decode() or None,
    )
    async with serving(middleware, server) as url, httpx.AsyncClient(base_url=url) as client:
        victim = {"x-tenant": "victim"}
        for n in range(3):
            await client.post("/predict", json={"n": n}, headers=victim)
        attacker = {"x-tenant": "attacker"}
        for n in range(50):  # far past its budget: it evicts only its own entries
            await client.post("/predict", json={"n": n}, headers=attacker)
        for n in range(3):
            again = await client.post("/predict", json={"n": n}, headers=victim)
            assert again.headers["x-cache"] == "hit"
        assert len(store) == 3 + 4


# -- 7. followers share only what the cache would store, and wait only so long --------


def quota_app(cache: DecisionCache, released: asyncio.Event) -> Starlette:
    """An app whose quota (by a header the key does not read, as a client address) turns
    one client away, or throttles it until ``released``."""

    async def predict(request: Request) -> JSONResponse:
        body = await request.json()
        client = request.headers.get("x-client")
        if client in ("over-quota", "throttled"):
            # Held until an identical request of someone else's waits on this run.
            await until(lambda: cache.stats()["coalesced"] >= 1, "the victim follows")
            if client == "over-quota":
                return JSONResponse({"error": "quota exceeded"}, status_code=503)
            await released.wait()
        return JSONResponse({"label": body["text"].upper()})

    return Starlette(routes=[Route("/predict", predict, methods=["POST"])])


@pytest.mark.parametrize("server", UVICORN)
async def test_a_leaders_5xx_is_not_handed_to_its_followers(server: str) -> None:
    cache = DecisionCache()
    app = cached(quota_app(cache, asyncio.Event()), cache=cache)
    async with serving(app, server) as url, httpx.AsyncClient(base_url=url) as client:
        attacker = asyncio.create_task(
            client.post("/predict", json={"text": "hi"}, headers={"x-client": "over-quota"})
        )
        await until(lambda: cache.stats()["in_flight"] == 1, "the attacker's run started")
        async with asyncio.timeout(10):
            victim = await client.post("/predict", json={"text": "hi"})
        assert (victim.status_code, victim.json()) == (200, {"label": "HI"})
        assert victim.headers["x-cache"] == "miss"
        assert (await attacker).status_code == 503


@pytest.mark.parametrize("server", UVICORN)
async def test_a_follower_does_not_wait_on_a_throttled_leader(server: str) -> None:
    cache = DecisionCache()  # coalesce_timeout 300 s; follower_timeout follows the route
    released = asyncio.Event()
    app = cached(quota_app(cache, released), cache=cache)
    async with serving(app, server) as url, httpx.AsyncClient(base_url=url) as client:
        for text in ("a", "b", "c"):  # the route's typical run: a few milliseconds
            await client.post("/predict", json={"text": text})
        attacker = asyncio.create_task(
            client.post("/predict", json={"text": "hi"}, headers={"x-client": "throttled"})
        )
        await until(lambda: cache.stats()["in_flight"] == 1, "the attacker's run started")
        try:
            # A hang guard, not a timing claim: before, the victim waited up to 300 s.
            async with asyncio.timeout(10):
                victim = await client.post("/predict", json={"text": "hi"})
        finally:
            released.set()
        assert (victim.status_code, victim.json()) == (200, {"label": "HI"})
        assert victim.headers["x-cache"] == "miss"
        assert cache.stats()["coalesce_timeouts"] == 1
        assert (await attacker).status_code == 200
