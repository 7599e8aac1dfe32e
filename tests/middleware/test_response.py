"""The response side: admission, the stored form, replay and capture."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from asyncache import DecisionCache
from asyncache.engine import Broadcast
from asyncache.middleware import DecisionCacheMiddleware, StoredResponse
from asyncache.middleware.capture import ResponseCapture, response_broadcast
from asyncache.middleware.response import (
    InvalidEntry,
    Replay,
    invalid_reason,
    refusal,
    to_value,
)

from . import Answer, RecordingApp, call

JSON = (b"content-type", b"application/json")


def start(status: int = 200, *headers: tuple[bytes, bytes], **extra: Any) -> dict[str, Any]:
    return {"type": "http.response.start", "status": status, "headers": list(headers), **extra}


def judge(message: dict[str, Any]) -> str | None:
    return refusal(message, statuses={200}, keyed={b"content-type", b"accept-language"}, limit=100)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (start(200, JSON), None),
        (start(201, JSON), "status"),
        (start(500, JSON), "failure"),
        (start(206, JSON), "status"),
        (start(304), "status"),
        (start(200, (b"cache-control", b"max-age=0")), "cache_control"),
        (start(200, (b"cache-control", b"public, s-maxage=0")), "cache_control"),
        (start(200, (b"cache-control", b'max-age="0"')), "cache_control"),
        (start(200, (b"pragma", b"no-cache")), "pragma"),
        (start(200, (b"expires", b"0")), "expires"),
        (start(200, (b"expires", b"Thu, 01 Jan 1970 00:00:00 GMT")), "expires"),
        (start(200, (b"expires", b"Fri, 01 Jan 2100 00:00:00 GMT")), None),
        (start(200, (b"expires", b"0"), (b"cache-control", b"max-age=60")), None),
        (start(200, JSON, (b"set-cookie", b"sid=1")), "set_cookie"),
        (start(200, (b"Set-Cookie", b"sid=1")), "set_cookie"),
        (start(200, (b"cache-control", b"private")), "cache_control"),
        (start(200, (b"cache-control", b"max-age=60, No-Store")), "cache_control"),
        (start(200, (b"cache-control", b"no-cache")), "cache_control"),
        (start(200, (b"cache-control", b'private="x-user"')), "cache_control"),
        (start(200, (b"cache-control", b"public, max-age=60")), None),
        (start(200, (b"vary", b"*")), "vary_star"),
        (start(200, (b"vary", b"Accept-Encoding")), "vary_unkeyed"),
        (start(200, (b"vary", b"Content-Type, Accept-Language")), None),
        (start(200, (b"content-type", b"text/event-stream; charset=utf-8")), "event_stream"),
        (start(200, (b"content-length", b"101")), "too_large"),
        (start(200, (b"content-length", b"100")), None),
        (start(200, JSON, trailers=True), "trailers"),
    ],
)
def test_refusal(message: dict[str, Any], reason: str | None) -> None:
    assert judge(message) == reason


def test_the_stored_form_drops_hop_by_hop_and_length_headers() -> None:
    response = StoredResponse(
        200,
        [
            JSON,
            (b"connection", b"keep-alive, x-trace"),
            (b"keep-alive", b"timeout=5"),
            (b"transfer-encoding", b"chunked"),
            (b"x-trace", b"abc"),
            (b"upgrade", b"h2c"),
            (b"proxy-authenticate", b"Basic"),
            (b"te", b"trailers"),
            (b"trailer", b"x-sum"),
            (b"content-length", b"4"),
            (b"x-cache", b"miss"),
            (b"x-model", b"v3\xe9"),
        ],
        b"\x00\xff{}",
    )
    value = to_value(response, {b"x-cache"})
    assert value[1] == [["content-type", "application/json"], ["x-model", "v3\xe9"]]
    assert value[3] == 1  # where the app put its length, among the kept headers
    start_message, body_message = Replay.of(value, head=False).messages(((b"x-cache", b"hit"),))
    assert body_message["body"] == b"\x00\xff{}"
    # The app's headers in the app's order, the length computed from the body.
    assert start_message["headers"] == [
        JSON,
        (b"content-length", b"4"),
        (b"x-model", b"v3\xe9"),
        (b"x-cache", b"hit"),
    ]
    # A streamed response sent no length: its hit sends none either.
    streamed = to_value(StoredResponse(200, [JSON], b"ab"), set())
    assert streamed[3] == -1
    assert Replay.of(streamed, head=False).messages(())[0]["headers"] == [JSON]
    # An entry stored before length_at existed gets its length last.
    assert Replay.of([200, [["a", "b"]], "xy"], head=False).messages(())[0]["headers"] == [
        (b"a", b"b"),
        (b"content-length", b"2"),
    ]


def test_replay_writes_no_length_for_204_and_keeps_the_apps_for_head() -> None:
    empty = [204, [], ""]
    assert Replay.of(empty, head=False).messages(())[0]["headers"] == []
    head = [200, [["content-length", "12"]], ""]
    assert Replay.of(head, head=True).messages(())[0]["headers"] == [(b"content-length", b"12")]


@pytest.mark.parametrize(
    "value",
    [
        {},
        {"label": "positive"},
        ["200", [], ""],
        [200, [["é€", "x"]], ""],
        [200, [["a"]], ""],
        [200, [], b"bytes"],
        [1, 2],
    ],
)
def test_replay_refuses_what_is_not_a_stored_response(value: Any) -> None:
    with pytest.raises(InvalidEntry):
        Replay.of(value, head=False).messages(())


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ([99, [], ""], "status"),
        ([600, [], ""], "status"),
        ([101, [], ""], "status"),
        ([True, [], ""], "status"),
        ([200, [["x-a", "b\r\nset-cookie: sid=1"]], ""], "header"),
        ([200, [["x-a", "b\x00"]], ""], "header"),
        ([200, [["x a", "b"]], ""], "header"),
        ([200, [["x-a\n", "b"]], ""], "header"),
        ([200, [["", "b"]], ""], "header"),
        ([200, [["x-a", "\u20ac"]], ""], "header"),
        ([200, [["transfer-encoding", "chunked"]], ""], "header"),
        ([200, [["Content-Length", "9"]], "abc"], "stored_length"),
        ([200, [], "\u20ac"], "shape"),
        ([200, [], "", 1], "shape"),
        ([200, [], "", "0"], "shape"),
        ([200, [["a", "b", "c"]], ""], "shape"),
        ([200, [], "", 0], None),
        ([200, [["x-a", "tab\there"]], "\xff"], None),
    ],
)
def test_a_value_is_checked_before_it_is_replayed(value: Any, reason: str | None) -> None:
    assert invalid_reason(value, head=False) == reason
    if reason is not None:
        with pytest.raises(InvalidEntry) as raised:
            Replay.of(value, head=False).messages(())
        assert raised.value.reason == reason


def test_a_head_answer_keeps_its_stored_length() -> None:
    assert invalid_reason([200, [["content-length", "12"]], ""], head=True) is None


def test_stored_response_helpers() -> None:
    response = StoredResponse(200, [(b"Content-Type", b"application/json")], b'{"a": 1}')
    assert response.header("content-type") == "application/json"
    assert response.header("x-missing") is None
    assert response.json() == {"a": 1}
    assert "200" in repr(response)


# -- capture ------------------------------------------------------------------


def capture_for(outcomes: list[Any], limit: int = 100) -> tuple[ResponseCapture, Broadcast]:
    broadcast = response_broadcast(limit, joinable=False)

    async def finish(response: StoredResponse | None, reason: str | None) -> None:
        outcomes.append((response, reason, len(broadcast.messages)))

    capture = ResponseCapture(
        broadcast,
        scope={},
        statuses={200},
        keyed={b"content-type"},
        limit=limit,
        admit=None,
        finish=finish,
    )
    return capture, broadcast


async def read(broadcast: Broadcast, reader: Any, got: list[dict[str, Any]]) -> None:
    """Read as the leader's client would, until the app ends."""
    while True:
        message = broadcast.take(reader)
        if message is None:
            if broadcast.ended:
                return
            await broadcast.changed().wait()
            continue
        got.append(message)
        broadcast.sent(reader)


