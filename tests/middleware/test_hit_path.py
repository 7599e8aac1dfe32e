"""The hit path's memory: keys of recent requests, and replays made once per stored entry.

A hit on a hot entry neither re-keys its request nor decodes and checks the
entry again. These tests try to make either memory give a wrong answer: a
request that differs in one keyed part, principals that are equal in a dict
but key differently, hand-built scopes, two middlewares over one cache, and
an entry replaced (validly or not) after its replay was made. What a client
that changes what it was sent can do is in ``test_changed_messages.py``.
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

from . import RecordingApp, call, make_scope

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
        "root_path": st.sampled_from(["", "/api"]),
        # A hand-built scope may leave out what a server always puts in.
        "missing": st.sets(st.sampled_from(["root_path", "query_string", "scheme", "server"])),
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
    scope["root_path"] = request["root_path"]
    for part in request.get("missing", ()):
        del scope[part]
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


BASE = {
    "method": "POST",
    "path": "/predict",
    "query": b"a=1",
    "scheme": "http",
    "host": None,
    "server": ("127.0.0.1", 8000),
    "type": b"application/json",
    "vary": [b"en"],
    "body": b'{"a":1}',
    "principal": None,
    "root_path": "",
}
ONE_PART_CHANGED = {
    "method": "GET",
    "path": "/predict/",
    "query": b"a=2",
    "scheme": "https",
    "server": ("127.0.0.1", 8001),  # keyed: no Host names the site
    "type": b"text/plain",
    "vary": [b"fr"],
    "body": b'{"a":2}',
    "principal": "alice",
    "root_path": "/api",
}


def test_a_request_that_differs_in_one_keyed_part_is_never_handed_the_others_key() -> None:
    builder = DecisionCache().key_builder("/predict", None)
    for part, value in ONE_PART_CHANGED.items():
        keys = RequestKeys({"/predict": builder})
        for request in [BASE, {**BASE, part: value}, BASE, {**BASE, part: value}]:
            scope, head = _scope_and_head(request)
            body, principal = request["body"], request["principal"]
            expected = builder.key(request_inputs(scope, head, body), principal)
            assert keys.key("/predict", scope, head, body, principal) == expected, part
        assert len(set(keys.known.values())) == 2, part


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
            "root_path": "",
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
    assert len(keys.known) == REMEMBERED_REQUESTS
    assert len(heads.known) == REMEMBERED_REQUESTS


def test_keys_of_requests_with_long_paths_queries_or_principals_are_not_remembered() -> None:
    # The memory is bounded in bytes: a client sending megabyte queries leaves nothing.
    builder = DecisionCache().key_builder("/predict", None)
    keys = RequestKeys({"/predict": builder})
    heads = RequestHeads([], [])
    long = b"q=" + b"x" * 64 * 1024
    for scope, principal in (
        (make_scope(query=long), None),
        (make_scope(path="/predict/" + "p" * 64 * 1024), None),
        (make_scope(), "tenant-" + "t" * 64 * 1024),
    ):
        keys.key("/predict", scope, heads.read(scope["headers"]), b"{}", principal)
    assert keys.known == {}


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


async def test_two_middlewares_over_one_cache_each_send_their_own_status_headers() -> None:
    # A replay remembers its headers joined with the last extra ones it was sent with.
    cache = DecisionCache()
    app = RecordingApp()
    plain = DecisionCacheMiddleware(app, cache=cache)
    named = DecisionCacheMiddleware(app, cache=cache, status_header="X-Edge", cache_status=True)
    await call(plain, body=b"{}")
    for _ in range(3):
        first, second = await call(plain, body=b"{}"), await call(named, body=b"{}")
        assert (first.cache, first.header("x-edge"), first.header("cache-status")) == (
            "hit",
            None,
            None,
        )
        assert (second.header("x-cache"), second.header("x-edge")) == (None, "hit")
        assert second.header("cache-status") == "asyncache; hit"
        assert [name for name, _ in second.headers].count(b"x-edge") == 1
    assert app.calls == 1


def test_a_head_over_the_body_limit_is_refused_as_too_large_after_other_refusals() -> None:
    heads = RequestHeads([], [], max_body_bytes=10)
    assert heads.read([JSON, (b"content-length", b"11")]).refusal == "body_too_large"
    assert heads.read([JSON, (b"content-length", b"10")]).refusal is None
    assert heads.read([JSON]).refusal is None  # no length: the body is measured as it comes
    no_store = [(b"cache-control", b"no-store"), (b"content-length", b"11")]
    assert heads.read(no_store).refusal == "no_store"
    assert RequestHeads([], []).read([JSON, (b"content-length", b"11")]).refusal is None


class _Counting:
    """A RequestHeads or RequestKeys that counts the calls the hit path makes to it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.known = inner.known
        self.calls = 0

    def read(self, *args: Any) -> Any:
        self.calls += 1
        return self.inner.read(*args)

    def key(self, *args: Any) -> Any:
        self.calls += 1
        return self.inner.key(*args)


