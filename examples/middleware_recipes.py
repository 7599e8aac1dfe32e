"""The snippets of docs/middleware.md, run: a FastAPI service, tenants, admit, stats."""

import asyncio
from types import SimpleNamespace

import httpx

# isort: split

# --8<-- [start:fastapi]
import os
import secrets

from fastapi import Depends, FastAPI, Header, HTTPException

from asyncache import DecisionCache
from asyncache.middleware import DecisionCacheMiddleware, cache_stats

app = FastAPI()
cache = DecisionCache(fingerprint="ticket-triage-v2", ttl=3600)
app.add_middleware(DecisionCacheMiddleware, cache=cache, routes=["/predict"])


def operator(authorization: str = Header("")) -> None:
    """The counters show every tenant's traffic: operators only."""
    token = os.environ.get("CACHE_STATS_TOKEN", "")
    if not token or not secrets.compare_digest(authorization, f"Bearer {token}"):
        raise HTTPException(status_code=403)


@app.get("/cache/stats", dependencies=[Depends(operator)])
async def stats() -> dict:
    return cache_stats(cache)


# --8<-- [end:fastapi]


@app.post("/predict")
async def predict(ticket: dict) -> dict:
    fallback = "" == ticket.get("text", "")
    return {
        "label": "refund" if "refund" in ticket.get("text", "") else "other",
        "fallback": fallback,
    }


# --8<-- [start:tenant]
def tenant(scope) -> str | None:
    user = scope.get("user")  # set by your authentication middleware
    return user.tenant_id if user is not None and user.is_authenticated else None


# --8<-- [end:tenant]


# --8<-- [start:admit]
def admit(scope, response) -> bool:
    return response.json().get("fallback") is not True


# --8<-- [end:admit]


class FakeAuth:
    """Stands in for an authentication middleware: a Bearer token names the user's tenant."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            token = dict(scope["headers"]).get(b"authorization", b"").removeprefix(b"Bearer ")
            known = token in (b"acme", b"globex")
            user = SimpleNamespace(tenant_id=token.decode(), is_authenticated=known)
            scope = {**scope, "user": user if token else None}
        await self.app(scope, receive, send)


def tenant_app() -> FastAPI:
    app = FastAPI()
    app.post("/predict")(predict)
    # --8<-- [start:scoped]
    app.add_middleware(DecisionCacheMiddleware, cache=cache, routes=["/predict"], scope=tenant)
    # --8<-- [end:scoped]
    app.add_middleware(FakeAuth)  # added last: runs first, and sets scope["user"]
    return app


def admit_app() -> FastAPI:
    app = FastAPI()
    app.post("/predict")(predict)
    app.add_middleware(DecisionCacheMiddleware, cache=DecisionCache(), admit=admit)
    return app


def stats_apps() -> tuple[object, object]:
    app = FastAPI()
    # --8<-- [start:endpoint]
    import os
    import secrets

    from starlette.routing import Route

    from asyncache.middleware import CacheStatsEndpoint

    def operator_only(scope) -> bool:
        token = os.environ.get("CACHE_STATS_TOKEN", "")
        given = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        return bool(token) and secrets.compare_digest(given, f"Bearer {token}".encode())

    endpoint = CacheStatsEndpoint(cache, allow=operator_only)
    routes = [Route("/cache/stats", endpoint)]  # Starlette
    app.add_route("/cache/stats", endpoint)  # FastAPI
    # --8<-- [end:endpoint]
    from starlette.applications import Starlette

    return Starlette(routes=routes), app


async def main() -> None:
    os.environ.setdefault("CACHE_STATS_TOKEN", "ops-example-token")
    operator_token = {"authorization": f"Bearer {os.environ['CACHE_STATS_TOKEN']}"}
    app.add_middleware(
        DecisionCacheMiddleware, cache=DecisionCache(), routes=["/admit"], admit=admit
    )
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://svc")
    async with client:
        for _ in range(2):
            reply = await client.post("/predict", json={"text": "refund please"})
            print("fastapi:", reply.headers["x-cache"], reply.json()["label"])
        print("stats route without a token:", (await client.get("/cache/stats")).status_code)
        counters = (await client.get("/cache/stats", headers=operator_token)).json()
        print("stats route: hits", counters["hits"])

    scoped = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=tenant_app()), base_url="http://svc"
    )
    async with scoped:
        for token in ("acme", "acme", "globex", "mallory"):
            headers = {"Authorization": f"Bearer {token}"}
            reply = await scoped.post("/predict", json={"text": "a refund"}, headers=headers)
            print(f"tenant {token}:", reply.headers["x-cache"])

    transport = httpx.ASGITransport(app=admit_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://svc") as fallbacks:
        outcomes = [
            (await fallbacks.post("/predict", json={"text": ""})).headers["x-cache"]
            for _ in range(2)
        ]
        print("fallback answers are not stored:", outcomes)

    starlette_app, fastapi_app = stats_apps()
    for name, served in (("starlette", starlette_app), ("fastapi", fastapi_app)):
        transport = httpx.ASGITransport(app=served)
        async with httpx.AsyncClient(transport=transport, base_url="http://svc") as probe:
            refused = await probe.get("/cache/stats")
            reply = await probe.get("/cache/stats", headers=operator_token)
            print(
                f"{name} endpoint:",
                refused.status_code,
                reply.status_code,
                reply.headers["cache-control"],
            )


asyncio.run(main())