def body(chunk: bytes, more: bool = False) -> dict[str, Any]:
    return {"type": "http.response.body", "body": chunk, "more_body": more}


async def test_the_start_goes_out_at_once_and_the_body_is_judged_as_it_passes() -> None:
    outcomes: list[Any] = []
    capture, broadcast = capture_for(outcomes)
    await capture(start(200, JSON))
    # Never held back: the start is handed on before any body message exists.
    assert [m["type"] for m in broadcast.messages] == ["http.response.start"]
    assert broadcast.decided.is_set() and broadcast.shared
    await capture(body(b"ab", more=True))
    await capture(body(b"cd"))
    assert len(outcomes) == 1
    response, reason, handed_on = outcomes[0]
    assert reason is None
    assert response.body == b"abcd"
    assert response.headers == [JSON]
    assert handed_on == 3  # every message was handed on before the store began
    assert broadcast.complete


async def test_a_refused_start_goes_out_at_once_and_releases_followers() -> None:
    outcomes: list[Any] = []
    capture, broadcast = capture_for(outcomes)
    owner, follower = broadcast.join(owner=True), broadcast.join()
    got: list[dict[str, Any]] = []
    client = asyncio.ensure_future(read(broadcast, owner, got))
    await capture(start(200, JSON, (b"set-cookie", b"sid=alice")))
    assert [reason for _, reason, _ in outcomes] == ["set_cookie"]
    assert broadcast.decided.is_set() and not broadcast.shared
    assert not follower.active and owner.active
    broadcast.end()
    await client
    assert [m["type"] for m in got] == ["http.response.start"]