async def test_a_repeated_request_is_answered_from_both_memories_as_the_call_looks_them_up() -> (
    None
):
    # DecisionCacheMiddleware.__call__ looks both memories up itself, by the parts that
    # RequestHeads.read and RequestKeys.key remember by: if those ever differ, this fails.
    app = RecordingApp()
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache(), vary=["accept-language"])
    headers = [JSON, (b"host", b"acme.example"), (b"accept-language", b"fr")]
    first = await call(middleware, body=b'{"a": 1}', headers=headers)
    heads = middleware._heads = _Counting(middleware._heads)  # type: ignore[assignment]
    keys = middleware._keys = _Counting(middleware._keys)  # type: ignore[assignment]
    for _ in range(3):
        hit = await call(middleware, body=b'{"a": 1}', headers=headers)
        assert (hit.cache, hit.body) == ("hit", first.body)
    assert (heads.calls, keys.calls, app.calls) == (0, 0, 1)
    other = await call(middleware, body=b'{"a": 2}', headers=headers)
    assert (other.cache, heads.calls, keys.calls, app.calls) == ("miss", 0, 1, 2)


async def test_a_hand_built_scope_without_optional_parts_hits_as_a_full_one() -> None:
    app = RecordingApp()
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache())
    site = [JSON, (b"host", b"acme.example")]  # so that the server is not in the key
    await call(middleware, body=b"{}", headers=site)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    for part in ("root_path", "query_string", "scheme", "server"):
        scope = make_scope(headers=site)
        del scope[part]
        await middleware(scope, receive, send)
        assert (b"x-cache", b"hit") in sent[-2]["headers"], part
    assert app.calls == 1


async def test_hits_on_large_answers_that_compress_small_hold_memory_within_bounds() -> None:
    """Answers of 256 KiB that zlib stores in a few hundred bytes, each asked twice: the
    memory of replays counts what they hold, not what they are stored in."""
    import gc
    import tracemalloc

    from asyncache.engine._memo import HELD_BYTES

    from . import Answer

    size, requests = 256 * 1024, 48
    app = RecordingApp(Answer(chunks=[b"a" * size]))
    cache = DecisionCache()
    middleware = DecisionCacheMiddleware(app, cache=cache)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(requests):
            for _ in range(2):
                assert len((await call(middleware, body=b'{"n": %d}' % n)).body) == size
        app.bodies.clear(), app.received.clear(), app.scopes.clear()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert cache.stats()["hits"] == requests
    # Before: every replay kept, 48 x 256 KiB = 12 MiB held.
    assert held < 4 * 1024 * 1024, held
    recent = cache.engine.recent
    # Each record's count covers what it holds: the stored bytes and the replay's body.
    for record in recent.records.values():
        replay = record.result
        assert record.held >= len(record.value) + (len(replay.body) if replay else 0)
    assert recent.held <= HELD_BYTES


async def test_a_hit_is_answered_by_the_hit_path_alone_on_every_kind_of_route() -> None:
    # The hit path (DecisionCacheMiddleware.__call__) hands everything it cannot settle
    # to the general one; a hit on an exact path, a template or routes=None must not.
    for routes, path in ((["/predict"], "/predict"), (["/m/{name}"], "/m/a"), (None, "/any")):
        app = RecordingApp()
        middleware = DecisionCacheMiddleware(app, cache=DecisionCache(), routes=routes)
        first = await call(middleware, path=path, body=b'{"a": 1}', headers=[JSON])
        general = middleware._handle, middleware._received, middleware._run
        taken: list[str] = []

        def counted(step: Any, taken: list[str] = taken) -> Any:
            async def step_taken(*args: Any) -> None:
                taken.append(step.__name__)
                await step(*args)

            return step_taken

        middleware._handle, middleware._received, middleware._run = map(counted, general)  # type: ignore[method-assign]
        hit = await call(middleware, path=path, body=b'{"a": 1}', headers=[JSON])
        assert (hit.cache, hit.body, taken, app.calls) == ("hit", first.body, [], 1), routes
        other = await call(middleware, path=path, body=b'{"a": 2}', headers=[JSON])
        assert (other.cache, taken, app.calls) == ("miss", ["_received", "_run"], 2), routes
