"""Helpers for the middleware tests: an ASGI driver that behaves like a server.

``call`` hands an app a request split into the given chunks, answers
``http.disconnect`` only once the response is complete (as uvicorn does), and
records every message the app sent. ``RecordingApp`` is a raw ASGI app that
records what it received and answers what it is told to.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.support import free_port, until

Scope = dict[str, Any]
Message = dict[str, Any]
App = Callable[[Any, Any, Any], Awaitable[None]]


def make_scope(
    method: str = "POST",
    path: str = "/predict",
    *,
    headers: Sequence[tuple[bytes, bytes]] = ((b"content-type", b"application/json"),),
    query: bytes = b"",
    scope_type: str = "http",
) -> Scope:
    return {
        "type": scope_type,
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": list(headers),
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
        "state": {},
    }


@dataclass
class Result:
    """What a client received."""

    status: int = 0
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""
    messages: list[Message] = field(default_factory=list)

    def header(self, name: str) -> str | None:
        wanted = name.lower().encode()
        values = [value.decode("latin-1") for key, value in self.headers if key.lower() == wanted]
        return values[0] if values else None

    def header_values(self, name: str) -> list[str]:
        wanted = name.lower().encode()
        return [value.decode("latin-1") for key, value in self.headers if key.lower() == wanted]

    @property
    def cache(self) -> str | None:
        return self.header("x-cache")


async def call(
    app: App,
    *,
    method: str = "POST",
    path: str = "/predict",
    body: bytes = b"",
    chunks: Sequence[bytes] | None = None,
    headers: Sequence[tuple[bytes, bytes]] = ((b"content-type", b"application/json"),),
    query: bytes = b"",
    disconnect_after_start: bool = False,
) -> Result:
    """Send one request to ``app`` as a server would, and return what came back.

    With ``disconnect_after_start``, the client is gone once the response
    started: every later ``send`` raises ``OSError``, as some servers do.
    """
    pieces = list(chunks) if chunks is not None else [body]
    pending: list[Message] = [
        {"type": "http.request", "body": piece, "more_body": index < len(pieces) - 1}
        for index, piece in enumerate(pieces)
    ]
    complete = asyncio.Event()
    result = Result()

    async def receive() -> Message:
        if pending:
            return pending.pop(0)
        await complete.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if disconnect_after_start and result.status:
            raise OSError("the client went away")
        result.messages.append(dict(message))
        if message["type"] == "http.response.start":
            result.status = message["status"]
            result.headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", ())]
        elif message["type"] == "http.response.body":
            result.body += message.get("body", b"")
            if not message.get("more_body", False):
                complete.set()

    try:
        await app(make_scope(method, path, headers=headers, query=query), receive, send)
    finally:
        complete.set()
    return result


@dataclass
class Answer:
    """What ``RecordingApp`` answers."""

    status: int = 200
    headers: list[tuple[bytes, bytes]] = field(
        default_factory=lambda: [(b"content-type", b"application/json")]
    )
    chunks: list[bytes] = field(default_factory=lambda: [b'{"label":"positive"}'])


class RecordingApp:
    """A raw ASGI app that records each request's body and messages and answers ``answer``."""

    def __init__(self, answer: Answer | None = None) -> None:
        self.answer = answer or Answer()
        self.calls = 0
        self.bodies: list[bytes] = []
        self.received: list[list[Message]] = []
        self.scopes: list[Scope] = []
        self.gate: asyncio.Event | None = None
        self.entered = 0

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        self.calls += 1
        self.scopes.append(scope)
        messages: list[Message] = []
        body = b""
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        self.bodies.append(body)
        self.received.append(messages)
        self.entered += 1
        if self.gate is not None:
            await self.gate.wait()
        answer = self.answer
        await send(
            {"type": "http.response.start", "status": answer.status, "headers": answer.headers}
        )
        for index, chunk in enumerate(answer.chunks):
            more = index < len(answer.chunks) - 1
            await send({"type": "http.response.body", "body": chunk, "more_body": more})


@asynccontextmanager
async def uvicorn_serving(
    app: App, *, http: str = "h11", lifespan: str = "off"
) -> AsyncIterator[str]:
    """Serve ``app`` with a real uvicorn on a free loopback port; yields its base URL."""
    import uvicorn  # here: only the tests that serve over HTTP need it

    port = free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        http=http,
        ws="none",
        lifespan=lifespan,
        log_level="warning",
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        await until(lambda: server.started or task.done(), "uvicorn is listening")
        if task.done():
            task.result()
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


@asynccontextmanager
async def serving(app: App, server: str) -> AsyncIterator[str]:
    """Serve ``app`` with ``server`` (``httptools`` or ``h11`` under uvicorn, or
    ``hypercorn`` with its asyncio worker) on a free loopback port; yields its base URL."""
    if server != "hypercorn":
        async with uvicorn_serving(app, http=server) as url:
            yield url
        return
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    port = free_port()
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.loglevel = "WARNING"
    stop = asyncio.Event()
    task = asyncio.create_task(serve(app, config, shutdown_trigger=stop.wait))  # type: ignore[arg-type]
    try:
        await until(lambda: _listening(port) or task.done(), "hypercorn is listening")
        if task.done():
            task.result()
        yield f"http://127.0.0.1:{port}"
    finally:
        stop.set()
        await task


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


async def raw_exchange(
    url: str, head: bytes, body: bytes = b""
) -> tuple[int, dict[bytes, bytes], bytes]:
    """Send one HTTP/1.1 request written by hand (``head`` without the blank line) and read
    the answer's status, headers (lowercased; the last of each) and body, closing after it.

    For what a client library refuses to send: two ``Host`` headers, odd names.
    """
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(head + b"\r\nconnection: close\r\n\r\n" + body)
        await writer.drain()
        raw = await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()
    start, _, rest = raw.partition(b"\r\n\r\n")
    lines = start.split(b"\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, rest
