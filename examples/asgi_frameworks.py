"""DecisionCacheMiddleware in front of Litestar, Quart and Django apps, served by uvicorn.

Each app answers ``POST /predict`` (a decision: cached) and ``POST /session``
(sets a cookie: never stored). Run it to see hits, misses and bypasses through
a real server on a loopback port.
"""

import asyncio
import socket
from collections import Counter

import httpx
import uvicorn

from asyncache import DecisionCache
from asyncache.middleware import DecisionCacheMiddleware

CACHED = ["/predict", "/session"]
calls: Counter[str] = Counter()  # how often each app really ran, by framework


def decide(text: str) -> str:
    return "refund" if "refund" in text else "other"


# --8<-- [start:litestar]
from litestar import Litestar, Request, Response, post
from litestar.datastructures import Cookie
from litestar.middleware import DefineMiddleware
from litestar.params import JSONBody


@post("/predict", status_code=200)  # Litestar answers a POST with 201 by default
async def litestar_predict(data: JSONBody[dict[str, str]]) -> dict[str, str]:
    calls["litestar"] += 1
    return {"label": decide(data["text"])}


@post("/session", status_code=200)
async def litestar_session(request: Request) -> Response[dict[str, bool]]:
    calls["litestar"] += 1
    token = f"token-{calls['litestar']}"  # one client's own session
    return Response({"ok": True}, cookies=[Cookie(key="session", value=token)])


litestar_cache = DecisionCache(ttl=3600)
litestar_app = Litestar(
    [litestar_predict, litestar_session],
    middleware=[DefineMiddleware(DecisionCacheMiddleware, cache=litestar_cache, routes=CACHED)],
    logging_config=None,  # leave the process's logging alone
)
# --8<-- [end:litestar]

# --8<-- [start:quart]
from quart import Quart, jsonify, request

quart_app = Quart(__name__)


@quart_app.post("/predict")
async def quart_predict() -> dict[str, str]:
    calls["quart"] += 1
    data = await request.get_json()
    return {"label": decide(data["text"])}


@quart_app.post("/session")
async def quart_session():
    calls["quart"] += 1
    response = jsonify(ok=True)
    response.set_cookie("session", f"token-{calls['quart']}")
    return response


quart_cache = DecisionCache(ttl=3600)
# Like Flask's wsgi_app: the middleware wraps the app's ASGI callable; serve quart_app.
quart_app.asgi_app = DecisionCacheMiddleware(quart_app.asgi_app, cache=quart_cache, routes=CACHED)
# --8<-- [end:quart]

# --8<-- [start:django]
import json

import django
from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.urls import path

settings.configure(  # a settings module in a real project; no database needed
    SECRET_KEY="not-a-secret-for-this-example",
    ROOT_URLCONF=__name__,
    ALLOWED_HOSTS=["127.0.0.1", "localhost"],
    INSTALLED_APPS=[],
    MIDDLEWARE=[],
    DATABASES={},
)
django.setup()


async def django_predict(request: HttpRequest) -> JsonResponse:
    calls["django"] += 1
    data = json.loads(request.body)
    return JsonResponse({"label": decide(data["text"])})


async def django_session(request: HttpRequest) -> JsonResponse:
    calls["django"] += 1
    response = JsonResponse({"ok": True})
    response.set_cookie("session", f"token-{calls['django']}")
    return response


urlpatterns = [path("predict", django_predict), path("session", django_session)]

from django.core.asgi import get_asgi_application  # after settings.configure

django_cache = DecisionCache(ttl=3600)
django_app = DecisionCacheMiddleware(get_asgi_application(), cache=django_cache, routes=CACHED)
# --8<-- [end:django]

APPS = {"litestar": litestar_app, "quart": quart_app, "django": django_app}


async def probe(name: str) -> None:
    """Serve one app with uvicorn on a free loopback port and send it requests."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    lifespan = "off" if name == "django" else "on"  # Django's handler speaks http only
    config = uvicorn.Config(APPS[name], port=port, lifespan=lifespan, log_level="warning")
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn offers a flag, not an event
        await asyncio.sleep(0.01)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        seen = []
        for headers in ({}, {}, {"Authorization": "Bearer t0ken"}):
            reply = await client.post("/predict", json={"text": "refund please"}, headers=headers)
            seen.append(f"{reply.headers['x-cache']} {reply.json()['label']}")
        cookies = []
        for _ in range(2):  # a response that sets a cookie is never stored, nor shared
            cookies.append((await client.post("/session", json={})).headers["x-cache"])
            client.cookies.clear()  # not sent back: a request with a Cookie would bypass
    server.should_exit = True
    await serving
    print(f"{name}: {', '.join(seen)}; set-cookie: {cookies}; app calls: {calls[name]}")


async def main() -> None:
    for name in APPS:
        await probe(name)


if __name__ == "__main__":
    asyncio.run(main())
