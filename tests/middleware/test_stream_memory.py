"""A streamed response's memory follows its bytes and the readers' lag, not its chunk count.

Before the bound, every message of a response was kept while it might still be
stored, and an empty message weighs nothing against ``max_entry_bytes``: 400,000
empty body messages held over 100 MiB for one request.
"""

from __future__ import annotations

import asyncio
import tracemalloc
from typing import Any

import pytest

from asyncache import DecisionCache, MemoryStore
from asyncache.middleware import DecisionCacheMiddleware

pytestmark = pytest.mark.slow

CHUNKS = 50_000  # before the bound: a peak of 14 MiB; after: well under 8
LIMIT = 8 * 1024 * 1024


async def many_empty_chunks(scope: Any, receive: Any, send: Any) -> None:
    await receive()
    headers = [(b"content-type", b"text/plain")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    for _ in range(CHUNKS):
        await send({"type": "http.response.body", "body": b"", "more_body": True})
    await send({"type": "http.response.body", "body": b"end", "more_body": False})


async def test_a_response_of_many_empty_chunks_stays_within_a_few_mib() -> None:
    cache = DecisionCache(MemoryStore())
    middleware = DecisionCacheMiddleware(many_empty_chunks, cache=cache, routes=["/stream"])
    received = 0
    body = b""
    done = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if received == 0:
            return {"type": "http.request", "body": b"{}", "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal received, body
        received += 1
        body += message.get("body", b"")

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/stream",
        "raw_path": b"/stream",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"host", b"testserver")],
        "server": ("testserver", 80),
        "client": ("127.0.0.1", 1234),
    }
    tracemalloc.start()
    try:
        await middleware(scope, receive, send)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        done.set()
    assert received == CHUNKS + 2 and body == b"end"
    assert peak < LIMIT, f"peak {peak / 2**20:.1f} MiB for {CHUNKS} chunks"
    # Not stored: past the most pieces a stream keeps, it is shared live but not kept.
    assert await cache.store.count() == 0
    assert middleware.stats.not_admitted_reasons == {"too_many_chunks": 1}


async def test_a_reader_that_never_takes_empty_chunks_is_detached_by_their_count() -> None:
    # Paced by its fastest reader, a shared stream keeps what a silent reader did not
    # take: empty pieces weigh nothing against the byte bound, so their count bounds it.
    from asyncache.middleware.capture import response_broadcast

    broadcast = response_broadcast(1024, joinable=True)
    fast = broadcast.join(owner=True)
    silent = broadcast.join()

    async def read_fast() -> int:
        taken = 0
        while True:
            message = broadcast.take(fast)
            if message is None:
                await broadcast.changed().wait()
                continue
            broadcast.sent(fast)
            taken += 1
            if not message.get("more_body", False) and message["type"] != "http.response.start":
                return taken

    reader = asyncio.create_task(read_fast())
    start = {"type": "http.response.start", "status": 200, "headers": []}
    async with asyncio.timeout(60):  # a hang guard: paced by the silent reader, it stalled
        await broadcast.push(start)
        for _ in range(CHUNKS):
            await broadcast.push({"type": "http.response.body", "body": b"", "more_body": True})
        await broadcast.push({"type": "http.response.body", "body": b""})
        assert await reader == CHUNKS + 2
    assert silent.detached and not fast.detached
    assert len(broadcast.messages) <= 2
