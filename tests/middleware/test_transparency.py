"""Property: the app receives the same bytes with and without the middleware, which never raises.

Random bodies (JSON or not, over and under the cap), random chunkings (empty
chunks included, and clients that leave mid-body), random request headers
(credentials, Cache-Control, encodings, vary headers, odd case) and random
responses (statuses, cookies, Cache-Control, Vary, streamed bodies).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import orjson
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from asyncache import DecisionCache
from asyncache.middleware import DecisionCacheMiddleware

from . import make_scope

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
bodies = st.one_of(
    st.binary(max_size=600),
    json_values.map(orjson.dumps),
    json_values.map(lambda value: orjson.dumps(value, option=orjson.OPT_INDENT_2)),
)
header_values = st.binary(max_size=12).map(lambda raw: raw.replace(b"\r", b"").replace(b"\n", b""))
request_headers = st.lists(
    st.tuples(
        st.sampled_from(
            [
                b"content-type",
                b"Content-Type",
                b"authorization",
                b"cookie",
                b"cache-control",
                b"content-encoding",
                b"content-length",
                b"accept-language",
                b"x-anything",
            ]
        ),
        st.one_of(
            st.sampled_from(
                [
                    b"application/json",
                    b"application/json; charset=utf-8",
                    b"text/plain",
                    b"no-store",
                    b"max-age=0, No-Store",
                    b"gzip",
                    b"identity",
                    b"",
                    b"5",
                    b"100000",
                ]
            ),
            header_values,
        ),
    ),
    max_size=3,
)
response_headers = st.lists(
    st.tuples(
        st.sampled_from(
            [
                b"content-type",
                b"content-type",
                b"set-cookie",
                b"cache-control",
                b"vary",
                b"x-model",
                b"connection",
            ]
        ),
        st.one_of(
            st.sampled_from(
                [b"application/json", b"private", b"no-store", b"*", b"accept-language", b"close"]
            ),
            header_values,
        ),
    ),
    max_size=4,
)


@dataclass
class Seen:
    """What one app received and what its client got back."""

    received: list[tuple[str, bytes, bool]] = field(default_factory=list)
    status: int = 0
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""


def make_app(status: int, headers: list[tuple[bytes, bytes]], chunks: list[bytes]) -> Any:
    calls: list[list[tuple[str, bytes, bool]]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        received: list[tuple[str, bytes, bool]] = []
        calls.append(received)
        while True:
            message = await receive()
            received.append(
                (message["type"], message.get("body", b""), message.get("more_body", False))
            )
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        await send({"type": "http.response.start", "status": status, "headers": headers})
        for index, chunk in enumerate(chunks):
            more = index < len(chunks) - 1
            await send({"type": "http.response.body", "body": chunk, "more_body": more})

    app.calls = calls  # type: ignore[attr-defined]
    return app


async def drive(
    app: Any,
    scope: dict[str, Any],
    pieces: list[bytes],
    leaves: bool,
) -> Seen:
    """Run one request as a server would; ``leaves``: the client goes before the body ends."""
    pending = [
        {"type": "http.request", "body": piece, "more_body": leaves or i < len(pieces) - 1}
        for i, piece in enumerate(pieces)
    ]
    if leaves:
        pending.append({"type": "http.disconnect"})
    complete = asyncio.Event()
    seen = Seen()

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop(0)
        await complete.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            seen.status = message["status"]
            seen.headers = list(message["headers"])
        else:
            seen.body += message.get("body", b"")
            if not message.get("more_body", False):
                complete.set()

    await app(dict(scope), receive, send)
    return seen


def flatten(received: list[tuple[str, bytes, bool]]) -> tuple[bytes, bool, list[str]]:
    """The bytes an app got, whether it saw the body end, and the kinds of other messages."""
    body = b"".join(chunk for kind, chunk, _ in received if kind == "http.request")
    ended = any(kind == "http.request" and not more for kind, _, more in received)
    others = [kind for kind, _, _ in received if kind != "http.request"]
    return body, ended, others


def split(body: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(cut, len(body)) for cut in cuts})
    pieces, start = [], 0
    for point in points:
        pieces.append(body[start:point])
        start = point
    pieces.append(body[start:])
    return pieces


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=bodies,
    cuts=st.lists(st.integers(0, 600), max_size=4),
    leaves=st.sampled_from([False, False, False, True]),
    headers=request_headers,
    method=st.sampled_from(["POST", "POST", "GET"]),
    query=st.binary(max_size=16),
    cap=st.sampled_from([0, 16, 256, 1 << 20, 1 << 20, 1 << 20]),
    status=st.sampled_from([200, 200, 200, 201, 404, 500]),
    answer_headers=response_headers,
    answer_chunks=st.lists(st.binary(max_size=64), min_size=1, max_size=3),
    scoped=st.booleans(),
)
async def test_the_app_receives_the_same_bytes_and_clients_the_same_answer(
    body: bytes,
    cuts: list[int],
    leaves: bool,
    headers: list[tuple[bytes, bytes]],
    method: str,
    query: bytes,
    cap: int,
    status: int,
    answer_headers: list[tuple[bytes, bytes]],
    answer_chunks: list[bytes],
    scoped: bool,
) -> None:
    scope = make_scope(method, "/predict", headers=headers, query=query)
    pieces = split(body, cuts)
    bare = make_app(status, answer_headers, answer_chunks)
    inner = make_app(status, answer_headers, answer_chunks)
    middleware = DecisionCacheMiddleware(
        inner,
        cache=DecisionCache(),
        routes=["/predict"],
        methods=["POST", "GET"],
        vary=["accept-language"],
        max_body_bytes=cap,
        scope=(lambda s: "tenant") if scoped else None,
    )

    expected = await drive(bare, scope, pieces, leaves)
    got = await drive(middleware, scope, pieces, leaves)
    assert flatten(inner.calls[0]) == flatten(bare.calls[0])
    assert got.status == expected.status
    assert got.body == expected.body
    ours = {b"x-cache", b"server-timing"}
    assert [h for h in got.headers if h[0] not in ours] == expected.headers

    # The same request again: a hit answers the same status and body without the app.
    again = await drive(middleware, scope, pieces, leaves)
    assert again.status == expected.status
    assert again.body == expected.body
    outcome = dict(again.headers)[b"x-cache"]
    event(f"second request: {outcome.decode()}")
    if outcome == b"hit":
        assert len(inner.calls) == 1
        lengths = [value for name, value in again.headers if name == b"content-length"]
        sent = any(name.lower() == b"content-length" for name, _ in expected.headers)
        # A length where the app sent one (computed from the body), none where it sent none.
        assert lengths == ([str(len(expected.body)).encode()] if sent else [])
        names = {name.lower() for name, _ in again.headers}
        assert b"set-cookie" not in names
        assert b"connection" not in names
    else:
        assert len(inner.calls) == 2
        assert flatten(inner.calls[1]) == flatten(bare.calls[0])
