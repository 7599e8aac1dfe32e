"""The OpenAI example (examples/openai_chat/chat.py) against an OpenAI-compatible server.

The server is the tests' own (``tests/openai_server.py``): uvicorn on a
loopback port, ``/v1/chat/completions`` with ``stream=true`` as server-sent
events, deterministic tokens with a delay each. No network, no provider.
The client is the real ``openai.AsyncOpenAI``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from .support import free_port, require, subprocess_env

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "openai_chat" / "chat.py"
TOKEN_DELAY = 0.05
QUESTION = [{"role": "user", "content": "is this cached"}]
ANSWER = ["IS", " THIS", " CACHED", " tiny-1", " t=0.0"]


@contextmanager
def _serving() -> Iterator[str]:
    """The base URL of one of the tests' OpenAI-compatible servers, run by uvicorn."""
    require(importlib.util.find_spec("openai") is not None, "needs openai (the test group)")
    port = free_port()
    env = subprocess_env(str(ROOT))
    env["OPENAI_TOKEN_DELAY"] = str(TOKEN_DELAY)
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "tests.openai_server:app", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60  # a hang guard, not a timing assertion
        while True:
            try:
                httpx.get(f"{base}/stats", timeout=5).raise_for_status()
                break
            except httpx.HTTPError:
                assert process.poll() is None, "the server exited"
                assert time.monotonic() < deadline, "the server never answered"
                time.sleep(0.05)
        yield f"{base}/v1"
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """The base URL of the tests' OpenAI-compatible server."""
    with _serving() as base:
        yield base


@pytest.fixture(scope="module")
def other_server() -> Iterator[str]:
    """A second server of the same kind: another provider, or another deployment."""
    with _serving() as base:
        yield base


def _example() -> ModuleType:
    """A fresh copy of the example module: its own cache, on this test's event loop."""
    spec = importlib.util.spec_from_file_location("openai_chat_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _served(base: str) -> dict[str, int]:
    counts: dict[str, int] = httpx.get(base.removesuffix("/v1") + "/stats").json()
    return counts


class Timed:
    """Reads a stream in a task, noting when each token arrived (``time.perf_counter``)."""

    def __init__(self, stream: AsyncIterator[str]) -> None:
        self.started = time.perf_counter()
        self.tokens: list[str] = []
        self.times: list[float] = []
        self.task = asyncio.ensure_future(self._run(stream))

    async def _run(self, stream: AsyncIterator[str]) -> None:
        async for token in stream:
            self.tokens.append(token)
            self.times.append(time.perf_counter())

    @property
    def first(self) -> float:
        return self.times[0] - self.started


async def _until(condition: Any) -> None:
    deadline = time.monotonic() + 60  # a hang guard, not a timing assertion
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.001)


async def test_a_streamed_completion_is_shared_live_then_replayed(server: str) -> None:
    from openai import AsyncOpenAI

    example = _example()
    before = _served(server)
    async with (
        AsyncOpenAI(base_url=server, api_key="key-one") as one,
        AsyncOpenAI(base_url=server, api_key="key-two") as two,
        example.cache,
    ):
        chat = example.Chat(one)
        leader = Timed(chat.stream(QUESTION, model="tiny-1"))
        await _until(lambda: len(leader.tokens) >= 1)
        follower = Timed(chat.stream(QUESTION, model="tiny-1"))
        await asyncio.gather(leader.task, follower.task)
        assert leader.tokens == follower.tokens == ANSWER
        # Live: the follower's first token came before the leader's stream ended.
        assert follower.times[0] < leader.times[-1]
        await _until(lambda: example.cache.stats()["stores"] == 1)
        # Another client, another API key: the same decision (the key is not in it).
        other = example.Chat(two)
        hit = Timed(other.stream(QUESTION, model="tiny-1"))
        await hit.task
        assert hit.tokens == ANSWER
        after = _served(server)
        assert after["stream"] - before["stream"] == 1  # one request for all three
        stats = example.cache.stats()
        assert (stats["misses"], stats["coalesced"], stats["hits"]) == (2, 1, 1)
        print(
            f"time to first token: miss {leader.first * 1e3:.1f} ms, "
            f"follower {follower.first * 1e3:.1f} ms (joined after the leader's first), "
            f"hit {hit.first * 1e3:.2f} ms; token delay {TOKEN_DELAY * 1e3:.0f} ms"
        )
        # What decides the answer is in the key: another model or temperature asks again.
        hotter = [t async for t in chat.stream(QUESTION, model="tiny-1", temperature=0.5)]
        assert hotter[-1] == " t=0.5"
        other_model = [t async for t in chat.stream(QUESTION, model="tiny-2")]
        assert other_model[-2] == " tiny-2"
        assert _served(server)["stream"] - before["stream"] == 3


