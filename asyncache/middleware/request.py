"""The request side: what the headers say, reading the body, and what is keyed.

The body is read up to a cap before the app runs, because the key depends on
it. The app must not notice: ``BodyReplay`` hands it the bytes that were read,
once, and then forwards the server's ``receive`` so that it still sees
``http.disconnect``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from operator import itemgetter
from typing import Any, NamedTuple
from urllib.parse import parse_qsl

import orjson

from .types import Message, Receive, Scope

__all__ = [
    "BodyRead",
    "BodyReplay",
    "RequestHead",
    "body_slot",
    "directives",
    "header_codes",
    "read_body",
    "read_head",
    "request_inputs",
    "sorted_query",
]

# What a header means to the middleware: the low three bits of its code say
# which header it is, the bits above say which vary header it also is (plus one).
_CONTENT_TYPE = 1
_CONTENT_LENGTH = 2
_CACHE_CONTROL = 3
_CONTENT_ENCODING = 4
_CREDENTIAL = 5
_MEANING = 0b111
_VARY_SHIFT = 3


def directives(value: str) -> set[str]:
    """The directive names of a ``Cache-Control`` value, lowercased (``max-age=0``: ``max-age``)."""
    return {part.partition("=")[0].strip().lower() for part in value.split(",")}


class RequestHead:
    """What the middleware needs from the request headers, read in one pass.

    Attributes:
        content_type: every ``Content-Type`` value joined by commas; ``b""`` when absent.
        content_length: the declared length, ``None`` when absent or unparsable.
        no_store: the request's ``Cache-Control`` holds ``no-store``.
        encoded: the request has a ``Content-Encoding``.
        credentials: the request carries a credential header (``Authorization``, ``Cookie``).
        vary: for each ``vary`` header, the list of its values (empty when absent).
    """

    __slots__ = (
        "content_length",
        "content_type",
        "credentials",
        "encoded",
        "no_store",
        "seen_length",
        "vary",
    )

    def __init__(self, vary_count: int) -> None:
        self.content_type = b""
        self.content_length: int | None = None
        self.seen_length = False
        self.no_store = False
        self.encoded = False
        self.credentials = False
        self.vary: list[list[str]] = [[] for _ in range(vary_count)] if vary_count else []


def header_codes(vary: Iterable[bytes], credentials: Iterable[bytes]) -> dict[bytes, int]:
    """The lookup table ``read_head`` uses: lowercase header name -> what it means."""
    codes = {name: _CREDENTIAL for name in credentials}
    codes[b"content-type"] = _CONTENT_TYPE
    codes[b"content-length"] = _CONTENT_LENGTH
    codes[b"cache-control"] = _CACHE_CONTROL
    codes[b"content-encoding"] = _CONTENT_ENCODING
    for index, name in enumerate(vary):
        codes[name] = codes.get(name, 0) | (index + 1) << _VARY_SHIFT
    return codes


def read_head(
    headers: Iterable[tuple[bytes, bytes]], codes: Mapping[bytes, int], vary_count: int
) -> RequestHead:
    """Read what the middleware needs from the request headers in one pass."""
    head = RequestHead(vary_count)
    for name, value in headers:
        code = codes.get(name)
        if code is None:
            # ASGI servers lowercase header names; a hand-built scope may not.
            if name.islower() or (code := codes.get(name.lower())) is None:
                continue
        if code > _MEANING:
            head.vary[(code >> _VARY_SHIFT) - 1].append(value.decode("latin-1"))
        meaning = code & _MEANING
        if meaning == _CONTENT_TYPE:
            head.content_type = head.content_type + b"," + value if head.content_type else value
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
    return head


class BodyRead(NamedTuple):
    """The outcome of reading a request body.

    Attributes:
        body: the whole body, or ``None`` when it could not be keyed.
        replay: the messages the app must receive before ``receive()`` is forwarded.
        reason: why ``body`` is ``None`` (``body_too_large``, ``body_incomplete``).
    """

    body: bytes | None
    replay: list[Message]
    reason: str | None


async def read_body(receive: Receive, limit: int, first: Message | None = None) -> BodyRead:
    """Read the request body, stopping once it is over ``limit`` bytes or the client left.

    Args:
        receive: the server's ``receive``.
        limit: the most bytes to hold.
        first: the first message, when the caller already received it.
    """
    message = await receive() if first is None else first
    if message["type"] == "http.request" and not message.get("more_body", False):
        # The common case: one message. It is replayed as is, not copied.
        body = message.get("body", b"")
        if len(body) <= limit:
            return BodyRead(body, [message], None)
        return BodyRead(None, [message], "body_too_large")
    chunks: list[bytes] = []
    size = 0
    while True:
        if message["type"] != "http.request":
            # The client left (http.disconnect) before the body was complete: the
            # app gets what arrived and then the very message that says so.
            replay: list[Message] = [_partial(chunks, more=True)] if chunks else []
            replay.append(message)
            return BodyRead(None, replay, "body_incomplete")
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        more = bool(message.get("more_body", False))
        if size > limit:
            return BodyRead(None, [_partial(chunks, more=more)], "body_too_large")
        if not more:
            body = b"".join(chunks)
            return BodyRead(body, [_partial([body], more=False)], None)
        message = await receive()


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


def sorted_query(query_string: bytes) -> list[tuple[str, str]]:
    """The query's decoded pairs, sorted by name; repeated names keep their order.

    ``a=1&b=2`` and ``b=2&a=1`` key alike, ``a=1&a=2`` and ``a=2&a=1`` do not
    (frameworks hand repeated parameters to the app as an ordered list).
    Percent-escapes decode as Latin-1, so every distinct byte stays distinct.
    """
    if not query_string:
        return []
    pairs = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True, encoding="latin-1")
    pairs.sort(key=itemgetter(0))
    return pairs


def body_slot(content_type: bytes, body: bytes) -> list[Any]:
    """What the key holds for the body.

    A JSON body (``application/json`` or ``+json``) keys on its parsed value, so
    whitespace and object key order do not matter while ``1`` and ``1.0`` stay
    apart; anything else, malformed JSON included, keys on its raw bytes.

    A number with more digits than a double holds exactly (a 20-digit id, a
    long decimal) would parse to the same float as its neighbours; a body with
    one keys on its raw bytes too, so that no two different requests share a key.
    """
    known = _MEDIA.get(content_type)
    if known is None:
        known = _media(content_type)
    ctype, json_media = known
    if not body:
        return ["empty", ctype]
    if json_media is not None and _LONG_NUMBER(body) is None:
        try:
            return ["json", json_media, orjson.loads(body)]
        except orjson.JSONDecodeError:
            pass
    return ["raw", ctype, hashlib.blake2b(body, digest_size=16).hexdigest()]


# Sixteen digits and dots in a row: a number a double may not keep apart from its
# neighbours (doubles keep 15 significant digits). Matches inside strings too,
# which only makes such a body key on its bytes.
_LONG_NUMBER = re.compile(rb"[0-9][0-9.]{15}").search

# Content-Type header value -> (its text, its JSON media type or None); a client
# sends the same few values over and over.
_MEDIA: dict[bytes, tuple[str, str | None]] = {}
_MEDIA_MAX = 256


def _media(content_type: bytes) -> tuple[str, str | None]:
    ctype = content_type.decode("latin-1")
    media = ctype.partition(";")[0].strip().lower()
    known = (ctype, media if media == "application/json" or media.endswith("+json") else None)
    if len(_MEDIA) < _MEDIA_MAX:
        _MEDIA[content_type] = known
    return known


def request_inputs(scope: Scope, head: RequestHead, body: bytes) -> list[Any]:
    """The canonical request: method, path, sorted query, body and the vary headers."""
    return [
        scope["method"],
        scope.get("root_path", ""),
        scope["path"],
        sorted_query(scope.get("query_string", b"")),
        body_slot(head.content_type, body),
        head.vary,
    ]
