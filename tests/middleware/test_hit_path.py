"""The hit path's memory: keys of recent requests, and replays made once per stored entry.

A hit on a hot entry neither re-keys its request nor decodes and checks the
entry again. These tests try to make either memory give a wrong answer: a
request that differs in one keyed part, principals that are equal in a dict
but key differently, a client that changes what it was sent, and an entry
replaced (validly or not) after its replay was made.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from asyncache import DecisionCache
from asyncache.middleware import DecisionCacheMiddleware
from asyncache.middleware.request import (
    REMEMBERED_HEADER_BYTES,
    REMEMBERED_REQUESTS,
    RequestHeads,
    RequestKeys,
    request_inputs,
)

from . import Answer, RecordingApp, call, make_scope

JSON = (b"content-type", b"application/json")

requests = st.fixed_dictionaries(
    {
        "method": st.sampled_from(["GET", "POST", "HEAD"]),
        "path": st.sampled_from(["/predict", "/predict/", "/other"]),
        "query": st.sampled_from([b"", b"a=1", b"a=1&a=2", b"a=2&a=1", b"flag", b"flag="]),
        "scheme": st.sampled_from(["http", "https"]),
        "host": st.sampled_from([None, b"acme.example", b"ACME.example", b"globex.example"]),
        "server": st.sampled_from([("127.0.0.1", 8000), ("127.0.0.1", 8001)]),
        "type": st.sampled_from([None, b"application/json", b"text/plain"]),
        "vary": st.lists(st.sampled_from([b"en", b"fr", b""]), max_size=2),
        "body": st.sampled_from([b"", b"{}", b'{"a":1}', b'{"a": 1}', b'{"a":1.0}', b"\xff"]),
        "principal": st.sampled_from([None, "1", 1, True, 1.0, "alice", ("a", 1)]),
    }
)


def _scope_and_head(request: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    headers: list[tuple[bytes, bytes]] = []
    if request["host"] is not None:
        headers.append((b"host", request["host"]))
    if request["type"] is not None:
        headers.append((b"content-type", request["type"]))
    headers += [(b"accept-language", value) for value in request["vary"]]
    scope = make_scope(request["method"], request["path"], headers=headers, query=request["query"])
    scope["scheme"] = request["scheme"]
    scope["server"] = request["server"]
    return scope, HEADS.read(scope["headers"])


# Heads as the middleware reads them: remembered, so that RequestKeys remembers keys.
HEADS = RequestHeads([b"accept-language"], [b"authorization"])


@settings(max_examples=300, deadline=None)
@given(st.lists(requests, min_size=1, max_size=12))
def test_a_remembered_key_is_the_key_the_request_would_get(batch: list[dict[str, Any]]) -> None:
    builder = DecisionCache().key_builder("/predict", None)
    keys = RequestKeys({"/predict": builder})
    for request in [*batch, *batch]:  # the second pass answers from memory
        scope, head = _scope_and_head(request)
        body, principal = request["body"], request["principal"]
        assert head.remembered
        expected = builder.key(request_inputs(scope, head, body), principal)
        assert keys.key("/predict", scope, head, body, principal) == expected


def test_principals_equal_in_a_dict_are_not_remembered_as_one() -> None:
    builder = DecisionCache().key_builder("/predict", None)
    keys = RequestKeys({"/predict": builder})
    scope, head = _scope_and_head(
        {
            "method": "POST",
            "path": "/predict",
            "query": b"",
            "scheme": "http",
            "host": b"acme.example",
            "server": ("127.0.0.1", 8000),
            "type": b"application/json",
            "vary": [],
            "body": b"{}",
            "principal": None,
        }
    )
    got = {repr(p): keys.key("/predict", scope, head, b"{}", p) for p in ["1", 1, True, 1.0]}
    assert len(set(got.values())) == len(got), got


def test_memory_of_keys_is_bounded() -> None:
    builder = DecisionCache().key_builder("/predict", None)
    keys = RequestKeys({"/predict": builder})
    heads = RequestHeads([], [])
    for n in range(REMEMBERED_REQUESTS * 3):
        scope = make_scope(headers=[JSON, (b"x-n", b"%d" % n)])
        keys.key("/predict", scope, heads.read(scope["headers"]), b"%d" % n, None)
    assert len(keys._known) == REMEMBERED_REQUESTS
    assert len(heads._known) == REMEMBERED_REQUESTS


def test_a_head_is_read_once_for_its_exact_headers_and_large_ones_every_time() -> None:
    heads = RequestHeads([], [b"authorization"])
    plain = [JSON, (b"host", b"acme.example")]
    assert heads.read(list(plain)) is heads.read(list(plain))
    other = heads.read([JSON, (b"host", b"globex.example")])
    assert other.host == "globex.example"
    private = heads.read([*plain, (b"authorization", b"Bearer x")])
    assert private.credentials and not heads.read(plain).credentials
    conditional = heads.read([*plain, (b"if-none-match", b'"v1"')])
    assert conditional.refusal == "conditional" and heads.read(plain).refusal is None
    large = [JSON, (b"x-padding", b"x" * REMEMBERED_HEADER_BYTES)]
    assert heads.read(large) is not heads.read(large)
    assert not heads.read(large).remembered
    as_lists = [[b"content-type", b"application/json"]]  # a hand-built scope
    assert heads.read(as_lists).content_type == b"application/json"  # type: ignore[arg-type]


async def test_a_client_that_changes_what_it_got_changes_no_later_hit() -> None:
    app = RecordingApp(Answer(headers=[JSON, (b"x-model", b"v1")]))
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache())
    await call(middleware, body=b"{}")
    sent: list[dict[str, Any]] = []

    async def hostile_send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.start":
            message["headers"].append((b"x-injected", b"yes"))
            message["headers"][0] = (b"content-type", b"text/evil")
            message["status"] = 500
        else:
            message["body"] = b"changed"

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    for _ in range(3):
        await middleware(make_scope(headers=[JSON]), receive, hostile_send)
    clean = await call(middleware, body=b"{}")
    assert (clean.status, clean.cache, clean.body) == (200, "hit", b'{"label":"positive"}')
    assert clean.header("x-injected") is None
    assert clean.header("content-type") == "application/json"
    assert app.calls == 1
    assert len(sent) == 6


async def test_a_replaced_entry_is_replayed_as_it_now_is() -> None:
    cache = DecisionCache()
    middleware = DecisionCacheMiddleware(RecordingApp(), cache=cache)
    await call(middleware, body=b"{}")
    assert (await call(middleware, body=b"{}")).cache == "hit"  # its replay is made
    (key,) = list(cache.store._data)  # type: ignore[attr-defined]
    await cache.store.delete(key)
    await cache.store_result(key, [200, [["content-type", "text/plain"]], "replaced", -1])
    hit = await call(middleware, body=b"{}")
    assert (hit.cache, hit.body, hit.header("content-type")) == ("hit", b"replaced", "text/plain")
    assert hit.header("content-length") is None  # length_at -1: the app sent none


async def test_an_entry_replaced_by_an_invalid_one_after_its_replay_is_a_bypass() -> None:
    cache = DecisionCache()
    app = RecordingApp()
    middleware = DecisionCacheMiddleware(app, cache=cache)
    await call(middleware, body=b"{}")
    assert (await call(middleware, body=b"{}")).cache == "hit"
    (key,) = list(cache.store._data)  # type: ignore[attr-defined]
    await cache.store.delete(key)
    await cache.store_result(key, [200, [["x-a", "b\r\nc"]], "x", -1])
    result = await call(middleware, body=b"{}")
    assert (result.status, result.cache) == (200, "bypass")
    assert middleware.stats.bypass_reasons == {"invalid_header": 1}
    assert await cache.store.count() == 0  # deleted, not replayed from memory
    assert app.calls == 2


async def test_a_head_and_a_get_each_get_their_own_replay() -> None:
    calls: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        # As Starlette answers: a HEAD gets the GET's headers and no body.
        calls.append(scope["method"])
        headers = [JSON, (b"content-length", b"20")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        body = b"" if scope["method"] == "HEAD" else b'{"label":"positive"}'
        await send({"type": "http.response.body", "body": body})

    middleware = DecisionCacheMiddleware(app, cache=DecisionCache(), methods=("GET", "HEAD"))
    for _ in range(3):
        get = await call(middleware, method="GET", body=b"")
        head = await call(middleware, method="HEAD", body=b"")
    assert (get.cache, get.body, get.header("content-length")) == (
        "hit",
        b'{"label":"positive"}',
        "20",
    )
    assert (head.cache, head.body, head.header("content-length")) == ("hit", b"", "20")
    assert calls == ["GET", "HEAD"]
