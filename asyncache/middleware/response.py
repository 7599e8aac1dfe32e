"""The response side: what may be stored, capturing it, and replaying it.

A response is stored only when nothing about it is private or partial: a final
status in the allowed set, no ``Set-Cookie``, no ``Cache-Control`` that forbids
a shared cache (``no-store``, ``private``, ``no-cache``), no ``Vary`` on
something the key does not hold, no event stream, no file sent by path, a body
under the cap, and the user's ``admit`` hook agreeing.

What is stored is a JSON-able list ``[status, headers, body]``: the headers as
``[name, value]`` pairs of Latin-1 strings, the body as a Latin-1 string.
Latin-1 maps each byte to one code point, so the body round-trips byte for byte
through the value envelope without the base64 walk that ``bytes`` would take.
A list rather than a dict keeps small entries small: the value envelope is
compressed from 192 bytes on, and inflating costs a few microseconds on every
hit, more than the rest of a small hit's decoding.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any

import orjson

from ..stats import RateLimitedLog
from .request import directives
from .types import Headers, Message, Scope, Send

__all__ = [
    "HOP_BY_HOP",
    "AdmitResponse",
    "ResponseCapture",
    "StoredResponse",
    "refusal",
    "replay_messages",
    "to_value",
]

logger = logging.getLogger("asyncache.middleware")
_log = RateLimitedLog(logger)  # a hook that raises would log on every response

# RFC 9110 section 7.6.1: these describe one connection, never the response.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
_PRIVATE_DIRECTIVES = frozenset({"no-store", "private", "no-cache"})
# Statuses that carry no body and must not carry Content-Length (RFC 9110 8.6).
_NO_LENGTH = frozenset({204, 304})
_SENDFILE = frozenset({"http.response.pathsend", "http.response.zerocopy"})


class StoredResponse:
    """A complete response, as the ``admit`` hook sees it and as a hit replays it.

    Attributes:
        status: the HTTP status.
        headers: ``(name, value)`` pairs as the app sent them.
        body: the whole body.
    """

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: Headers, body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def __repr__(self) -> str:
        return f"StoredResponse(status={self.status}, body={len(self.body)} bytes)"

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), or ``None``."""
        wanted = name.lower().encode("latin-1")
        for key, value in self.headers:
            if key.lower() == wanted:
                return value.decode("latin-1")
        return None

    def json(self) -> Any:
        """The body parsed as JSON.

        Raises:
            orjson.JSONDecodeError: the body is not JSON.
        """
        return orjson.loads(self.body)


AdmitResponse = Callable[[Scope, StoredResponse], bool | Awaitable[bool]]


def refusal(
    message: Message, *, statuses: Collection[int], keyed: Collection[bytes], limit: int
) -> str | None:
    """Why a response cannot be stored, judged by its start message; ``None`` if it may be."""
    if message.get("status") not in statuses:
        return "status"
    if message.get("trailers", False):
        return "trailers"
    for raw_name, value in message.get("headers", ()):
        name = raw_name.lower()
        if name == b"set-cookie":
            return "set_cookie"
        if name == b"cache-control":
            if directives(value.decode("latin-1")) & _PRIVATE_DIRECTIVES:
                return "cache_control"
        elif name == b"vary":
            for field in value.decode("latin-1").split(","):
                field = field.strip().lower()
                if field == "*":
                    return "vary_star"
                if field and field.encode("latin-1") not in keyed:
                    return "vary_unkeyed"
        elif name == b"content-type":
            if value.lstrip().lower().startswith(b"text/event-stream"):
                return "event_stream"
        elif name == b"content-length":
            try:
                if int(value) > limit:
                    return "too_large"
            except ValueError:
                pass
    return None


def to_value(response: StoredResponse, drop: Collection[bytes], *, head: bool = False) -> list[Any]:
    """The stored form of ``response``, without hop-by-hop headers nor those in ``drop``.

    ``Content-Length`` is dropped too, since a hit computes it from the body it
    sends; except for ``HEAD``, whose length is that of a body it does not have.
    """
    listed: set[bytes] = set()
    for name, value in response.headers:
        if name.lower() == b"connection":
            # Headers the Connection header names are hop-by-hop as well.
            listed.update(part.strip().lower() for part in value.split(b","))
    headers = [
        [name.decode("latin-1"), value.decode("latin-1")]
        for name, value in response.headers
        if (lowered := name.lower()) not in HOP_BY_HOP
        and lowered not in drop
        and lowered not in listed
        and (head or lowered != b"content-length")
    ]
    return [response.status, headers, response.body.decode("latin-1")]


def replay_messages(value: Any, extra: Headers, *, head: bool) -> tuple[Message, Message]:
    """The two messages that answer a request from a stored value.

    A ``HEAD`` response keeps no body, so it cannot know its length: the app's
    ``Content-Length`` is kept for those instead.

    Raises:
        KeyError, TypeError, ValueError, AttributeError, UnicodeEncodeError:
            ``value`` is not a stored response.
    """
    status, stored_headers, text = value
    if type(status) is not int:
        raise TypeError("the stored status is not an int")
    headers = [(name.encode("latin-1"), field.encode("latin-1")) for name, field in stored_headers]
    body = text.encode("latin-1")
    if not head and status not in _NO_LENGTH:
        headers.append((b"content-length", str(len(body)).encode()))
    headers += extra
    start = {"type": "http.response.start", "status": status, "headers": headers}
    return start, {"type": "http.response.body", "body": body, "more_body": False}


