"""The middleware: a FastAPI prediction endpoint whose repeated requests skip the model."""

import asyncio
import os
import secrets

import httpx
from fastapi import Depends, FastAPI, Header, HTTPException
from pydantic import BaseModel

from asyncache import DecisionCache
from asyncache.middleware import DecisionCacheMiddleware, cache_stats


class Ticket(BaseModel):
    text: str
    questions: list[str]


app = FastAPI()
model_calls = 0


@app.post("/predict")
async def predict(ticket: Ticket) -> dict[str, list[bool]]:
    global model_calls
    model_calls += 1
    await asyncio.sleep(0.05)  # the model's forward pass
    return {"answers": [word in ticket.text for word in ("refund", "angry")]}


def tenant(scope: dict) -> str | None:
    # Put the principal your authentication established in the key; None bypasses.
    headers = dict(scope["headers"])
    token = headers.get(b"authorization", b"").decode()
    return token.removeprefix("Bearer tenant-") if token.startswith("Bearer tenant-") else None


cache = DecisionCache(fingerprint="ticket-triage-v2", ttl=3600)
app.add_middleware(DecisionCacheMiddleware, cache=cache, routes=["/predict"], scope=tenant)


def operator(authorization: str = Header("")) -> None:
    # The counters show every tenant's traffic: serve them to operators only.
    token = os.environ.get("CACHE_STATS_TOKEN", "")
    if not token or not secrets.compare_digest(authorization, f"Bearer {token}"):
        raise HTTPException(status_code=403)


@app.get("/cache/stats", dependencies=[Depends(operator)])
async def stats() -> dict:
    return cache_stats(cache)  # the counters, for a health route


async def main() -> None:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:

        async def ask(body: dict, **headers: str) -> str:
            response = await client.post("/predict", json=body, headers=headers)
            return f"{response.status_code} {response.headers['x-cache']:7} {response.json()}"

        body = {"text": "I want a refund", "questions": ["refund?", "angry?"]}
        print("first:      ", await ask(body))
        print("repeat:     ", await ask(body))
        # Key order and whitespace do not matter: the JSON body is canonicalized.
        print(
            "reordered:  ",
            await ask({"questions": ["refund?", "angry?"], "text": "I want a refund"}),
        )
        print("no-store:   ", await ask(body, **{"cache-control": "no-store"}))
        print("tenant acme:", await ask(body, authorization="Bearer tenant-acme"))
        print("tenant acme:", await ask(body, authorization="Bearer tenant-acme"))
        print("unknown token:", await ask(body, authorization="Basic xyz"))

        # Ten identical concurrent requests: the app runs once, nine share its response.
        burst = {"text": "this is the third time I ask, I am angry", "questions": ["angry?"]}
        replies = await asyncio.gather(*(ask(burst) for _ in range(10)))
        print("burst:", sorted(reply.split()[1] for reply in replies))
        print("model calls:", model_calls)

        os.environ.setdefault("CACHE_STATS_TOKEN", "ops-example-token")
        operator_headers = {"authorization": f"Bearer {os.environ['CACHE_STATS_TOKEN']}"}
        counters = (await client.get("/cache/stats", headers=operator_headers)).json()
        print({name: counters[name] for name in ("hits", "misses", "coalesced", "bypassed")})
    await cache.aclose()


asyncio.run(main())
