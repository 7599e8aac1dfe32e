"""The request side: what the headers say, reading the body, and what is keyed.

The body is read up to a cap before the app runs, because the key depends on
it. The app must not notice: ``BodyReplay`` hands it the bytes that were read,
once, and then forwards the server's ``receive`` so that it still sees
``http.disconnect``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from ..keys import KeyBuilder
from .body import body_slot, sorted_query
from .freshness import cache_control
from .types import Message, Receive, Scope

__all__ = [
    "CONDITIONAL",
    "FORWARDING",
    "BodyBudget",
    "BodyRead",
    "BodyReplay",
    "RequestHead",
    "RequestHeads",
    "RequestKeys",
    "directives",
    "header_codes",
    "read_body",
    "read_head",
    "request_inputs",
    "whole_body",
]

# What a header means to the middleware: the low four bits of its code say
# which header it is, the bits above say which vary header it also is (plus one).
_CONTENT_TYPE = 1
_CONTENT_LENGTH = 2
_CACHE_CONTROL = 3
_CONTENT_ENCODING = 4
_CREDENTIAL = 5
_HOST = 6
_CONDITIONAL = 7
_FORWARDING = 8
# Headers that make a request conditional or partial: its answer (304, 206, 412) is
# for it alone, and a stored 200 is not what the app would send it.
CONDITIONAL = (
    b"if-match",
    b"if-modified-since",
    b"if-none-match",
    b"if-range",
    b"if-unmodified-since",
    b"range",
)
FORWARDING = (
    b"forwarded",
    b"front-end-https",
    b"x-forwarded-host",
    b"x-forwarded-port",
    b"x-forwarded-prefix",
    b"x-forwarded-proto",
    b"x-forwarded-scheme",
    b"x-forwarded-server",
    b"x-forwarded-ssl",
    b"x-host",
    b"x-http-method",
    b"x-http-method-override",
    b"x-method-override",
    b"x-original-host",
    b"x-original-url",
    b"x-rewrite-url",
    b"x-url-scheme",
)
"""Request headers through which a proxy (or a client posing as one) tells the app
another host, scheme, port, path or method than the request's own: an app (or a
framework's proxy fix) that reads one answers differently, so the middleware
bypasses a request that carries one unless the key holds it (``forwarding``).
``X-Forwarded-For`` and ``X-Real-IP`` name the client, not the resource, and are
not among them."""
_MEANING = 0b1111
_VARY_SHIFT = 4
# The meanings a header also has when spelled with "_" for "-": a server hands the
# name on as sent, and a WSGI bridge or CGI maps both spellings to one HTTP_X_API_KEY.
_ALIASED = frozenset({_CREDENTIAL, _FORWARDING})


def directives(value: str) -> set[str]:
    """The directive names of a ``Cache-Control`` value, lowercased (``max-age=0``: ``max-age``)."""
    return set(cache_control((value,)))


class RequestHead:
    """What the middleware needs from the request headers, read in one pass.

    Attributes:
        content_type: the ``Content-Type`` value; ``b""`` when absent.
        content_length: the declared length, ``None`` when absent or unparsable.
        no_store: the request's ``Cache-Control`` holds ``no-store``.
        encoded: the request has a ``Content-Encoding``.
        credentials: the request carries a credential header (``Authorization``,
            ``Cookie``), in any spelling.
        conditional: the request has a validator or a ``Range`` (``CONDITIONAL``).
        forwarded: the request has a forwarding header (``FORWARDING``) the key
            does not hold.
        repeated: the request repeats a header the key holds one value of
            (``Host``, ``Content-Type``): apps differ on which one they read.
        host: the first ``Host`` header, lowercased; ``None`` when absent.
        vary: for each ``vary`` header, the list of its values (empty when absent).
        refusal: why the request bypasses the cache whatever else it holds
            (``no_store``, ``content_encoding``, ``conditional``,
            ``repeated_header``, ``forwarded``; and ``body_too_large`` from
            ``RequestHeads`` with a limit), or ``None``.
        remembered: ``RequestHeads`` keeps this head for later requests.
        public: no refusal and no credentials (set by ``RequestHeads``, once
            its refusal is final): what the middleware's hit path checks.
    """

    __slots__ = (
        "conditional",
        "content_length",
        "content_type",
        "credentials",
        "encoded",
        "forwarded",
        "host",
        "no_store",
        "public",
        "refusal",
        "remembered",
        "repeated",
        "seen_length",
        "seen_type",
        "vary",
    )

    def __init__(self, vary_count: int) -> None:
        self.content_type = b""
        self.seen_type = False
        self.content_length: int | None = None
        self.seen_length = False
        self.no_store = False
        self.encoded = False
        self.credentials = False
        self.conditional = False
        self.forwarded = False
        self.repeated = False
        self.host: str | None = None
        self.refusal: str | None = None
        self.remembered = False
        self.public = False
        self.vary: list[list[str]] = [[] for _ in range(vary_count)] if vary_count else []


def header_codes(
    vary: Iterable[bytes], credentials: Iterable[bytes], forwarding: Iterable[bytes] = FORWARDING
) -> dict[bytes, int]:
    """The lookup table ``read_head`` uses: lowercase header name -> what it means.

    A forwarding header that is also a vary header is keyed, not refused.
    """
    vary = list(vary)
    codes = {name: _FORWARDING for name in forwarding if name not in vary}
    codes.update((name, _CREDENTIAL) for name in credentials)
    codes[b"content-type"] = _CONTENT_TYPE
    codes[b"content-length"] = _CONTENT_LENGTH
    codes[b"cache-control"] = _CACHE_CONTROL
    codes[b"content-encoding"] = _CONTENT_ENCODING
    codes[b"host"] = _HOST
    for name in CONDITIONAL:
        codes[name] = _CONDITIONAL
    for index, name in enumerate(vary):
        codes[name] = codes.get(name, 0) | (index + 1) << _VARY_SHIFT
    return codes


def _alias(name: bytes, codes: Mapping[bytes, int]) -> int:
    """What ``name`` means when it is a credential, forwarding or vary header spelled with ``_``."""
    code = codes.get(name.lower().replace(b"_", b"-"), 0)
    vary = code & ~_MEANING
    return vary | (code & _MEANING) if (code & _MEANING) in _ALIASED else vary


def read_head(
    headers: Iterable[tuple[bytes, bytes]], codes: Mapping[bytes, int], vary_count: int
) -> RequestHead:
    """Read what the middleware needs from the request headers in one pass."""
    head = RequestHead(vary_count)
    for name, value in headers:
        code = codes.get(name)
        if code is None:
            # ASGI servers lowercase header names; a hand-built scope may not. A name
            # with "_" may be another spelling of one the key or a refusal reads.
            if (name.islower() or (code := codes.get(name.lower())) is None) and (
                b"_" not in name or not (code := _alias(name, codes))
            ):
                continue
        if code > _MEANING:
            head.vary[(code >> _VARY_SHIFT) - 1].append(value.decode("latin-1"))
        meaning = code & _MEANING
        if meaning == _CONTENT_TYPE:
            if head.seen_type and code <= _MEANING:
                head.repeated = True
            head.seen_type = True
            head.content_type = value if not head.content_type else head.content_type
        elif meaning == _CONTENT_LENGTH:
            try:
                length = int(value)
            except ValueError:
                length = -1
            # A second or unparsable length is the server's problem; only one clear length helps.
            first = head.content_length is None and not head.seen_length
            head.content_length = length if length >= 0 and first else None
            head.seen_length = True
        elif meaning == _CACHE_CONTROL:
            if "no-store" in directives(value.decode("latin-1")):
                head.no_store = True
        elif meaning == _CONTENT_ENCODING:
            stripped = value.strip().lower()
            if stripped and stripped != b"identity":
                head.encoded = True
        elif meaning == _CREDENTIAL:
            head.credentials = True
        elif meaning == _CONDITIONAL:
            head.conditional = True
        elif meaning == _HOST:
            if head.host is None:
                head.host = value.decode("latin-1").lower()
            elif code <= _MEANING:
                # Servers pass a second Host on (uvicorn with httptools does); an app
                # reading dict(scope["headers"]) sees the last, the key the first.
                head.repeated = True
        elif meaning == _FORWARDING:
            head.forwarded = True
    if head.no_store:
        head.refusal = "no_store"
    elif head.encoded:
        head.refusal = "content_encoding"
    elif head.conditional:
        head.refusal = "conditional"
    elif head.repeated:
        head.refusal = "repeated_header"
    elif head.forwarded:
        head.refusal = "forwarded"
    return head


class RequestHeads:
    """``read_head`` with the heads of recent requests remembered, by their exact headers.

    A service's clients send the same few header lists again and again, so
    each is read once. A head is never changed once read, so requests share
    it. Header lists longer than ``REMEMBERED_HEADER_BYTES`` in all are read
    every time: a bound on the memory this holds.

    Args:
        vary: the request headers in the key, lowercased.
        credentials: the request headers that make a request private, lowercased.
        forwarding: the forwarding headers that make a request bypass
            unless ``vary`` holds them.
        max_body_bytes: a head whose ``Content-Length`` says more gets the
            refusal ``body_too_large`` (when it has no other), so that the hit
            path checks one refusal; ``None`` for no limit.

    Attributes:
        known: exact headers (a tuple) -> their head; the middleware's hit
            path looks a request up here itself before calling ``read``.
    """

    __slots__ = ("_codes", "_max_body_bytes", "_vary_count", "known")

    def __init__(
        self,
        vary: list[bytes],
        credentials: list[bytes],
        max_body_bytes: int | None = None,
        forwarding: Iterable[bytes] = FORWARDING,
    ) -> None:
        self._codes = header_codes(vary, credentials, forwarding)
        self._vary_count = len(vary)
        self._max_body_bytes = max_body_bytes
        self.known: dict[tuple[tuple[bytes, bytes], ...], RequestHead] = {}

    def read(self, headers: Iterable[tuple[bytes, bytes]]) -> RequestHead:
        """What ``headers`` say (``read_head``)."""
        try:
            exact = tuple(headers)
            head = self.known.get(exact)
        except TypeError:  # a hand-built scope with lists for pairs
            return self._read(headers)
        if head is None:
            head = self._read(exact)
            if sum(len(name) + len(value) for name, value in exact) <= REMEMBERED_HEADER_BYTES:
                known = self.known
                if len(known) >= REMEMBERED_REQUESTS:
                    _forget_oldest(known)
                known[exact] = head
                head.remembered = True
        return head

    def _read(self, headers: Iterable[tuple[bytes, bytes]]) -> RequestHead:
        head = read_head(headers, self._codes, self._vary_count)
        limit = self._max_body_bytes
        if head.refusal is None and limit is not None and (head.content_length or 0) > limit:
            head.refusal = "body_too_large"
        head.public = head.refusal is None and not head.credentials
        return head


class BodyBudget:
    """The request bytes every connection's body holds while it arrives, bounded in all.

    Each request's body is capped (``max_body_bytes``), but clients that
    declare a large body and stall before its end would hold that many
    bytes each, on as many connections as they open. Past ``limit`` bytes
    in all, a body being read is handed on to the app as it stands
    (``body_budget``) instead of being held for a key: the cache, not the
    app, is what gives way.

    Args:
        limit: the most bytes held at once across requests.
    """

    __slots__ = ("held", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        """Bytes held by bodies being read now."""

    def take(self, size: int) -> bool:
        """Hold ``size`` more bytes, if that stays within the limit."""
        if self.held + size > self.limit:
            return False
        self.held += size
        return True

    def give_back(self, size: int) -> None:
        """``size`` bytes are no longer held while arriving."""
        self.held -= size


class BodyRead(NamedTuple):
    """The outcome of reading a request body.

    Attributes:
        body: the whole body, or ``None`` when it could not be keyed.
        replay: the messages the app must receive before ``receive()`` is forwarded.
        reason: why ``body`` is ``None`` (``body_too_large``, ``body_incomplete``,
            ``body_budget``).
    """

    body: bytes | None
    replay: list[Message]
    reason: str | None


async def read_body(
    receive: Receive, limit: int, *received: Message, budget: BodyBudget | None = None
) -> BodyRead:
    """Read the request body, stopping once it is over ``limit`` bytes or the client left.

    Args:
        receive: the server's ``receive``.
        limit: the most bytes to hold.
        received: the messages the caller already received, in order.
        budget: what every request's body may hold while it arrives, in all;
            past it, reading stops (``body_budget``).
    """
    pending = list(received)
    message = pending.pop(0) if pending else await receive()
    if message["type"] == "http.request" and not message.get("more_body", False):
        # The common case: one message. It is replayed as is, not copied.
        body = message.get("body", b"")
        if len(body) <= limit:
            return BodyRead(body, [message], None)
        return BodyRead(None, [message], "body_too_large")
    chunks: list[bytes] = []
    size = 0
    held = 0  # what this read holds of the budget
    try:
        while True:
            if message["type"] != "http.request":
                # The client left (http.disconnect) before the body was complete: the
                # app gets what arrived and then the very message that says so.
                replay: list[Message] = [_partial(chunks, more=True)] if chunks else []
                replay.append(message)
                return BodyRead(None, replay, "body_incomplete")
            chunk = message.get("body", b"")
            more = bool(message.get("more_body", False))
            if chunk:
                chunks.append(chunk)
                size += len(chunk)
                if more and budget is not None and size <= limit:
                    if not budget.take(len(chunk)):
                        return BodyRead(None, [_partial(chunks, more=True)], "body_budget")
                    held += len(chunk)
            if size > limit:
                return BodyRead(None, [_partial(chunks, more=more)], "body_too_large")
            if not more:
                # One chunk (and an empty last message) is the chunk itself, not a copy.
                body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                return BodyRead(body, [_partial([body], more=False)], None)
            message = pending.pop(0) if pending else await receive()
    finally:
        if held and budget is not None:
            budget.give_back(held)


def whole_body(message: Message, body: bytes) -> list[Message]:
    """What the app receives for a body read whole: ``message`` itself when it is the only one.

    Otherwise (the body whole in ``message``, then an empty last message) one
    message with the body.
    """
    if message.get("more_body", False):
        return [_partial([body], more=False)]
    return [message]


def _partial(chunks: list[bytes], *, more: bool) -> Message:
    return {"type": "http.request", "body": b"".join(chunks), "more_body": more}


class BodyReplay:
    """The app's ``receive``: the messages already read, once, then the server's ``receive``."""

    __slots__ = ("_pending", "_receive")

    def __init__(self, pending: list[Message], receive: Receive) -> None:
        self._pending = pending
        self._receive = receive

    async def __call__(self) -> Message:
        if self._pending:
            return self._pending.pop(0)
        return await self._receive()


def request_inputs(scope: Scope, head: RequestHead, body: bytes) -> list[Any]:
    """The canonical request: method, path, sorted query, body, vary headers, scheme and host.

    The host is the ``Host`` header, or the server's address when there is
    none: two sites behind one app never share an answer (a redirect to
    ``www.`` would otherwise loop), nor do ``http`` and ``https``.
    """
    host = head.host
    if host is None:
        server = scope.get("server")
        host = f"{server[0]}:{server[1]}" if server else ""
    return [
        scope["method"],
        scope.get("root_path", ""),
        scope["path"],
        sorted_query(scope.get("query_string", b"")),
        body_slot(head.content_type, body),
        head.vary,
        scope.get("scheme", "http"),
        host,
    ]


class RequestKeys:
    """The key of each request, with the keys of recent small requests remembered.

    A key is made from the canonical request (``request_inputs``: the body
    parsed and re-encoded, the query sorted) and hashed with BLAKE2b. For a
    hot request that is the same work every time, so the key is remembered
    by exactly what it is made of: the route, the scope's method, paths,
    query and scheme, the request's head (``RequestHeads``: its exact
    headers), the server when no ``Host`` names the site, the raw body and
    the principal. Equal parts give equal inputs,
    hence the same key; only a principal that is ``None`` or a ``str`` is
    remembered (``1``, ``True`` and ``1.0`` are equal in a dict and key
    differently).

    Args:
        builders: the key builder of each route.

    Attributes:
        known: the parts a key is remembered by (``key`` lists them) -> the
            key; the middleware's hit path looks an unscoped request up here
            itself before calling ``key``.
    """

    __slots__ = ("_builders", "known")

    def __init__(self, builders: Mapping[str, KeyBuilder]) -> None:
        self._builders = builders
        self.known: dict[tuple[Any, ...], bytes] = {}

    def key(
        self, route: str, scope: Scope, head: RequestHead, body: bytes, principal: Any
    ) -> bytes:
        """The key of this request under ``route``.

        Raises:
            TypeError: the principal cannot be keyed.
        """
        if (
            not head.remembered
            or len(body) > REMEMBERED_BODY_BYTES
            or not (principal is None or type(principal) is str)
            or len(principal or "") + len(scope.get("query_string", b"")) > REMEMBERED_BODY_BYTES
            or len(scope.get("path", "")) + len(scope.get("root_path", "")) > REMEMBERED_BODY_BYTES
        ):
            return self._build(route, scope, head, body, principal)
        # The head stands for the headers it was read from (by identity: a head is
        # never changed, and one that is remembered here stays alive).
        known = self.known
        try:
            # What a server always puts in a scope, read without defaults (faster).
            parts = (
                route,
                scope["method"],
                scope["root_path"],
                scope["path"],
                scope["query_string"],
                scope["scheme"],
                head,
                None if head.host is not None else scope["server"],
                body,
                principal,
            )
            key = known.get(parts)
        except (KeyError, TypeError):  # a hand-built scope: without a part, or with a list
            return self._build(route, scope, head, body, principal)
        if key is None:
            key = self._build(route, scope, head, body, principal)
            if len(known) >= REMEMBERED_REQUESTS:
                _forget_oldest(known)
            known[parts] = key
        return key

    def _build(
        self, route: str, scope: Scope, head: RequestHead, body: bytes, principal: Any
    ) -> bytes:
        return self._builders[route].key(request_inputs(scope, head, body), principal)


REMEMBERED_BODY_BYTES = 1024
"""Requests with bodies up to this size (and paths, queries and principals as well)
have their keys remembered: what the memory holds is bounded in bytes, whatever
the clients send."""
REMEMBERED_REQUESTS = 512
"""How many keys (and, apart, heads) are remembered; the oldest goes first."""
REMEMBERED_HEADER_BYTES = 4096
"""Heads of requests whose headers hold up to this many bytes are remembered."""


def _forget_oldest(known: dict[Any, Any]) -> None:
    """Drop the oldest remembered item; a middleware served by several threads' loops may
    have another thread drop it first, or change the dict while this looks."""
    try:
        del known[next(iter(known))]
    except (KeyError, RuntimeError, StopIteration):
        pass
