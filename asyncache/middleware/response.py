"""The response side: what may be stored, capturing it, and replaying it.

A response is stored only when nothing about it is private, partial or meant to
go stale at once: a final status in the allowed set (never ``206`` nor ``304``,
which answer one request's ``Range`` or validators), no ``Set-Cookie`` (nor
``Set-Cookie2``), no ``Cache-Control`` that forbids a shared cache
(``no-store``, ``private``, ``no-cache``, ``max-age=0``, ``s-maxage=0``, in
any spelling ``freshness.cache_control`` reads), no ``Pragma: no-cache``, no
``Expires`` in the past (``0`` included) unless ``Cache-Control`` gives a
lifetime, no ``Vary`` on something the key does not hold, no event stream, no
file sent by path, no ``Content-Encoding`` unless the key holds ``Accept-Encoding``
(the route's ``vary``), a body under the cap, and the user's ``admit`` hook agreeing.
A response that gives a lifetime is stored for no longer than what is left of
it (``freshness``), and its ``Age`` is not stored: a hit computes it.

A stored value is checked before it is stored and before it is replayed
(``invalid_reason``): a status a server cannot send, or a header it would
refuse, would break every connection it is replayed on.

What is stored is a JSON-able list ``[status, headers, body, length_at, born]``
(``born``: when the response was generated, Unix seconds): the headers as
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
import math
import re
import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any

import orjson

from ..stats import RateLimitedLog
from .freshness import cache_control, delta_seconds, http_date
from .types import FixedHeaders, Headers, Message, Scope

__all__ = [
    "HOP_BY_HOP",
    "NEVER_STORED",
    "AdmitResponse",
    "InvalidEntry",
    "Replay",
    "StoredResponse",
    "admitted",
    "invalid_reason",
    "refusal",
    "replay_maker",
    "shareable",
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
# RFC 9110 11.6.3, 11.7.3: what the server says of one client's authentication (its
# next nonce...). Another client's hit must not get it: never stored.
_ONE_CLIENTS = frozenset({b"authentication-info", b"proxy-authentication-info"})
_PRIVATE_DIRECTIVES = frozenset({"no-store", "private", "no-cache"})
_LIFETIMES = ("max-age", "s-maxage")
_COOKIES = frozenset({b"set-cookie", b"set-cookie2"})
# Refusals the next identical request's run may not repeat: no hit-for-pass for them.
_PASSING_REFUSALS = frozenset({"failure", "too_large"})
NEVER_STORED = frozenset({206, 304})
"""Statuses never stored, whatever ``statuses`` says: each answers one request's
``Range`` or validators, which the key does not hold."""
# Statuses that carry no body and must not carry Content-Length (RFC 9110 8.6).
_NO_LENGTH = frozenset({204, 304})
# RFC 9110 5.1 and 5.5: a field name is a token; a value has no CR, LF, NUL nor other controls.
_FIELD_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+").fullmatch
# ... and is Latin-1, as the stored form of every header and body is.
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\u0100-\U0010ffff]").search
_BAD_BODY = re.compile(r"[\u0100-\U0010ffff]").search


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
    """Why a response cannot be stored, judged by its start message; ``None`` if it may be.

    A ``5xx`` is refused as ``failure``: neither stored nor shared (``shareable``).
    """
    status = message.get("status")
    if status not in statuses or status in NEVER_STORED:
        return "failure" if type(status) is int and 500 <= status <= 599 else "status"
    if message.get("trailers", False):
        return "trailers"
    expires_past = False
    too_large = False
    controls: list[str] = []
    for raw_name, value in message.get("headers", ()):
        name = raw_name.lower()
        if name in _COOKIES:
            return "set_cookie"
        if name == b"cache-control":
            controls.append(value.decode("latin-1"))
        elif name == b"pragma":
            if b"no-cache" in value.lower():
                return "pragma"
        elif name == b"expires":
            expires_past = expires_past or _in_the_past(value)
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
        elif name == b"content-encoding":
            # Encoded bytes answer the request's Accept-Encoding: replayed to a client
            # that did not accept them, they are garbage to it. Stored only when the key
            # tells such clients apart, whether or not the app said Vary.
            coding = value.strip().lower()
            if coding and coding != b"identity" and b"accept-encoding" not in keyed:
                return "encoded_unkeyed"
        elif name == b"content-length":
            try:
                too_large = too_large or int(value) > limit
            except ValueError:
                pass
    lifetime = False
    if controls:
        directives = cache_control(controls)
        if not _PRIVATE_DIRECTIVES.isdisjoint(directives):
            return "cache_control"
        for directive in _LIFETIMES:
            if directive in directives:
                if not delta_seconds(directives[directive]):
                    return "cache_control"
                lifetime = True
    if expires_past and not lifetime:
        # RFC 9111 5.3: a lifetime in Cache-Control overrides Expires.
        return "expires"
    return "too_large" if too_large else None


def shareable(reason: str | None) -> bool:
    """Whether requests waiting on a response refused for ``reason`` may share it live.

    Only a response the cache would store: a ``5xx`` (a quota, an overload) may
    be the requesting client's own failure, and a response too large to keep
    is not one the cache vouches for.
    """
    return reason is None


def private(reason: str) -> bool:
    """Whether a response refused for ``reason`` would be refused for every identical
    request too (``Cache-Control: private``, ``Set-Cookie``...): hit-for-pass remembers it.

    A failure or a response too large may not come again, so its key is not passed.
    """
    return reason not in _PASSING_REFUSALS


def _in_the_past(value: bytes) -> bool:
    """RFC 9111 5.3: an invalid date, ``0`` above all, means already expired."""
    when = http_date(value)
    return when is None or when <= time.time()


def to_value(
    response: StoredResponse,
    drop: Collection[bytes],
    *,
    head: bool = False,
    born: float | None = None,
) -> list[Any]:
    """The stored form of ``response``, without hop-by-hop headers, ``Authentication-Info``
    (one client's), nor those in ``drop``.

    ``[status, headers, body, length_at, born]``, ``born`` last only when
    given (when the response was generated: a hit's ``Age`` counts from it,
    so the app's own ``Age`` is not stored). ``Content-Length`` is not stored,
    since a hit computes it from the body it sends; ``length_at`` says where
    the app put it among the headers (``-1``: it sent none, as a streamed
    response does), so that a hit sends the same headers in the same order.
    A ``HEAD`` answer keeps the app's, the length of a body it does not have.
    """
    listed: set[bytes] = set()
    for name, value in response.headers:
        if name.lower() == b"connection":
            # Headers the Connection header names are hop-by-hop as well.
            listed.update(part.strip().lower() for part in value.split(b","))
    headers: list[list[str]] = []
    length_at = -1
    for name, value in response.headers:
        lowered = name.lower()
        if lowered in HOP_BY_HOP or lowered in drop or lowered in listed or lowered in _ONE_CLIENTS:
            continue
        if lowered == b"age" and born is not None:
            continue
        if lowered == b"content-length" and not head:
            if length_at < 0:
                length_at = len(headers)
            continue
        headers.append([name.decode("latin-1"), value.decode("latin-1")])
    stored: list[Any] = [response.status, headers, response.body.decode("latin-1"), length_at]
    if born is not None:
        stored.append(born)
    return stored


class InvalidEntry(ValueError):
    """A stored value that decodes but is not a response a server may send.

    Attributes:
        reason: what is wrong (``status``, ``header``, ``stored_length``, ``shape``).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(f"not a valid stored response ({reason})")
        self.reason = reason


def invalid_reason(value: Any, *, head: bool) -> str | None:
    """What makes ``value`` unfit to replay, or ``None`` when it is a valid stored response.

    Valid: ``[status, headers, body, length_at, born]`` (``length_at`` and
    ``born`` may be missing in entries stored before they existed) with a
    finite number for ``born``, an int status in 100-599 other than
    101 (a hit cannot switch protocols), header names that are tokens, values
    without CR, LF, NUL or other controls, all Latin-1, no hop-by-hop header,
    no ``Content-Length`` but on a ``HEAD`` answer (a hit computes it), and a
    Latin-1 string body.
    """
    if type(value) is not list or not 3 <= len(value) <= 5:
        return "shape"
    status, headers, body = value[0], value[1], value[2]
    if len(value) >= 4 and (type(value[3]) is not int or not -1 <= value[3] <= len(headers)):
        return "shape"
    if len(value) == 5 and (type(value[4]) not in (int, float) or not math.isfinite(value[4])):
        return "shape"
    if type(status) is not int or not 100 <= status <= 599 or status == 101:
        return "status"
    if type(headers) is not list or type(body) is not str:
        return "shape"
    try:
        for name, field in headers:
            if _FIELD_NAME(name) is None or _BAD_VALUE(field) is not None:
                return "header"
            lowered = name.lower()
            if lowered in _NOT_STORED:
                if lowered != "content-length":
                    return "header"
                if not head:
                    return "stored_length"
    except (TypeError, ValueError):
        return "shape"  # a header that is not a pair of strings
    if not body.isascii() and _BAD_BODY(body) is not None:
        return "shape"
    return None


_NOT_STORED = frozenset([*(name.decode("latin-1") for name in HOP_BY_HOP), "content-length"])


class Replay:
    """A stored response, checked and ready to send: what each hit on its entry sends.

    Made once per stored entry (by a ``replay_maker``'s function, which the
    engine keeps beside the entry's bytes), so a hit on a hot entry neither
    decodes nor checks it again. Never changed once made: each hit gets
    messages of its own.

    Attributes:
        status: the HTTP status.
        headers: the headers to send, ``Content-Length`` included.
        body: the body.
        hit_headers: ``headers`` with the hit headers of the middleware that
            made it: what that middleware's hits send, joined once.
        born: when the response was generated (Unix seconds), or ``None``
            for an entry stored before that was kept (its hits send no ``Age``).
    """

    __slots__ = ("body", "born", "headers", "hit_headers", "status")

    def __init__(
        self,
        status: int,
        headers: FixedHeaders,
        body: bytes,
        hit_headers: FixedHeaders = (),
        born: float | None = None,
    ) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.hit_headers = (*headers, *hit_headers)
        self.born = born

    def hit_start(self) -> list[tuple[bytes, bytes]]:
        """The headers of one hit: ``hit_headers``, then its ``Age`` (RFC 9111 5.1)."""
        if self.born is None:
            return [*self.hit_headers]
        return [*self.hit_headers, _age(self.born)]

    def without_age(self) -> Replay:
        """This replay, its hits saying no ``Age`` (the middleware names no outcomes)."""
        if self.born is None:
            return self
        replay = Replay(self.status, self.headers, self.body)
        replay.hit_headers = self.hit_headers
        return replay

    @classmethod
    def of(cls, value: Any, *, head: bool, hit_headers: FixedHeaders = ()) -> Replay:
        """The replay of a stored value (a replay stays as it is).

        A ``HEAD`` response keeps no body, so it cannot know its length: the
        app's ``Content-Length`` is kept for those instead.

        Raises:
            InvalidEntry: ``value`` is not a valid stored response.
        """
        if type(value) is Replay:
            return value
        reason = invalid_reason(value, head=head)
        if reason is not None:
            raise InvalidEntry(reason)
        status, stored_headers, text = value[0], value[1], value[2]
        headers = [
            (name.encode("latin-1"), field.encode("latin-1")) for name, field in stored_headers
        ]
        body = text.encode("latin-1")
        # Where the app put its length; an entry stored before length_at existed gets one last.
        length_at = value[3] if len(value) >= 4 else len(headers)
        if not head and status not in _NO_LENGTH and length_at >= 0:
            headers.insert(length_at, (b"content-length", str(len(body)).encode()))
        born = value[4] if len(value) == 5 else None
        return cls(status, tuple(headers), body, hit_headers, born)

    def messages(self, extra: FixedHeaders, *, age: bool = True) -> tuple[Message, Message]:
        """The two messages that answer a request, with ``extra`` headers, then ``Age``, last
        (unless ``age`` is false: the middleware names no outcomes)."""
        headers = [*self.headers, *extra]
        if self.born is not None and age:
            headers.append(_age(self.born))
        start = {
            "type": "http.response.start",
            "status": self.status,
            "headers": headers,
        }
        return start, {"type": "http.response.body", "body": self.body, "more_body": False}


def _age(born: float) -> tuple[bytes, bytes]:
    """The ``Age`` header of a response generated at ``born`` (Unix seconds), now."""
    return b"age", b"%d" % max(0, int(time.time() - born))


def replay_maker(
    hit_headers: FixedHeaders, *, head: bool, ages: bool = True
) -> Callable[[Any], Replay]:
    """What a middleware's hits make of a stored answer: ``hit_now``'s ``made``.

    One function per middleware and method kind (a ``HEAD``'s key differs
    from a ``GET``'s), so that the engine hands each replay only to the
    middleware whose hit headers it holds.
    """

    def ready(value: Any) -> Replay:
        replay = Replay.of(value, head=head, hit_headers=hit_headers)
        return replay if ages else replay.without_age()

    return ready


async def hook_agrees(hook: Callable[..., Any], *args: Any, name: str, otherwise: str) -> bool:
    """Whether a user's hook (sync or async) agrees: anything but ``False`` does.

    A hook that raises disagrees, logged at a bounded rate as ``otherwise``
    (what the middleware does instead): the cache never fails a request.
    """
    try:
        verdict = hook(*args)
        if inspect.isawaitable(verdict):
            verdict = await verdict
    except Exception as exc:
        _log.warning(name, "asyncache: the %s hook raised %r; %s", name, exc, otherwise)
        return False
    return verdict is not False


async def admitted(hook: AdmitResponse, scope: Scope, response: StoredResponse) -> bool:
    """The middleware's ``admit`` hook's verdict on ``response``."""
    return await hook_agrees(hook, scope, response, name="admit", otherwise="not storing")
