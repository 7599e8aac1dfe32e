"""The request side: header parsing, body reading and replay, what the key holds, routes."""

from __future__ import annotations

import re
from typing import Any

import pytest

from asyncache import DecisionCache
from asyncache.keys import canonical
from asyncache.middleware import DecisionCacheMiddleware
from asyncache.middleware.request import (
    BodyReplay,
    body_slot,
    header_codes,
    read_body,
    read_head,
    request_inputs,
    sorted_query,
)
from asyncache.middleware.routes import ANY_ROUTE, RouteTable

from . import RecordingApp, call, make_scope

CODES = header_codes([b"accept-language", b"x-model"], [b"authorization", b"cookie"])


def head(*headers: tuple[bytes, bytes]) -> Any:
    return read_head(list(headers), CODES, 2)


# -- headers ----------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [b"no-store", b"No-Store", b"max-age=0, NO-STORE", b"no-cache,no-store", b" no-store ;"],
)
def test_request_no_store_is_found_in_a_directive_list(value: bytes) -> None:
    # " no-store ;" is malformed, yet a cache that reads it as no-store is the safe one
    # (the same parser reads the response's, where storing it would be the harm).
    assert head((b"cache-control", value)).no_store is True


@pytest.mark.parametrize("value", [b"max-age=0", b"no-cache", b"x-no-store", b"no-storage"])
def test_other_request_directives_do_not_bypass(value: bytes) -> None:
    assert head((b"cache-control", value)).no_store is False


def test_no_store_in_a_second_cache_control_header_counts() -> None:
    assert head((b"cache-control", b"max-age=0"), (b"cache-control", b"no-store")).no_store


def test_credentials_and_content_encoding_are_recognized_in_any_case() -> None:
    assert head((b"Authorization", b"Bearer x")).credentials
    assert head((b"cookie", b"a=b")).credentials
    assert not head((b"x-api-key", b"k")).credentials
    assert head((b"content-encoding", b"gzip")).encoded
    assert not head((b"content-encoding", b"identity")).encoded


def test_vary_values_keep_absent_and_empty_apart() -> None:
    absent = head()
    empty = head((b"accept-language", b""))
    two = head((b"accept-language", b"en"), (b"Accept-Language", b"fr"), (b"x-model", b"b"))
    assert absent.vary == [[], []]
    assert empty.vary == [[""], []]
    assert two.vary == [["en", "fr"], ["b"]]


def test_a_vary_header_that_is_also_a_credential_is_both() -> None:
    codes = header_codes([b"authorization"], [b"authorization"])
    parsed = read_head([(b"authorization", b"Bearer t")], codes, 1)
    assert parsed.credentials
    assert parsed.vary == [["Bearer t"]]


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ([(b"content-length", b"12")], 12),
        ([(b"content-length", b"x")], None),
        ([(b"content-length", b"-1")], None),
        ([(b"content-length", b"12"), (b"content-length", b"13")], None),
        ([], None),
    ],
)
def test_content_length_is_used_only_when_clear(
    headers: list[tuple[bytes, bytes]], expected: int | None
) -> None:
    assert head(*headers).content_length == expected


# -- the key's inputs ------------------------------------------------------


def test_query_is_sorted_by_name_and_keeps_repeated_order() -> None:
    assert sorted_query(b"b=2&a=1") == sorted_query(b"a=1&b=2")
    assert sorted_query(b"a=1&a=2") != sorted_query(b"a=2&a=1")
    assert sorted_query(b"a=%41") == sorted_query(b"a=A")
    assert sorted_query(b"a=%FF") != sorted_query(b"a=%FE")
    assert sorted_query(b"a") == [("a", None)]
    assert sorted_query(b"flag") != sorted_query(b"flag=")  # an app may tell them apart
    assert sorted_query(b"b=1&a=2&c=0") == [("a", "2"), ("b", "1"), ("c", "0")]
    # A repeated name keeps the whole query in the order sent: an app walking the
    # pairs sees a=1, b=2, a=3 otherwise than a=1, a=3, b=2.
    assert sorted_query(b"a=1&b=2&a=3") == [("a", "1"), ("b", "2"), ("a", "3")]
    assert sorted_query(b"a=1&b=2&a=3") != sorted_query(b"a=1&a=3&b=2")
    assert sorted_query(b"") == []