async def test_a_5xx_is_neither_shared_nor_stored() -> None:
    # A 5xx may be the leader's own failure (its quota): its followers run the app.
    outcomes: list[Any] = []
    capture, broadcast = capture_for(outcomes)
    owner, follower = broadcast.join(owner=True), broadcast.join()
    await capture(start(503, JSON))
    assert [reason for _, reason, _ in outcomes] == ["failure"]
    assert broadcast.decided.is_set() and not broadcast.shared
    assert not follower.active and owner.active


async def test_a_body_growing_over_the_cap_is_handed_on_whole_and_not_stored() -> None:
    outcomes: list[Any] = []
    capture, broadcast = capture_for(outcomes, limit=5)
    got: list[dict[str, Any]] = []
    client = asyncio.ensure_future(read(broadcast, broadcast.join(owner=True), got))
    await capture(start(200, JSON))
    for chunk, more in ((b"abc", True), (b"def", True), (b"g", False)):
        await capture(body(chunk, more))
    broadcast.end()
    await client
    assert b"".join(m.get("body", b"") for m in got) == b"abcdefg"
    assert [(r, reason) for r, reason, _ in outcomes] == [(None, "too_large")]
    assert not broadcast.keep
    assert broadcast.messages == []  # past the cap, nothing is kept once it was sent


async def test_pathsend_is_handed_on_and_not_stored() -> None:
    outcomes: list[Any] = []
    capture, broadcast = capture_for(outcomes)
    got: list[dict[str, Any]] = []
    client = asyncio.ensure_future(read(broadcast, broadcast.join(owner=True), got))
    await capture(start(200, JSON))
    await capture({"type": "http.response.pathsend", "path": "/tmp/x"})
    broadcast.end()
    await client
    assert got == broadcast.messages
    assert [m["type"] for m in broadcast.messages] == [
        "http.response.start",
        "http.response.pathsend",
    ]
    assert [reason for _, reason, _ in outcomes] == ["pathsend"]


