"""What the key holds by default (host, scheme, exact JSON, the raw query); what is never stored."""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest

from asyncache import DecisionCache
from asyncache.middleware import DecisionCacheMiddleware
from asyncache.middleware.request import header_codes, read_head, request_inputs

from . import Answer, RecordingApp, call, make_scope


async def ask(middleware: Any, **changes: Any) -> str:
    """One request with the given scope changes; the X-Cache it got."""
    scope = make_scope(headers=changes.pop("headers", [(b"content-type", b"application/json")]))
    scope.update(changes.pop("scope", {}))
    body = changes.pop("body", b"{}")
    done = False
    got: dict[str, Any] = {}

    async def receive() -> dict[str, Any]:
        nonlocal done
        if not done:
            done = True
            return {"type": "http.request", "body": body}
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            got.update(dict(message["headers"]))

    await middleware(scope, receive, send)
    return str(got[b"x-cache"].decode())


JSON = (b"content-type", b"application/json")


async def test_host_and_scheme_are_keyed_by_default() -> None:
    app = RecordingApp()
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache())
    acme = [JSON, (b"host", b"acme.example")]
    globex = [JSON, (b"host", b"globex.example")]
    assert await ask(middleware, headers=acme) == "miss"
    assert await ask(middleware, headers=globex) == "miss"  # another site, another answer
    assert await ask(middleware, headers=[JSON, (b"host", b"ACME.example")]) == "hit"
    assert await ask(middleware, headers=acme, scope={"scheme": "https"}) == "miss"
    assert await ask(middleware, headers=acme) == "hit"
    assert app.calls == 3


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (b'{"to": "mallory", "to": "bob"}', b'{"to": "bob"}'),
        (b'{"a": {"to": "mallory", "to": "bob"}}', b'{"a": {"to": "bob"}}'),
        (b'{"x": 1e-400}', b'{"x": 0.0}'),
        (b'{"x": 4e-324}', b'{"x": 5e-324}'),
        (b'{"id": 123456789012345678901}', b'{"id": 123456789012345678902}'),
    ],
)
async def test_bodies_that_parse_alike_but_differ_are_not_shared(one: bytes, other: bytes) -> None:
    app = RecordingApp()
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache())
    assert await ask(middleware, body=one) == "miss"
    assert await ask(middleware, body=other) == "miss"
    assert await ask(middleware, body=one) == "hit"
    assert app.calls == 2


async def test_equal_json_still_shares_a_key() -> None:
    app = RecordingApp()
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache())
    assert await ask(middleware, body=b'{"a": 1, "b": [0.5, 2]}') == "miss"
    assert await ask(middleware, body=b'{"b":[0.5,2],"a":1}') == "hit"


@pytest.mark.parametrize(("one", "other"), [(b"flag", b"flag="), (b"a=1&a=2", b"a=2&a=1")])
async def test_query_strings_keep_what_an_app_can_tell_apart(one: bytes, other: bytes) -> None:
    app = RecordingApp()
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache())
    assert await ask(middleware, scope={"query_string": one}) == "miss"
    assert await ask(middleware, scope={"query_string": other}) == "miss"


@pytest.mark.parametrize(
    "header",
    [
        (b"cache-control", b"max-age=0"),
        (b"cache-control", b"public, s-maxage=0"),
        (b"pragma", b"no-cache"),
        (b"expires", b"0"),
        (b"expires", b"Thu, 01 Jan 1970 00:00:00 GMT"),
    ],
)
async def test_no_cache_signals_are_never_stored(header: tuple[bytes, bytes]) -> None:
    app = RecordingApp(Answer(headers=[JSON, header]))
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache())
    results = [await call(middleware, body=b"{}") for _ in range(2)]
    assert [r.cache for r in results] == ["miss", "miss"]
    assert await middleware.cache.store.count() == 0


async def test_conditional_requests_bypass() -> None:
    app = RecordingApp()
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache())
    await call(middleware, body=b"{}")
    for header in ((b"if-none-match", b'"v1"'), (b"range", b"bytes=0-1")):
        assert await ask(middleware, headers=[JSON, header]) == "bypass"
    assert app.calls == 3


async def test_a_response_a_server_could_not_replay_is_never_stored() -> None:
    # A header value with a line break would split the replayed response in two.
    app = RecordingApp(Answer(headers=[JSON, (b"x-note", b"a\r\nset-cookie: sid=1")]))
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache())
    await call(middleware, body=b"{}")
    assert await middleware.cache.store.count() == 0
    assert middleware.stats.not_admitted_reasons == {"invalid_header": 1}


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ([700, [], "x", -1], "invalid_status"),
        ([101, [], "x", -1], "invalid_status"),
        ([200, [["x-a", "b\r\nc"]], "x", -1], "invalid_header"),
        ([200, [["content-length", "99"]], "x", -1], "invalid_stored_length"),
    ],
)
async def test_a_stored_entry_that_is_not_a_valid_response_is_a_bypass_and_deleted(
    value: list[Any], reason: str
) -> None:
    cache = DecisionCache()
    app = RecordingApp()
    middleware = DecisionCacheMiddleware(app, cache=cache)
    await call(middleware, body=b"{}")
    (key,) = list(cache.store._data)  # type: ignore[attr-defined]
    cache.store._data.clear()  # type: ignore[attr-defined]
    await cache.store_result(key, value)
    result = await call(middleware, body=b"{}")
    assert (result.status, result.cache) == (200, "bypass")
    assert middleware.stats.bypass_reasons == {reason: 1}
    assert await cache.store.count() == 0  # deleted
    assert cache.stats()["corrupt"] == 1


async def test_a_long_content_type_keys_on_its_digest_without_copying_it_ten_times() -> None:
    # A megabyte Content-Type peaked at 10-19 times its size while the key was built.
    long_json = b"application/json; profile=" + b"p" * 1_000_000
    other = long_json[:-1] + b"q"
    middleware = DecisionCacheMiddleware(RecordingApp(), cache=DecisionCache())
    assert await ask(middleware, headers=[(b"content-type", long_json)]) == "miss"
    assert await ask(middleware, headers=[(b"content-type", long_json)]) == "hit"
    assert await ask(middleware, headers=[(b"content-type", other)]) == "miss"
    # Still read as JSON: whitespace does not split the key.
    assert await ask(middleware, headers=[(b"content-type", long_json)], body=b"{ }") == "hit"

    builder = DecisionCache().key_builder("r", None)
    head = read_head([(b"content-type", long_json)], header_codes([], []), 0)
    scope = make_scope()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        builder.key(request_inputs(scope, head, b"{}"))
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert peak < len(long_json)
