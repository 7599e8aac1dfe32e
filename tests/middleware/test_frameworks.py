"""Any ASGI framework: Litestar, Quart and Django apps behind the middleware, under uvicorn.

The apps are those of ``examples/asgi_frameworks.py`` (the docs include them),
each served by a real uvicorn on a free loopback port and driven by a real
httpx client: a repeat is a hit the app never sees, credentials bypass, and a
response that sets a cookie is neither stored nor handed to anyone else.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import ModuleType
from typing import Any

import httpx
import pytest

from tests.support import require, until

from . import uvicorn_serving

FRAMEWORKS = ("litestar", "quart", "django")


def _examples() -> ModuleType:
    for module in (*FRAMEWORKS, "uvicorn"):
        require(importlib.util.find_spec(module) is not None, f"needs {module}")
    return importlib.import_module("examples.asgi_frameworks")


@asynccontextmanager
async def serving(app: Any, name: str) -> AsyncIterator[httpx.AsyncClient]:
    # Django's ASGI handler speaks http only: no lifespan.
    async with uvicorn_serving(app, lifespan="off" if name == "django" else "on") as url:
        async with httpx.AsyncClient(base_url=url) as client:
            yield client


@pytest.fixture(params=FRAMEWORKS)
async def framework(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Any, str, Any]]:
    """(the examples module, the framework's name, a client of its app under uvicorn)."""
    examples = _examples()
    name: str = request.param
    cache = getattr(examples, f"{name}_cache")
    await cache.store.clear()
    cache.reset_stats()
    async with serving(examples.APPS[name], name) as client:
        yield examples, name, client


async def test_a_repeat_is_a_hit_the_app_never_sees(framework: tuple[Any, str, Any]) -> None:
    examples, name, client = framework
    before = examples.calls[name]
    first = await client.post("/predict", json={"text": "refund my order"})
    again = await client.post("/predict", json={"text": "refund my order"})
    other = await client.post("/predict", json={"text": "where is it"})
    assert [r.status_code for r in (first, again, other)] == [200, 200, 200]
    assert [r.headers["x-cache"] for r in (first, again, other)] == ["miss", "hit", "miss"]
    assert first.json() == again.json() == {"label": "refund"}
    assert other.json() == {"label": "other"}
    assert again.headers["content-type"] == first.headers["content-type"]
    assert examples.calls[name] - before == 2
    cache = getattr(examples, f"{name}_cache")
    # A response is stored once its last chunk has gone out: the client can read it first.
    await until(lambda: cache.stats()["stores"] >= 2, "both misses are stored")
    stats = cache.stats()
    assert (stats["hits"], stats["misses"], stats["stores"]) == (1, 2, 2)


@pytest.mark.parametrize(
    "credentials", [{"Authorization": "Bearer t0ken"}, {"Cookie": "session=abc"}]
)
async def test_credentials_bypass(
    framework: tuple[Any, str, Any], credentials: dict[str, str]
) -> None:
    examples, name, client = framework
    await client.post("/predict", json={"text": "refund"})  # stored, for everyone else
    before = examples.calls[name]
    private = [
        await client.post("/predict", json={"text": "refund"}, headers=credentials)
        for _ in range(2)
    ]
    assert [r.headers["x-cache"] for r in private] == ["bypass", "bypass"]
    assert examples.calls[name] - before == 2  # the app answered both itself
    assert (await client.post("/predict", json={"text": "refund"})).headers["x-cache"] == "hit"


async def test_a_response_that_sets_a_cookie_is_never_stored(
    framework: tuple[Any, str, Any],
) -> None:
    examples, name, client = framework
    cookies = []
    for _ in range(3):
        reply = await client.post("/session", json={})
        assert reply.status_code == 200
        assert reply.headers["x-cache"] == "miss"
        cookies.append(reply.cookies["session"])
        client.cookies.clear()  # a fresh client each time: no Cookie header to bypass on
    # Each client got the session the app made for it, never another client's.
    assert len(set(cookies)) == 3
    stats = getattr(examples, f"{name}_cache").stats()
    assert (stats["stores"], stats["hits"]) == (0, 0)
    assert await getattr(examples, f"{name}_cache").store.count() == 0
