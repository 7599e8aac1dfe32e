"""The middleware takes the engine's one path: its hits, its flights, its modes.

- A hit over a store that cannot answer from memory (SQLite here) is answered
  by the engine's lookup: no ``Broadcast``, no task.
- A run in progress is the engine's flight for its key (one coalescing table):
  identical requests find its ``Broadcast`` there, and the engine counts them.
- ``mode="replay"`` never runs the app: a miss, a stored entry that is not a
  valid response, and every bypass of a cached route are a 500 with the
  reason, and the store is left as it was.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from asyncache import DecisionCache, MemoryStore
from asyncache.engine import _stream
from asyncache.middleware import DecisionCacheMiddleware
from asyncache.stores.sqlite import SQLiteStore

from ..support import until
from . import Answer, RecordingApp, call


class Counted:
    """Counts the ``Broadcast``s made and the tasks started while it is installed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.broadcasts = 0
        self.tasks = 0
        made = _stream.Broadcast.__init__

        def counting(broadcast: Any, *args: Any, **kwargs: Any) -> None:
            self.broadcasts += 1
            made(broadcast, *args, **kwargs)

        monkeypatch.setattr(_stream.Broadcast, "__init__", counting)
        loop = asyncio.get_running_loop()
        factory = loop.get_task_factory()

        def counting_tasks(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
            self.tasks += 1
            if factory is not None:
                return factory(loop, coro, **kwargs)
            return asyncio.Task(coro, loop=loop, **kwargs)

        loop.set_task_factory(counting_tasks)
        self._restore = lambda: loop.set_task_factory(factory)

    def close(self) -> None:
        self._restore()


async def test_a_hit_over_sqlite_makes_no_broadcast_and_no_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteStore(tmp_path / "decisions.sqlite")
    app = RecordingApp()
    middleware = DecisionCacheMiddleware(app, cache=DecisionCache(store))
    first = await call(middleware, body=b'{"text": "a"}')
    assert (first.status, first.cache) == (200, "miss")
    await until(lambda: middleware.cache.stats()["stores"] == 1, "the answer is stored")
    counted = Counted(monkeypatch)
    try:
        hit = await call(middleware, body=b'{"text": "a"}')
    finally:
        counted.close()
    assert (hit.status, hit.cache, hit.body) == (200, "hit", first.body)
    assert (counted.broadcasts, counted.tasks) == (0, 0)
    assert app.calls == 1
    await store.aclose()


async def test_a_miss_still_runs_through_a_broadcast(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The counter above sees what it counts: a miss makes one Broadcast and runs tasks.
    store = SQLiteStore(tmp_path / "decisions.sqlite")
    middleware = DecisionCacheMiddleware(RecordingApp(), cache=DecisionCache(store))
    counted = Counted(monkeypatch)
    try:
        miss = await call(middleware, body=b'{"text": "a"}')
    finally:
        counted.close()
    assert miss.cache == "miss"
    assert counted.broadcasts == 1 and counted.tasks >= 1
    await store.aclose()


async def test_a_run_in_progress_is_the_engines_flight() -> None:
    app = RecordingApp()
    app.gate = asyncio.Event()
    cache = DecisionCache(MemoryStore())
    middleware = DecisionCacheMiddleware(app, cache=cache)
    leader = asyncio.ensure_future(call(middleware, body=b'{"text": "a"}'))
    await until(lambda: app.entered == 1, "the app runs for the leader")
    flights = [cache.engine.flights.get(key) for key in cache.engine.flights.keys()]
    assert len(flights) == 1 and isinstance(flights[0].stream, _stream.Broadcast)
    followers = [asyncio.ensure_future(call(middleware, body=b'{"text": "a"}')) for _ in range(3)]
    await until(lambda: flights[0].followers == 3, "the followers join the flight")
    app.gate.set()
    results = [await leader, *[await follower for follower in followers]]
    assert [r.cache for r in results] == ["miss", "shared", "shared", "shared"]
    assert len({r.body for r in results}) == 1 and app.calls == 1
    stats = cache.stats()
    assert (stats["misses"], stats["coalesced"]) == (4, 3)
    assert len(cache.engine.flights) == 0


class TestReplayNeverRunsTheApp:
    async def recorded(self, tmp_path: Path, answer: Answer | None = None) -> tuple[Path, bytes]:
        path = tmp_path / "recording.sqlite"
        store = SQLiteStore(path)
        recording = DecisionCacheMiddleware(
            RecordingApp(answer), cache=DecisionCache(store, mode="record")
        )
        first = await call(recording, body=b'{"text": "a"}')
        assert first.status == (answer or Answer()).status
        await store.aclose()
        return path, first.body

    async def replaying(self, path: Path) -> tuple[DecisionCacheMiddleware, RecordingApp]:
        app = RecordingApp()
        cache = DecisionCache(SQLiteStore(path), mode="replay")
        return DecisionCacheMiddleware(app, cache=cache, credentials=["x-api-key"]), app

    async def test_a_recorded_answer_is_replayed_and_a_miss_is_a_500(self, tmp_path: Path) -> None:
        path, body = await self.recorded(tmp_path)
        middleware, app = await self.replaying(path)
        hit = await call(middleware, body=b'{"text": "a"}')
        assert (hit.status, hit.cache, hit.body) == (200, "hit", body)
        missed = await call(middleware, body=b'{"text": "b"}')
        assert (missed.status, missed.cache) == (500, "replay_miss")
        assert b"no recorded decision" in missed.body
        assert app.calls == 0
        await middleware.cache.aclose()
        await middleware.cache.store.aclose()

    @pytest.mark.parametrize(
        ("headers", "body"),
        [
            ([(b"cache-control", b"no-store")], b'{"text": "a"}'),
            ([(b"x-api-key", b"secret")], b'{"text": "a"}'),
            ([], b'{"text": "' + b"x" * (2 * 1024 * 1024) + b'"}'),
        ],
        ids=["no-store", "credentials", "body-over-the-limit"],
    )
    async def test_a_bypass_is_a_500_not_a_run_of_the_app(
        self, tmp_path: Path, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> None:
        path, _ = await self.recorded(tmp_path)
        middleware, app = await self.replaying(path)
        refused = await call(
            middleware, body=body, headers=[(b"content-type", b"application/json"), *headers]
        )
        assert (refused.status, refused.cache) == (500, "replay_miss")
        assert b"would bypass the cache" in refused.body
        assert app.calls == 0
        await middleware.cache.aclose()
        await middleware.cache.store.aclose()

    async def test_an_entry_that_is_not_a_response_is_a_500_and_stays(self, tmp_path: Path) -> None:
        path = tmp_path / "recording.sqlite"
        store = SQLiteStore(path)
        recorder = DecisionCache(store, mode="record", namespace=None)
        middleware, _ = await self.replaying(path)
        # What the middleware would key this request by, with a value that decodes but
        # is not a response (status 101): written through the engine, as a recording is.
        key = await self._key_of(middleware, b'{"text": "a"}')
        await recorder.store_result(key, [101, [], "", None])
        await recorder.aclose()
        await store.aclose()
        before = path.read_bytes()
        refused = await call(middleware, body=b'{"text": "a"}')
        assert (refused.status, refused.cache) == (500, "replay_miss")
        await middleware.cache.aclose()
        await middleware.cache.store.aclose()
        assert await SQLiteStore(path).count() == 1
        assert path.read_bytes() == before

    async def _key_of(self, middleware: DecisionCacheMiddleware, body: bytes) -> bytes:
        # A live twin of the middleware over a memory store learns the key of the request.
        twin_cache = DecisionCache(MemoryStore())
        twin = DecisionCacheMiddleware(RecordingApp(), cache=twin_cache)
        await call(twin, body=body)
        keys = [key async for batch in twin_cache.store.entries() for key, _ in batch]  # type: ignore[attr-defined]
        assert len(keys) == 1
        return keys[0]  # type: ignore[no-any-return]
