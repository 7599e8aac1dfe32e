"""An OpenAI-compatible chat server of the tests' own: deterministic tokens, a delay each.

``POST /v1/chat/completions`` answers as the OpenAI API does, with
``stream=true`` as server-sent events (one ``chat.completion.chunk`` per
token, then ``data: [DONE]``). The tokens are the words of the last user
message, upper-cased, then the model name and the temperature, so a change
of either changes the answer. Each token waits ``OPENAI_TOKEN_DELAY``
seconds first (as a model would). ``GET /stats`` counts the completions served.

Run: ``uvicorn tests.openai_server:app --port N`` (the OpenAI example's test does).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

TOKEN_DELAY = float(os.environ.get("OPENAI_TOKEN_DELAY", "0.05"))
served = {"stream": 0, "complete": 0, "authorized": 0}


def tokens(body: dict[str, Any]) -> list[str]:
    """The answer's tokens: deterministic in the prompt, the model and the temperature."""
    prompt = next((m["content"] for m in reversed(body["messages"]) if m["role"] == "user"), "")
    words = [word.upper() for word in str(prompt).split()]
    words += [body["model"], f"t={body.get('temperature', 1.0)}"]
    return [words[0], *(f" {word}" for word in words[1:])]


async def completions(request: Request) -> Response:
    body = await request.json()
    if request.headers.get("authorization", "").startswith("Bearer "):
        served["authorized"] += 1
    answer = tokens(body)
    ident = "chatcmpl-test"
    if body.get("stream"):
        served["stream"] += 1

        async def events() -> AsyncIterator[str]:
            for token in answer:
                await asyncio.sleep(TOKEN_DELAY)
                chunk = {
                    "id": ident,
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": body["model"],
                    "choices": [{"index": 0, "delta": {"content": token}, "finish_reason": None}],
                }
                yield f"data: {json.dumps(chunk)}\n\n"
            last = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            }
            yield f"data: {json.dumps(last)}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")
    served["complete"] += 1
    await asyncio.sleep(TOKEN_DELAY * len(answer))
    return JSONResponse(
        {
            "id": ident,
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "".join(answer)},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": 1,
                "completion_tokens": len(answer),
                "total_tokens": 1 + len(answer),
            },
        }
    )


async def stats(request: Request) -> Response:
    return JSONResponse(served)


app = Starlette(
    routes=[
        Route("/v1/chat/completions", completions, methods=["POST"]),
        Route("/stats", stats),
    ]
)
