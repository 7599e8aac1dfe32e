"""Cache an OpenAI-compatible chat model's completions, streamed and whole.

The ``openai`` package's ``AsyncOpenAI`` talks to OpenAI or to any server
that speaks its API (vLLM, llama.cpp, Ollama, LiteLLM). Each call's messages,
model name and sampling parameters are its key, and so is where the client
sends them: its base URL (another provider, or another deployment serving a
model of the same name, answers differently), organization, project and
default query (Azure's ``api-version``). The API key is not: a decision does
not depend on whose key asked for it, and a key never lands in a store.

A streamed completion is one decision made of chunks: the first caller gets
each token as the model produces it, identical callers arriving meanwhile
get the tokens so far at once and then each new one live, and a later call
replays the tokens from the store without calling the model.

Run it against a server: ``OPENAI_BASE_URL=http://127.0.0.1:8000/v1
OPENAI_API_KEY=... python examples/openai_chat/chat.py``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator

from openai import AsyncOpenAI
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

from asyncache import DecisionCache, cached_prediction

Messages = list[ChatCompletionMessageParam]


cache = DecisionCache()  # memory; DecisionCache(open_store("sqlite:///chat.db")) keeps them


class Chat:
    """Chat completions through one client, cached by what decides their answer."""

    # Names what changes the answers besides the arguments (a system prompt of our
    # own, post-processing): change it and earlier decisions are not reused.
    version = "chat/v1"

    def __init__(self, client: AsyncOpenAI) -> None:
        self.client = client

    def __cache_fingerprint__(self) -> dict[str, object]:
        """What keys ``self``: who answers, and for whom; never the API key."""
        client = self.client
        return {
            "version": self.version,
            "base_url": str(client.base_url),
            "organization": client.organization,
            "project": client.project,
            "query": dict(client.default_query),
        }

    @cached_prediction(cache, namespace="chat.stream")
    async def stream(
        self,
        messages: Messages,
        *,
        model: str,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_tokens: int | None = None,
        seed: int | None = None,
    ) -> AsyncIterator[str]:
        """The answer's text, token by token (``stream=True``)."""
        events = await self.client.chat.completions.create(
            model=model,
            messages=messages,
            temperature=temperature,
            top_p=top_p,
            max_tokens=max_tokens,
            seed=seed,
            stream=True,
        )
        async with events:  # closes the HTTP response when the stream stops early
            async for event in events:
                if event.choices and event.choices[0].delta.content:
                    yield event.choices[0].delta.content

    @cached_prediction(cache, namespace="chat.complete")
    async def complete(
        self,
        messages: Messages,
        *,
        model: str,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_tokens: int | None = None,
        seed: int | None = None,
    ) -> ChatCompletion:
        """The whole completion (a pydantic model, rebuilt as one on a hit)."""
        return await self.client.chat.completions.create(
            model=model,
            messages=messages,
            temperature=temperature,
            top_p=top_p,
            max_tokens=max_tokens,
            seed=seed,
        )


async def timed(tokens: AsyncIterator[str]) -> tuple[str, float, float]:
    """The text of a stream, the seconds to its first token and to its end."""
    started = time.perf_counter()
    first = 0.0
    text: list[str] = []
    async for token in tokens:
        if not text:
            first = time.perf_counter() - started
        text.append(token)
    return "".join(text), first, time.perf_counter() - started


async def main() -> None:
    model = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
    chat = Chat(AsyncOpenAI())  # OPENAI_API_KEY and OPENAI_BASE_URL from the environment
    question: Messages = [{"role": "user", "content": "say hello to the cache"}]
    async with cache:
        for attempt in ("miss", "hit"):
            text, first, last = await timed(chat.stream(question, model=model))
            print(
                f"{attempt}: first token {first * 1000:.1f} ms, last {last * 1000:.1f} ms: {text}"
            )
        whole = await chat.complete(question, model=model)
        print("complete:", whole.choices[0].message.content)
        print("stats:", {k: cache.stats()[k] for k in ("hits", "misses", "streams")})


if __name__ == "__main__":
    asyncio.run(main())