def test_json_bodies_key_on_their_value() -> None:
    json = b"application/json"
    assert body_slot(json, b'{"a": 1, "b": [1, 2]}') == body_slot(json, b'{"b":[1,2],"a":1}')
    # 1 == 1.0 in Python: compare what the key holds.
    assert canonical(body_slot(json, b'{"a": 1}')) != canonical(body_slot(json, b'{"a": 1.0}'))
    # The whole Content-Type is keyed: an app may answer "; version=2" otherwise.
    assert body_slot(b"application/json; charset=utf-8", b"[1]") != body_slot(json, b"[1]")
    assert body_slot(b"application/json; version=2", b"[1]")[0] == "json"
    assert body_slot(b"application/vnd.api+json", b"[1]")[0] == "json"
    assert body_slot(b"application/vnd.api+json", b"[1]") != body_slot(json, b"[1]")


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (b'{"id": 123456789012345678901234567890}', b'{"id": 123456789012345678901234567891}'),
        (b'{"id": 18446744073709551616}', b'{"id": 18446744073709551617}'),
        (b'{"x": 0.10000000000000000001}', b'{"x": 0.1}'),
        (b'{"x": 12345678.123456789}', b'{"x": 12345678.123456788}'),
    ],
)
def test_numbers_a_double_would_merge_key_apart(one: bytes, other: bytes) -> None:
    json = b"application/json"
    assert canonical(body_slot(json, one)) != canonical(body_slot(json, other))


def test_malformed_json_and_other_types_key_on_raw_bytes() -> None:
    assert body_slot(b"application/json", b'{"a": 1')[0] == "raw"
    assert body_slot(b"application/json", b'{"a": 1') != body_slot(b"application/json", b'{"a":1')
    assert body_slot(b"text/plain", b'{"a": 1}') != body_slot(b"text/plain", b'{"a":1}')
    assert body_slot(b"text/plain", b"x") != body_slot(b"application/octet-stream", b"x")
    assert body_slot(b"", b"") == ["empty", ""]


def test_every_part_of_the_request_changes_the_key() -> None:
    cache = DecisionCache()
    builder = cache.key_builder("/predict")

    def key(
        method: str = "POST",
        path: str = "/predict",
        query: bytes = b"",
        body: bytes = b'{"x": 1}',
        headers: tuple[tuple[bytes, bytes], ...] = ((b"content-type", b"application/json"),),
        scope: Any = None,
    ) -> bytes:
        asgi = make_scope(method, path, headers=headers, query=query)
        parsed = read_head(asgi["headers"], CODES, 2)
        return builder.key(request_inputs(asgi, parsed, body), scope)

    base = key()
    variants = [
        key(method="PUT"),
        key(path="/predict/"),
        key(query=b"a=1"),
        key(body=b'{"x": 2}'),
        key(headers=((b"content-type", b"application/json"), (b"x-model", b""))),
        key(headers=((b"content-type", b"application/json"), (b"x-model", b"a"))),
        key(scope="tenant-a"),
        key(scope="tenant-b"),
    ]
    assert len({base, *variants}) == len(variants) + 1
    # Headers outside the vary list do not matter.
    assert key(headers=((b"content-type", b"application/json"), (b"user-agent", b"x"))) == base


# -- reading and replaying the body ---------------------------------------


def feeder(messages: list[dict[str, Any]]) -> Any:
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        return queue.pop(0)

    return receive


async def test_a_one_message_body_is_replayed_as_the_same_message() -> None:
    message = {"type": "http.request", "body": b"abc", "more_body": False}
    read = await read_body(feeder([message]), 10)
    assert read.body == b"abc"
    assert read.replay == [message]
    assert read.replay[0] is message


async def test_chunks_are_joined_and_replayed_once_then_receive_is_forwarded() -> None:
    chunks = [
        {"type": "http.request", "body": b"ab", "more_body": True},
        {"type": "http.request", "body": b"", "more_body": True},
        {"type": "http.request", "body": b"cd", "more_body": False},
    ]
    disconnect = {"type": "http.disconnect"}
    receive = feeder([*chunks, disconnect])
    read = await read_body(receive, 10)
    assert read.body == b"abcd"
    replay = BodyReplay(read.replay, receive)
    assert await replay() == {"type": "http.request", "body": b"abcd", "more_body": False}
    assert await replay() is disconnect


async def test_a_body_over_the_cap_is_replayed_whole_from_what_was_read() -> None:
    chunks = [
        {"type": "http.request", "body": b"12345", "more_body": True},
        {"type": "http.request", "body": b"67890", "more_body": True},
        {"type": "http.request", "body": b"xyz", "more_body": False},
    ]
    receive = feeder(chunks)
    read = await read_body(receive, 8)
    assert read.body is None
    assert read.reason == "body_too_large"
    replay = BodyReplay(read.replay, receive)
    got = [await replay(), await replay()]
    assert b"".join(m["body"] for m in got) == b"1234567890xyz"
    assert [m["more_body"] for m in got] == [True, False]


