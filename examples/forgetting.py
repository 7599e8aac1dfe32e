"""Forgetting: a tenant's erasure, and the answers derived from a document that changed."""

import asyncio
import json
from typing import Any

import httpx

from asyncache import DecisionCache, cached_prediction
from asyncache.middleware import DecisionCacheMiddleware
from asyncache.stores.sqlite import SQLiteStore
from asyncache.tags import MARGIN

cache = DecisionCache(SQLiteStore("forgetting.db"), namespace="support-bot")
runs: list[str] = []


# Recipe 1, erasure: a decision's scope is always forgettable, and tags name
# whatever else a request for erasure may cover (here: the person).
@cached_prediction(
    cache,
    scope=lambda tenant, user, text: tenant,
    tags=lambda tenant, user, text: [f"user:{user}"],
)
async def classify(tenant: str, user: str, text: str) -> str:
    runs.append(f"classify {tenant}/{user}")
    return "refund" if "money back" in text else "other"


# Recipe 2, a changed document: the app names the documents an answer cites in
# a Cache-Tag header; the middleware stores the tags and strips the header.
async def answer_app(scope: Any, receive: Any, send: Any) -> None:
    body = json.loads((await receive())["body"])
    runs.append(f"answer {body['question']}")
    cited = "doc:42, doc:7" if "refund" in body["question"] else "doc:7"
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/plain"), (b"cache-tag", cited.encode())],
        }
    )
    await send({"type": "http.response.body", "body": b"see the policy"})


app = DecisionCacheMiddleware(answer_app, cache=cache, routes=["/answer"])


async def main() -> None:
    for tenant, user in (("acme", "ann"), ("acme", "bob"), ("globex", "cy")):
        await classify(tenant, user, "I want my money back")
    # acme leaves: every decision stored under its scope goes, on every replica.
    print("acme's decisions forgotten:", await cache.forget(scope="acme"))
    # cy asks for erasure: every decision tagged with them goes too.
    print("cy's decisions forgotten:", await cache.forget(tags=["user:cy"]))

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bot") as client:
        for question in ("refund window?", "refund fees?", "opening hours?"):
            response = await client.post("/answer", json={"question": question})
        print("Cache-Tag reaches the client:", "cache-tag" in response.headers)
        # Document 42 changed: the answers that cite it go; the rest stay hits.
        print("answers citing doc:42 forgotten:", await cache.forget(tags=["doc:42"]))
        await asyncio.sleep(MARGIN)  # computations begun before the forget never store
        for question in ("refund window?", "opening hours?"):
            response = await client.post("/answer", json={"question": question})
            print(question, response.headers["x-cache"])
    print("forgotten in all:", cache.stats()["forgotten"])
    await cache.aclose()


asyncio.run(main())