async def test_a_whole_completion_is_cached_as_its_pydantic_model(server: str) -> None:
    from openai import AsyncOpenAI
    from openai.types.chat import ChatCompletion

    example = _example()
    before = _served(server)
    async with (
        AsyncOpenAI(base_url=server, api_key="key-one") as one,
        AsyncOpenAI(base_url=server, api_key="key-two") as two,
        example.cache,
    ):
        miss = await example.Chat(one).complete(QUESTION, model="tiny-1")
        hit = await example.Chat(two).complete(QUESTION, model="tiny-1")
        assert type(miss) is type(hit) is ChatCompletion
        assert hit == miss and hit.choices[0].message.content == "".join(ANSWER)
        assert _served(server)["complete"] - before["complete"] == 1
        assert example.cache.stats()["hits"] == 1


async def test_a_caller_that_stops_early_leaves_nothing_half_stored(server: str) -> None:
    from openai import AsyncOpenAI

    example = _example()
    async with AsyncOpenAI(base_url=server, api_key="key-one") as client, example.cache:
        chat = example.Chat(client)
        key = chat.stream.key(QUESTION, model="tiny-3")
        stream = chat.stream(QUESTION, model="tiny-3")
        assert await anext(stream) == "IS"
        await stream.aclose()  # the only reader left: the request is closed
        await _until(lambda: example.cache.engine.flights.get(key) is None)
        assert example.cache.stats()["stores"] == 0
        assert [t async for t in chat.stream(QUESTION, model="tiny-3")] == [
            *ANSWER[:3],
            " tiny-3",
            " t=0.0",
        ]


async def test_completions_are_not_shared_across_servers_organizations_or_projects(
    server: str, other_server: str
) -> None:
    """Only the API key stays out of the key: another base URL (another provider, or
    another deployment serving the same model name), organization or project asks its
    own server, streamed and whole."""
    from openai import AsyncOpenAI

    example = _example()
    before, other_before = _served(server), _served(other_server)
    async with (
        AsyncOpenAI(base_url=server, api_key="key-one") as one,
        AsyncOpenAI(base_url=server, api_key="key-two") as same_but_key,
        AsyncOpenAI(base_url=other_server, api_key="key-one") as elsewhere,
        AsyncOpenAI(base_url=server, api_key="key-one", organization="org-b") as organization,
        AsyncOpenAI(base_url=server, api_key="key-one", project="proj-b") as project,
        example.cache,
    ):
        for method in ("complete", "stream"):

            async def ask(client: AsyncOpenAI, method: str = method) -> Any:
                call = getattr(example.Chat(client), method)
                if method == "complete":
                    return (await call(QUESTION, model="tiny-1")).choices[0].message.content
                return "".join([token async for token in call(QUESTION, model="tiny-1")])

            answer = await ask(one)
            assert await ask(same_but_key) == answer  # another API key: shared
            assert _served(server)[method] - before[method] == 1
            assert await ask(elsewhere) == answer
            assert _served(other_server)[method] - other_before[method] == 1
            await ask(organization)
            await ask(project)
            assert _served(server)[method] - before[method] == 3