async def _admitted(hook: AdmitResponse, scope: Scope, response: StoredResponse) -> bool:
    try:
        verdict = hook(scope, response)
        if inspect.isawaitable(verdict):
            verdict = await verdict
    except Exception as exc:
        _log.warning("admit", "asyncache: the middleware's admit hook raised %r; not storing", exc)
        return False
    return verdict is not False


Finish = Callable[[StoredResponse | None, str | None], Awaitable[None]]


class ResponseCapture:
    """The app's ``send`` on a miss: forwards the response and keeps a copy that may be stored.

    The start message is held back until the response is known to be storable
    or not: when its headers already refuse it, it goes out at once; otherwise
    it waits for the first body message (a one-message body is then complete
    and judged whole). A streamed body is forwarded as it comes and copied
    beside it until it ends or grows over the cap.

    ``finish(response, reason)`` runs once, after the client got the last
    message: with the response when it may be stored, or with ``None`` and the
    reason when it may not. While the copy may still be stored, a client that
    went away (the server's ``send`` raised ``OSError``) does not stop the app,
    so that what it computes still reaches the store and the waiting requests.

    Args:
        send: the server's ``send``.
        scope: the request's scope, for the ``admit`` hook.
        extra: headers added to the start message (the cache status).
        statuses: the statuses that may be stored.
        keyed: the request headers the key holds (what ``Vary`` may name).
        limit: the largest body that may be stored.
        admit: the user's hook, or ``None``.
        finish: called once with the outcome.
    """

    __slots__ = (
        "_admit",
        "_chunks",
        "_client_error",
        "_extra",
        "_finish",
        "_finished",
        "_headers",
        "_held",
        "_keyed",
        "_limit",
        "_scope",
        "_send",
        "_size",
        "_status",
        "_statuses",
    )

    def __init__(
        self,
        send: Send,
        *,
        scope: Scope,
        extra: Headers,
        statuses: Collection[int],
        keyed: Collection[bytes],
        limit: int,
        admit: AdmitResponse | None,
        finish: Finish,
    ) -> None:
        self._send = send
        self._scope = scope
        self._extra = extra
        self._statuses = statuses
        self._keyed = keyed
        self._limit = limit
        self._admit = admit
        self._finish = finish
        self._held: Message | None = None
        self._chunks: list[bytes] | None = None
        self._size = 0
        self._client_error: OSError | None = None
        self._finished = False

    @property
    def finished(self) -> bool:
        """Whether ``finish`` ran."""
        return self._finished

    async def __call__(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.body":
            if self._chunks is None:
                await self._forward(message)
            else:
                await self._body(message)
        elif kind == "http.response.start":
            await self._start(message)
        else:
            if kind in _SENDFILE:
                await self._refuse("pathsend")
            elif kind == "http.response.trailers":
                await self._refuse("trailers")
            elif self._held is not None:
                # An extension's message: keep the order the app sent them in.
                held, self._held = self._held, None
                await self._forward(held)
            await self._forward(message)

    async def _start(self, message: Message) -> None:
        start = dict(message)
        start["headers"] = [*message.get("headers", ()), *self._extra]
        reason = refusal(message, statuses=self._statuses, keyed=self._keyed, limit=self._limit)
        if reason is None:
            self._status: int = message["status"]
            self._headers: Headers = [(name, value) for name, value in message.get("headers", ())]
            self._held = start
            self._chunks = []
            return
        await self._forward(start)
        await self._done(None, reason)

    async def _body(self, message: Message) -> None:
        chunks = self._chunks
        assert chunks is not None
        chunk = message.get("body", b"")
        self._size += len(chunk)
        if self._size > self._limit:
            await self._refuse("too_large")
            await self._forward(message)
            return
        chunks.append(chunk)
        if self._held is not None:
            held, self._held = self._held, None
            await self._forward(held)
        await self._forward(message)
        if message.get("more_body", False):
            return
        response = StoredResponse(self._status, self._headers, b"".join(chunks))
        self._chunks = None
        if self._admit is not None and not await _admitted(self._admit, self._scope, response):
            await self._done(None, "admit")
            return
        await self._done(response, None)

    async def _refuse(self, reason: str) -> None:
        """Stop copying: the response goes on to the client but will not be stored."""
        if self._chunks is None:
            return
        self._chunks = None
        if self._held is not None:
            held, self._held = self._held, None
            await self._forward(held)
        await self._done(None, reason)

    async def _done(self, response: StoredResponse | None, reason: str | None) -> None:
        if not self._finished:
            self._finished = True
            await self._finish(response, reason)

    async def _forward(self, message: Message) -> None:
        if self._client_error is not None:
            if self._chunks is None:
                # Nothing will be stored any more: let the app learn the client left.
                raise self._client_error
            return
        try:
            await self._send(message)
        except OSError as exc:
            if self._chunks is None:
                raise
            self._client_error = exc