async def test_a_client_that_leaves_mid_body_is_seen_by_the_app() -> None:
    disconnect = {"type": "http.disconnect"}
    receive = feeder([{"type": "http.request", "body": b"ab", "more_body": True}, disconnect])
    read = await read_body(receive, 100)
    assert read.body is None
    assert read.reason == "body_incomplete"
    assert read.replay == [{"type": "http.request", "body": b"ab", "more_body": True}, disconnect]


async def test_a_single_message_over_the_cap_is_replayed_untouched() -> None:
    message = {"type": "http.request", "body": b"x" * 20, "more_body": False}
    read = await read_body(feeder([message]), 10)
    assert read.body is None
    assert read.replay == [message]


async def test_messages_already_received_are_read_first() -> None:
    first = {"type": "http.request", "body": b"ab", "more_body": True}
    second = {"type": "http.request", "body": b"cd", "more_body": True}
    read = await read_body(feeder([{"type": "http.request", "body": b"e"}]), 10, first, second)
    assert (read.body, read.reason) == (b"abcde", None)


# The way granian sends a small body: whole, then an empty last message; and its neighbours.
SPLIT_BODIES = [
    pytest.param([b'{"a": 1}', b""], id="whole-then-empty"),
    pytest.param([b'{"a":', b" 1}"], id="two-chunks"),
    pytest.param([b'{"a": 1}', b"", b""], id="whole-then-two-empty"),
    pytest.param([b'{"a": ', b"", b"1}"], id="part-then-empty-then-the-rest"),
    pytest.param([b"", b'{"a": 1}'], id="empty-then-whole"),
]


@pytest.mark.parametrize("chunks", SPLIT_BODIES)
async def test_a_body_however_split_keys_and_reaches_the_app_whole(chunks: list[bytes]) -> None:
    app = RecordingApp()
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache())
    first = await call(middleware, chunks=chunks)
    again = await call(middleware, chunks=chunks)
    alone = await call(middleware, body=b'{"a": 1}')  # the same body in one message
    assert (first.cache, again.cache, alone.cache) == ("miss", "hit", "hit")
    assert app.bodies == [b'{"a": 1}'] and app.calls == 1
    (received,) = app.received
    assert received[-1] == {"type": "http.request", "body": b'{"a": 1}', "more_body": False}


async def test_a_client_that_leaves_after_a_whole_first_message_is_a_bypass_the_app_sees() -> None:
    app = RecordingApp()
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache())
    first = {"type": "http.request", "body": b'{"a": 1}', "more_body": True}
    pending = [first, {"type": "http.disconnect"}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await middleware(make_scope(), receive, send)
    assert app.received == [[first, {"type": "http.disconnect"}]]
    assert middleware.stats.bypass_reasons == {"body_incomplete": 1}


# -- routes ---------------------------------------------------------------


def test_routes_match_exact_paths_templates_and_patterns() -> None:
    table = RouteTable(
        ["/predict", "/models/{name}/predict", "/files/{rest:path}", re.compile(r"/v[0-9]+/score")]
    )
    assert table.match("/predict") == "/predict"
    assert table.match("/predict/") is None
    assert table.match("/models/a/predict") == "/models/{name}/predict"
    assert table.match("/models/a/b/predict") is None
    assert table.match("/files/a/b/c") == "/files/{rest:path}"
    assert table.match("/v2/score") == r"/v[0-9]+/score"
    assert table.match("/v2/score/x") is None
    assert table.match("/other") is None
    assert RouteTable(None).match("/anything") == ANY_ROUTE


def test_int_and_uuid_convertors() -> None:
    table = RouteTable(["/items/{id:int}", "/runs/{run:uuid}"])
    assert table.match("/items/12") == "/items/{id:int}"
    assert table.match("/items/x") is None
    assert table.match("/runs/8d5e3c3a-9a5b-4d44-9c8e-0f6f2b1f6a11") == "/runs/{run:uuid}"
    assert table.match("/runs/nope") is None


@pytest.mark.parametrize(
    ("routes", "error"),
    [(["predict"], ValueError), ([], ValueError), (["/x/{a:bad}"], ValueError), ([3], TypeError)],
)
def test_bad_routes_are_refused(routes: list[Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        RouteTable(routes)