async def test_nobody_reading_what_will_not_be_stored_reaches_the_app() -> None:
    outcomes: list[Any] = []
    capture, broadcast = capture_for(outcomes)
    reader = broadcast.join(owner=True)
    broadcast.leave(reader)  # the client went away
    with pytest.raises(OSError, match="nobody reads"):
        await capture(start(200, JSON, (b"set-cookie", b"a=1")))


# -- the admit hooks, through the middleware ------------------------------


async def test_the_admit_hook_refuses_a_degraded_answer() -> None:
    seen: list[StoredResponse] = []

    def admit(scope: Any, response: StoredResponse) -> bool:
        seen.append(response)
        return response.json().get("degraded") is not True

    app = RecordingApp(Answer(chunks=[b'{"label": "unknown", "degraded": true}']))
    cache = DecisionCache()
    middleware = DecisionCacheMiddleware(app, cache=cache, routes=["/predict"], admit=admit)
    first = await call(middleware, body=b"{}")
    second = await call(middleware, body=b"{}")
    assert (first.cache, second.cache) == ("miss", "miss")
    assert app.calls == 2
    assert len(seen) == 2
    assert middleware.stats.not_admitted_reasons == {"admit": 2}
    app.answer = Answer(chunks=[b'{"label": "positive"}'])
    await call(middleware, body=b"{}")
    assert (await call(middleware, body=b"{}")).cache == "hit"


async def test_an_async_admit_hook_and_one_that_raises() -> None:
    async def refuse(scope: Any, response: StoredResponse) -> bool:
        return False

    def broken(scope: Any, response: StoredResponse) -> bool:
        raise RuntimeError("bug in the hook")

    for hook in (refuse, broken):
        app = RecordingApp()
        middleware = DecisionCacheMiddleware(app, cache=DecisionCache(), admit=hook)
        results = [await call(middleware, body=b"{}") for _ in range(2)]
        assert [r.status for r in results] == [200, 200]
        assert app.calls == 2


async def test_the_caches_own_admit_hook_sees_the_stored_dict() -> None:
    seen: list[Any] = []

    def admit(inputs: Any, result: Any) -> bool:
        seen.append(result)
        return False

    app = RecordingApp()
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache(admit=admit))
    await call(middleware, body=b"{}")
    await call(middleware, body=b"{}")
    assert app.calls == 2
    assert seen[0] == [200, [["content-type", "application/json"]], '{"label":"positive"}', -1]


async def test_alone_the_leaders_client_paces_the_app() -> None:
    # As a server's send: the app's send returns once its client took the message.
    outcomes: list[Any] = []
    capture, broadcast = capture_for(outcomes)
    # The start is not paced (a server's send of it only buffers the head): what the
    # app sends next without waiting goes out in the same step, as from a bare app.
    reader = broadcast.join(owner=True)
    await capture(start(200, JSON))
    assert broadcast.take(reader) is not None
    broadcast.sent(reader)
    sending = asyncio.ensure_future(capture(body(b"ab", more=True)))
    await asyncio.sleep(0)
    assert not sending.done()
    assert broadcast.take(reader) is not None
    broadcast.sent(reader)
    await sending


async def test_trailers_end_the_response_not_the_body() -> None:
    outcomes: list[Any] = []
    capture, broadcast = capture_for(outcomes)
    got: list[dict[str, Any]] = []
    client = asyncio.ensure_future(read(broadcast, broadcast.join(owner=True), got))
    await capture(start(200, JSON, trailers=True))
    await capture(body(b"ab"))
    assert not broadcast.complete
    await capture({"type": "http.response.trailers", "headers": [(b"x-sum", b"1")]})
    assert broadcast.complete
    broadcast.end()
    await client
    # The leader's client gets the trailers too; the response is not stored.
    assert [m["type"] for m in got][-1] == "http.response.trailers"
    assert [reason for _, reason, _ in outcomes] == ["trailers"]
