"""The response side: admission, the stored form, replay and capture."""

from __future__ import annotations

from typing import Any

import pytest

from asyncache import DecisionCache
from asyncache.middleware import DecisionCacheMiddleware, StoredResponse
from asyncache.middleware.response import (
    ResponseCapture,
    refusal,
    replay_messages,
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
        (start(500, JSON), "status"),
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
    start_message, body_message = replay_messages(value, [(b"x-cache", b"hit")], head=False)
    assert body_message["body"] == b"\x00\xff{}"
    assert start_message["headers"] == [
        JSON,
        (b"x-model", b"v3\xe9"),
        (b"content-length", b"4"),
        (b"x-cache", b"hit"),
    ]


def test_replay_writes_no_length_for_204_and_keeps_the_apps_for_head() -> None:
    empty = [204, [], ""]
    assert replay_messages(empty, [], head=False)[0]["headers"] == []
    head = [200, [["content-length", "12"]], ""]
    assert replay_messages(head, [], head=True)[0]["headers"] == [(b"content-length", b"12")]


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
    with pytest.raises((KeyError, TypeError, ValueError, AttributeError, UnicodeEncodeError)):
        replay_messages(value, [], head=False)


def test_stored_response_helpers() -> None:
    response = StoredResponse(200, [(b"Content-Type", b"application/json")], b'{"a": 1}')
    assert response.header("content-type") == "application/json"
    assert response.header("x-missing") is None
    assert response.json() == {"a": 1}
    assert "200" in repr(response)


# -- capture ------------------------------------------------------------------


class Sink:
    def __init__(self, fail_after: int | None = None) -> None:
        self.messages: list[dict[str, Any]] = []
        self.fail_after = fail_after

    async def __call__(self, message: dict[str, Any]) -> None:
        if self.fail_after is not None and len(self.messages) >= self.fail_after:
            raise OSError("gone")
        self.messages.append(message)


def capture_for(sink: Sink, outcomes: list[Any], limit: int = 100) -> ResponseCapture:
    async def finish(response: StoredResponse | None, reason: str | None) -> None:
        outcomes.append((response, reason, len(sink.messages)))

    return ResponseCapture(
        sink,
        scope={},
        extra=[(b"x-cache", b"miss")],
        statuses={200},
        keyed={b"content-type"},
        limit=limit,
        admit=None,
        finish=finish,
    )


async def test_start_is_held_until_the_first_body_message() -> None:
    sink, outcomes = Sink(), []
    capture = capture_for(sink, outcomes)
    await capture(start(200, JSON))
    assert sink.messages == []
    await capture({"type": "http.response.body", "body": b"ab", "more_body": True})
    assert [m["type"] for m in sink.messages] == ["http.response.start", "http.response.body"]
    assert sink.messages[0]["headers"] == [JSON, (b"x-cache", b"miss")]
    await capture({"type": "http.response.body", "body": b"cd", "more_body": False})
    assert len(outcomes) == 1
    response, reason, forwarded = outcomes[0]
    assert reason is None
    assert response.body == b"abcd"
    assert response.headers == [JSON]  # the app's headers, not ours
    assert forwarded == 3  # the client had everything before the store began


async def test_a_refused_start_goes_out_at_once() -> None:
    sink, outcomes = Sink(), []
    capture = capture_for(sink, outcomes)
    await capture(start(500, JSON))
    assert len(sink.messages) == 1
    assert outcomes == [(None, "status", 1)]
    await capture({"type": "http.response.body", "body": b"x"})
    assert len(sink.messages) == 2
    assert len(outcomes) == 1


async def test_a_body_growing_over_the_cap_is_forwarded_whole_and_not_stored() -> None:
    sink, outcomes = Sink(), []
    capture = capture_for(sink, outcomes, limit=5)
    await capture(start(200, JSON))
    for chunk, more in ((b"abc", True), (b"def", True), (b"g", False)):
        await capture({"type": "http.response.body", "body": chunk, "more_body": more})
    assert b"".join(m.get("body", b"") for m in sink.messages[1:]) == b"abcdefg"
    assert [(r, reason) for r, reason, _ in outcomes] == [(None, "too_large")]


async def test_pathsend_is_forwarded_and_not_stored() -> None:
    sink, outcomes = Sink(), []
    capture = capture_for(sink, outcomes)
    await capture(start(200, JSON))
    await capture({"type": "http.response.pathsend", "path": "/tmp/x"})
    assert [m["type"] for m in sink.messages] == ["http.response.start", "http.response.pathsend"]
    assert [reason for _, reason, _ in outcomes] == ["pathsend"]


async def test_a_client_gone_while_capturing_does_not_stop_the_copy() -> None:
    sink, outcomes = Sink(fail_after=1), []
    capture = capture_for(sink, outcomes)
    await capture(start(200, JSON))
    await capture({"type": "http.response.body", "body": b"ab", "more_body": True})
    await capture({"type": "http.response.body", "body": b"cd", "more_body": False})
    assert outcomes[0][0].body == b"abcd"


async def test_a_client_gone_after_refusal_reaches_the_app() -> None:
    sink, outcomes = Sink(fail_after=1), []
    capture = capture_for(sink, outcomes)
    await capture(start(500, JSON))
    with pytest.raises(OSError, match="gone"):
        await capture({"type": "http.response.body", "body": b"ab"})


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
    assert seen[0] == [200, [["content-type", "application/json"]], '{"label":"positive"}']
