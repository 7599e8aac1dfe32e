"""A lean HTTP/1.1 client for load: keep-alive connections over asyncio streams.

A load generator must not be what it measures. httpx spends about 9 ms of CPU
per request at 800 in flight (its pool scans every connection per request),
which made the demo report its own client: 149 requests/s where ``wrk`` got
2,500 hits/s from the same server. This client writes a request with one
``write`` and reads the answer by its ``Content-Length`` (or chunks), over a
fixed pool of connections that each carry one request at a time, as wrk's do.
Loopback demo and benchmark use only: no TLS, no redirects, no proxies.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, TypeVar

__all__ = ["LoadClient", "Reply", "run", "server_timing_ms"]

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, on uvloop's event loop when it is installed.

    uvloop (the ``bench`` group) roughly halves the client's CPU per request; without
    it the standard loop runs the same code.
    """
    factory: Callable[[], asyncio.AbstractEventLoop] | None
    try:
        import uvloop
    except ImportError:
        factory = None
    else:
        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


@dataclass(frozen=True, slots=True)
class Reply:
    """One response: its status, its headers (names lowercased) and its body."""

    status: int
    headers: dict[str, str]
    body: bytes


def server_timing_ms(headers: dict[str, str], metric: str = "cache") -> float | None:
    """The ``dur`` of ``metric`` in a ``Server-Timing`` header, in ms; ``None`` without one."""
    for entry in headers.get("server-timing", "").split(","):
        name, *params = (part.strip() for part in entry.split(";"))
        if name != metric:
            continue
        for param in params:
            key, _, value = param.partition("=")
            if key == "dur":
                try:
                    return float(value)
                except ValueError:
                    return None
    return None


class LoadClient:
    """Up to ``connections`` keep-alive connections to one ``host:port``.

    Args:
        host: the server's address.
        port: its port.
        connections: connections kept open; at most this many requests are in flight.
        timeout: seconds a request may take before it fails.
        authority: the ``Host`` header every request names (default ``host:port``).
            The middleware keys a request by its host, so a client that must find
            the entries of an earlier run on another port names a fixed one.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        connections: int,
        timeout: float = 60.0,
        authority: str | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self.authority = authority if authority is not None else f"{host}:{port}"
        self._host_line = f"host: {self.authority}"
        self._idle: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter] | None] = (
            asyncio.Queue()
        )
        for _ in range(connections):
            self._idle.put_nowait(None)  # a slot: connected on first use
        self._open: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every open connection."""
        for writer in list(self._open):
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        self._open.clear()

    async def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> Reply:
        """Send one request on an idle connection and read its response.

        Raises:
            OSError: the connection failed (it is closed; the slot reconnects next time).
            TimeoutError: no complete answer within ``timeout``.
        """
        slot = await self._idle.get()
        try:
            if slot is None:
                slot = await asyncio.open_connection(self.host, self.port)
                self._open.add(slot[1])
            async with asyncio.timeout(self.timeout):
                reply = await self._exchange(slot, method, path, body, headers or {})
        except BaseException:
            if slot is not None:
                self._open.discard(slot[1])
                slot[1].close()
            self._idle.put_nowait(None)
            raise
        if reply.headers.get("connection", "").lower() == "close":
            self._open.discard(slot[1])
            slot[1].close()
            self._idle.put_nowait(None)
        else:
            self._idle.put_nowait(slot)
        return reply

    async def post_json(
        self, path: str, body: bytes, headers: dict[str, str] | None = None
    ) -> Reply:
        """POST ``body`` (JSON bytes) to ``path``."""
        return await self.request(
            "POST", path, body, {"content-type": "application/json", **(headers or {})}
        )

    async def _exchange(
        self,
        slot: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        method: str,
        path: str,
        body: bytes,
        headers: dict[str, str],
    ) -> Reply:
        reader, writer = slot
        head = [f"{method} {path} HTTP/1.1", self._host_line]
        head += [f"{name}: {value}" for name, value in headers.items()]
        head.append(f"content-length: {len(body)}")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        raw = await reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        fields: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                value = value.strip()
                # Repeated headers joined as RFC 9110 allows for list-valued ones.
                fields[name] = f"{fields[name]}, {value}" if name in fields else value
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return Reply(status, fields, b"")
        if "content-length" in fields:
            content = await reader.readexactly(int(fields["content-length"]))
        elif fields.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")  # no trailers are sent to this client
                    break
                parts.append(await reader.readexactly(size))
                await reader.readexactly(2)
            content = b"".join(parts)
        else:
            content = await reader.read()  # ends with the connection
            fields["connection"] = "close"
        return Reply(status, fields, content)
