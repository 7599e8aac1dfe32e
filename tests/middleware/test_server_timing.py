"""``Server-Timing``: each response says what the cache did and how long the server took.

W3C Server Timing: ``cache;desc=<outcome>;dur=<milliseconds>``. The duration is
measured from the request reaching the middleware to its response starting, so
a miss's includes the app's time, and a hit's is the cache's alone.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx

from asyncache import DecisionCache
from asyncache.middleware import DecisionCacheMiddleware
from asyncache.middleware.status import TIMINGS_MADE, hit_timings, made_timing

from . import Answer, RecordingApp, call, uvicorn_serving

_TIMING = re.compile(r"cache;desc=(?P<desc>[a-z]+);dur=(?P<dur>\d+\.\d{3})")


class SlowApp(RecordingApp):
    """Takes at least ``delay`` seconds before it answers."""

    def __init__(self, delay: float, answer: Answer | None = None) -> None:
        super().__init__(answer)
        self.delay = delay

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(self.delay)
        await super().__call__(scope, receive, send)


def timing(values: list[str]) -> tuple[str, float]:
    assert len(values) == 1, values
    match = _TIMING.fullmatch(values[0])
    assert match is not None, values[0]
    return match["desc"], float(match["dur"])


async def test_a_miss_and_its_hit_each_report_their_outcome_and_server_time() -> None:
    app = SlowApp(0.05)
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache())
    miss = await call(middleware, body=b'{"x": 1}')
    hit = await call(middleware, body=b'{"x": 1}')
    desc, miss_ms = timing(miss.header_values("server-timing"))
    # The miss waited for the app: its time is at least the app's sleep.
    assert (desc, miss_ms >= 50.0) == ("miss", True)
    desc, hit_ms = timing(hit.header_values("server-timing"))
    # The hit never called the app: a stored answer carries no timing of the miss's.
    assert (desc, hit_ms < miss_ms, app.calls) == ("hit", True, 1)


async def test_shared_bypass_and_disabled_responses_are_timed_too() -> None:
    app = SlowApp(0.02)
    cache = DecisionCache()
    middleware = DecisionCacheMiddleware(app, cache=cache)
    leader, follower = await asyncio.gather(
        call(middleware, body=b'{"x": 2}'), call(middleware, body=b'{"x": 2}')
    )
    assert sorted(timing(r.header_values("server-timing"))[0] for r in (leader, follower)) == [
        "miss",
        "shared",
    ]
    bypass = await call(
        middleware,
        body=b'{"x": 2}',
        headers=[(b"content-type", b"application/json"), (b"cache-control", b"no-store")],
    )
    assert timing(bypass.header_values("server-timing"))[0] == "bypass"
    cache.enabled = False
    disabled = await call(middleware, body=b'{"x": 2}')
    assert timing(disabled.header_values("server-timing"))[0] == "disabled"


async def test_without_a_status_header_no_response_tells_a_hit_from_a_run() -> None:
    """``status_header=None`` is the one switch (docs/security.md): no ``X-Cache``, no
    ``Server-Timing`` (its ``dur`` tells a hit's microseconds from a run's), and no ``Age``
    on hits (it says when someone else asked), even for a response that keeps its age."""
    aged = Answer(
        headers=[(b"content-type", b"application/json"), (b"cache-control", b"max-age=600")]
    )
    app = SlowApp(0.01, aged)
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache(), status_header=None)
    miss = await call(middleware, body=b"{}")
    await asyncio.sleep(1.05)  # a hit's Age would say 1 by now
    hit = await call(middleware, body=b"{}")
    assert app.calls == 1 and hit.body == miss.body
    assert [name for name, _ in hit.headers] == [name for name, _ in miss.headers]
    for result in (miss, hit):
        for name in ("server-timing", "x-cache", "age", "cache-status"):
            assert result.header(name) is None, (name, result.headers)
    # Hits answered past the fast path (an on_hit hook) say no more.
    hooked = DecisionCacheMiddleware(
        app, cache=DecisionCache(), status_header=None, on_hit=lambda scope: True
    )
    await call(hooked, body=b"{}")
    await asyncio.sleep(1.05)
    assert (await call(hooked, body=b"{}")).header("age") is None


async def test_timing_asked_for_by_name_without_a_status_header_names_no_outcome() -> None:
    middleware = DecisionCacheMiddleware(
        RecordingApp(), cache=DecisionCache(), status_header=None, server_timing=True
    )
    miss = await call(middleware, body=b"{}")
    hit = await call(middleware, body=b"{}")
    for result in (miss, hit):
        assert re.fullmatch(r"cache;dur=\d+\.\d{3}", result.header("server-timing") or "")


async def test_hits_say_their_age_where_outcomes_are_named() -> None:
    aged = Answer(
        headers=[(b"content-type", b"application/json"), (b"cache-control", b"max-age=600")]
    )
    middleware = DecisionCacheMiddleware(RecordingApp(aged), cache=DecisionCache())
    await call(middleware, body=b"{}")
    hit = await call(middleware, body=b"{}")
    assert (hit.header("age") or "").isdigit() and hit.header("x-cache") == "hit"
    assert timing(hit.header_values("server-timing"))[0] == "hit"


async def test_server_timing_false_adds_none_and_routes_outside_the_cache_get_none() -> None:
    off = DecisionCacheMiddleware(RecordingApp(), cache=DecisionCache(), server_timing=False)
    for _ in range(2):
        assert (await call(off, body=b"{}")).header("server-timing") is None
    on = DecisionCacheMiddleware(RecordingApp(), cache=DecisionCache(), paths=["/predict"])
    assert (await call(on, path="/other", body=b"{}")).header("server-timing") is None


async def test_a_client_over_http_reads_the_timing_of_a_hit() -> None:
    middleware = DecisionCacheMiddleware(RecordingApp(), cache=DecisionCache())
    async with uvicorn_serving(middleware) as base, httpx.AsyncClient(base_url=base) as client:
        await client.post("/predict", json={"x": 3})
        response = await client.post("/predict", json={"x": 3})
    assert response.headers["x-cache"] == "hit"
    assert timing(response.headers.get_list("server-timing"))[0] == "hit"


def test_a_hits_timing_is_the_same_header_from_its_table_or_made_anew() -> None:
    # The hit path takes a duration's header from the table when it is there and makes
    # it (and keeps it) when not: both must read as the formatted duration.
    for outcome, prefix in ((b"hit", b"cache;desc=hit;dur="), (None, b"cache;dur=")):
        table = hit_timings(outcome)
        for us, shown in ((0, b"0.000"), (17, b"0.017"), (999, b"0.999"), (1500, b"1.500")):
            made = made_timing(outcome, us)
            assert made == (b"server-timing", prefix + shown)
            assert (table[us] if us < TIMINGS_MADE else made) == made
