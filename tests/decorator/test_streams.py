"""Streamed results: ``@cached_prediction`` on async generators (issue 25).

One decision made of chunks: a miss streams live and is stored whole when it
ends normally, followers read it live, a hit replays the chunks, a stream
that fails or is abandoned is never stored, memory in flight is bounded.
Each behaviour runs on a MemoryStore, an SQLiteStore (a real file) and a
RedisStore (a real redis-server of the session); trio with the memory store.

The generators are driven by gates (events the test opens), so what a caller
has received is checked at known points of the stream, never by timing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import numpy as np
import pydantic
import pytest
import trio

from asyncache import DecisionCache, ReplayMiss, cached_prediction, open_store

from ..support import GENEROUS_REDIS_TIMEOUTS

WORDS = ["the", " cat", " sat", " down"]
# A hang guard for waits, never a timing assertion.
WAIT_TIMEOUT = 60.0


async def until(condition: Callable[[], bool]) -> None:
    """Let the loop (and the store's I/O) run until ``condition()`` holds."""
    deadline = time.monotonic() + WAIT_TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.001)


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store of each kind, by URL."""
    if request.param == "memory":
        yield "memory://"
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'streams.db'}"
    else:
        redis_url: str = request.getfixturevalue("redis_url")
        prefix: str = request.getfixturevalue("redis_prefix")
        yield f"{redis_url}?prefix={prefix}&{GENEROUS_REDIS_TIMEOUTS}"


def _cache(url: str, **options: Any) -> DecisionCache:
    return DecisionCache(open_store(url), store_timeout=30.0, **options)


class Gated:
    """A token generator that yields one word each time the test opens its gate."""

    def __init__(self, words: list[str] = WORDS, fail_after: int | None = None) -> None:
        self.words = words
        self.fail_after = fail_after
        self.runs = 0
        self.produced = 0
        self.closed = 0
        self.gate = asyncio.Semaphore(0)

    def open(self, n: int = 1) -> None:
        for _ in range(n):
            self.gate.release()

    async def __call__(self, prompt: str) -> AsyncIterator[str]:
        self.runs += 1
        try:
            for index, word in enumerate(self.words):
                if self.fail_after is not None and index == self.fail_after:
                    raise ValueError(f"the model failed on {prompt}")
                await self.gate.acquire()
                self.produced += 1
                yield word
        finally:
            self.closed += 1


def _tokens(cache: DecisionCache, model: Gated, **options: Any) -> Any:
    @cached_prediction(cache, namespace="tokens", **options)
    async def tokens(prompt: str) -> AsyncIterator[str]:
        async with aclosing(model(prompt)) as words:
            async for word in words:
                yield word

    return tokens


class Reader:
    """Iterates a stream in a task of its own, one chunk at a time on request."""

    def __init__(self, stream: AsyncIterator[Any]) -> None:
        self.got: list[Any] = []
        self.error: BaseException | None = None
        self.ended = False
        self._stream = stream
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        try:
            async for chunk in self._stream:
                self.got.append(chunk)
        except Exception as exc:
            self.error = exc
        finally:
            self.ended = True


async def _all(stream: AsyncIterator[Any]) -> list[Any]:
    return [chunk async for chunk in stream]


async def test_a_miss_streams_live_then_a_hit_replays_the_same_chunks(store_url: str) -> None:
    model = Gated()
    async with _cache(store_url) as cache:
        tokens = _tokens(cache, model)
        reader = Reader(tokens("hi"))
        for n in range(1, len(WORDS) + 1):
            model.open()
            await until(lambda n=n: len(reader.got) == n)  # each chunk as it is produced
            assert not reader.ended or n == len(WORDS)
        await reader.task
        assert reader.got == WORDS and reader.error is None
        await until(lambda: cache.stats()["stores"] == 1)
        assert await _all(tokens("hi")) == WORDS  # a hit: the gate stays shut
        assert model.runs == 1
        stats = cache.stats()
        assert (stats["hits"], stats["misses"], stats["streams"]) == (1, 1, 2)
        assert stats["stream_chunks"] == 2 * len(WORDS)
        assert await cache.store.count() == 1  # one decision: one entry


async def test_a_follower_gets_the_chunks_so_far_at_once_then_each_live(store_url: str) -> None:
    model = Gated()
    async with _cache(store_url) as cache:
        tokens = _tokens(cache, model)
        leader = Reader(tokens("hi"))
        model.open(2)
        await until(lambda: len(leader.got) == 2)
        follower = Reader(tokens("hi"))
        await until(lambda: len(follower.got) == 2)  # the generator is held at its gate
        assert model.produced == 2
        model.open()
        await until(lambda: len(follower.got) == 3 and len(leader.got) == 3)
        assert not leader.ended  # live: the follower's third chunk came before the end
        model.open()
        await asyncio.gather(leader.task, follower.task)
        assert leader.got == follower.got == WORDS
        assert model.runs == 1
        assert cache.stats()["coalesced"] == 1


async def test_a_stream_that_raises_is_not_stored_and_every_sharer_gets_the_error(
    store_url: str,
) -> None:
    model = Gated(fail_after=2)
    async with _cache(store_url) as cache:
        tokens = _tokens(cache, model)
        leader = Reader(tokens("hi"))
        model.open()
        await until(lambda: len(leader.got) == 1)
        follower = Reader(tokens("hi"))
        await until(lambda: len(follower.got) == 1)
        model.open()
        await asyncio.gather(leader.task, follower.task)
        for reader in (leader, follower):
            assert reader.got == WORDS[:2]
            assert isinstance(reader.error, ValueError)
        assert cache.stats()["stores"] == 0
        assert await cache.store.count() == 0
        model.fail_after = None
        model.open(len(WORDS))
        assert await _all(tokens("hi")) == WORDS  # computed again
        assert model.runs == 2


async def test_a_leader_that_stops_reading_does_not_stop_the_stream_for_followers(
    store_url: str,
) -> None:
    model = Gated()
    async with _cache(store_url) as cache:
        tokens = _tokens(cache, model)
        leader = tokens("hi")
        model.open()
        assert await anext(leader) == WORDS[0]
        follower = Reader(tokens("hi"))
        await until(lambda: len(follower.got) == 1)
        await leader.aclose()  # the leader's caller stops after one chunk
        model.open(3)
        await follower.task
        assert follower.got == WORDS
        assert model.runs == 1
        await until(lambda: cache.stats()["stores"] == 1)
        assert await _all(tokens("hi")) == WORDS


async def test_a_cancelled_leader_does_not_stop_the_stream_for_followers(store_url: str) -> None:
    model = Gated()
    async with _cache(store_url) as cache:
        tokens = _tokens(cache, model)
        leader = Reader(tokens("hi"))
        model.open()
        await until(lambda: len(leader.got) == 1)
        follower = Reader(tokens("hi"))
        await until(lambda: len(follower.got) == 1)
        leader.task.cancel()
        await asyncio.gather(leader.task, return_exceptions=True)
        model.open(3)
        await follower.task
        assert follower.got == WORDS and follower.error is None
        await until(lambda: cache.stats()["stores"] == 1)


async def test_when_nobody_reads_the_generator_is_closed_and_nothing_stored(
    store_url: str,
) -> None:
    model = Gated()
    async with _cache(store_url) as cache:
        tokens = _tokens(cache, model)
        first, second = tokens("hi"), tokens("hi")
        model.open()
        assert await anext(first) == WORDS[0]
        assert await anext(second) == WORDS[0]
        await first.aclose()
        assert model.closed == 0  # one reader left
        await second.aclose()
        await until(lambda: model.closed == 1)  # closed while waiting on its gate
        assert model.produced == 1
        assert cache.stats()["stores"] == 0
        assert await cache.store.count() == 0
        model.open(len(WORDS))
        assert await _all(tokens("hi")) == WORDS  # a fresh flight, not the abandoned one
        assert model.runs == 2


async def test_a_stream_past_max_entry_bytes_is_not_stored_and_paced_by_the_slowest_reader(
    store_url: str,
) -> None:
    words = [f"word{n:03d} " * 8 for n in range(40)]
    model = Gated(words)
    async with _cache(store_url, max_entry_bytes=1000) as cache:
        tokens = _tokens(cache, model)
        fast = Reader(tokens("hi"))
        model.open()
        await until(lambda: len(fast.got) == 1)
        slow = tokens("hi")  # joins while the stream is still kept, then reads slowly
        assert await anext(slow) == words[0]
        model.open(len(words))  # the generator may run as far as its readers let it
        await until(lambda: model.produced >= 5 and len(fast.got) >= model.produced - 1)
        for _ in range(20):
            await asyncio.sleep(0)
        # Past the limit nothing is kept for later: the slowest reader paces the generator.
        assert model.produced <= 1 + 1 + 1 + 1000 // len(words[0])
        rest = await _all(slow)
        await fast.task
        assert fast.got == [words[0], *rest] == words
        assert cache.stats()["too_large"] == 1
        assert cache.stats()["stores"] == 0
        assert await cache.store.count() == 0


async def test_a_stream_past_max_chunks_is_not_stored(store_url: str) -> None:
    model = Gated()
    async with _cache(store_url) as cache:
        tokens = _tokens(cache, model, max_chunks=3)
        model.open(len(WORDS))
        assert await _all(tokens("hi")) == WORDS
        assert cache.stats()["too_large"] == 1
        assert await cache.store.count() == 0
        exactly = _tokens(cache, model, max_chunks=len(WORDS))  # at the limit: stored
        model.open(len(WORDS))
        assert await _all(exactly("hi")) == WORDS
        assert await cache.store.count() == 1


@dataclasses.dataclass
class Token:
    text: str
    logprob: float


class Delta(pydantic.BaseModel):
    content: str
    index: int


async def test_typed_chunks_round_trip_like_return_types(store_url: str) -> None:
    async with _cache(store_url) as cache:

        @cached_prediction(cache)
        async def dataclasses_(n: int) -> AsyncIterator[Token]:
            for i in range(n):
                yield Token(f"t{i}", -0.5 * i)

        @cached_prediction(cache)
        async def models(n: int) -> AsyncGenerator[Delta, None]:
            for i in range(n):
                yield Delta(content=f"d{i}", index=i)

        @cached_prediction(cache)
        async def arrays(n: int) -> AsyncIterator[np.ndarray]:
            for i in range(n):
                yield np.arange(i + 1, dtype=np.float32)

        @cached_prediction(cache)
        async def mixed(n: int) -> AsyncIterator[bytes | None]:
            for i in range(n):
                yield bytes([i]) if i else None

        @cached_prediction(cache)
        async def records(n: int) -> AsyncIterator[dict[str, tuple[int, str]]]:
            for i in range(n):
                yield {"k": (i, "x")}

        for stored, fn in enumerate((dataclasses_, models, arrays, mixed, records), 1):
            miss = await _all(fn(3))
            await until(lambda stored=stored: cache.stats()["stores"] == stored)
            hit = await _all(fn(3))
            assert [type(chunk) for chunk in hit] == [type(chunk) for chunk in miss], fn
            for one, other in zip(miss, hit, strict=True):
                if isinstance(one, np.ndarray):
                    assert one.dtype == other.dtype and np.array_equal(one, other)
                else:
                    assert one == other
        assert cache.stats()["hits"] == 5


async def test_an_async_function_returning_an_async_iterator_streams_when_awaited() -> None:
    runs = 0
    async with DecisionCache() as cache:

        @cached_prediction(cache)
        async def complete(prompt: str) -> AsyncIterator[str]:
            nonlocal runs
            runs += 1

            async def words() -> AsyncIterator[str]:
                for word in prompt.split():
                    yield word

            return words()

        assert await _all(await complete("a b c")) == ["a", "b", "c"]
        assert await _all(await complete("a b c")) == ["a", "b", "c"]
        assert runs == 1


def test_a_generator_with_offload_is_refused_with_the_reason() -> None:
    cache = DecisionCache()
    with pytest.raises(TypeError, match="streams its result"):

        @cached_prediction(cache, offload="thread")
        async def tokens(prompt: str) -> AsyncIterator[str]:
            yield prompt


async def test_replay_of_an_unrecorded_stream_raises_before_the_first_chunk(
    store_url: str,
) -> None:
    model = Gated()
    model.open(len(WORDS))
    store = open_store(store_url)
    recording = DecisionCache(store, mode="record", store_timeout=30.0)
    assert await _all(_tokens(recording, model)("recorded")) == WORDS
    await recording.engine.aclose()
    async with DecisionCache(store, mode="replay", store_timeout=30.0) as replaying:
        tokens = _tokens(replaying, model)
        assert await _all(tokens("recorded")) == WORDS
        got: list[str] = []
        with pytest.raises(ReplayMiss):
            async for chunk in tokens("never recorded"):
                got.append(chunk)
        assert got == []
    assert model.runs == 1


async def test_shadow_mode_runs_every_stream_and_compares_the_whole_of_it(
    store_url: str,
) -> None:
    model = Gated()
    model.open(3 * len(WORDS))
    store = open_store(store_url)
    live = DecisionCache(store, store_timeout=30.0)
    assert await _all(_tokens(live, model)("hi")) == WORDS
    await until(lambda: live.stats()["stores"] == 1)
    async with DecisionCache(store, mode="shadow", store_timeout=30.0) as shadow:
        tokens = _tokens(shadow, model)
        assert await _all(tokens("hi")) == WORDS
        model.words = [*WORDS[:-1], " up"]
        assert await _all(tokens("hi")) == model.words  # the fresh stream, never the stored
        stats = shadow.stats()
    assert model.runs == 3
    assert (stats["shadow_agreed"], stats["shadow_mismatched"]) == (1, 1)


async def test_audits_compare_the_whole_stream(store_url: str) -> None:
    model = Gated()
    model.open(10 * len(WORDS))
    mismatches: list[Any] = []
    async with _cache(
        store_url, audit_rate=1.0, on_mismatch=lambda *seen: mismatches.append(seen)
    ) as cache:
        tokens = _tokens(cache, model)
        assert await _all(tokens("hi")) == WORDS
        await until(lambda: cache.stats()["stores"] == 1)
        assert await _all(tokens("hi")) == WORDS  # audited: agrees
        await until(lambda: cache.stats()["audits"] == 1)
        model.words = [*WORDS[:-1], " up"]
        assert await _all(tokens("hi")) == WORDS  # served from the store, audited: differs
        await until(lambda: cache.stats()["audits"] == 2)
        stats = cache.stats()
    assert (stats["audit_agreed"], stats["audit_mismatched"]) == (1, 1)
    assert mismatches[0][1] == WORDS and mismatches[0][2] == model.words


@pytest.fixture(params=["sqlite", "redis"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store two caches share, as two processes of a fleet would."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fleet.db'}?busy_timeout=30"
    redis_url: str = request.getfixturevalue("redis_url")
    prefix: str = request.getfixturevalue("redis_prefix")
    return f"{redis_url}?prefix={prefix}&{GENEROUS_REDIS_TIMEOUTS}"


async def test_another_process_waits_on_the_lease_then_replays_the_stream(
    shared_url: str,
) -> None:
    first_model, second_model = Gated(), Gated()
    async with (
        _cache(shared_url, leases=True, lease_ttl=30) as first,
        _cache(shared_url, leases=True, lease_ttl=30) as second,
    ):
        owner = Reader(_tokens(first, first_model)("hi"))
        await until(lambda: first_model.runs == 1)
        waiter = Reader(_tokens(second, second_model)("hi"))
        await until(lambda: second.stats()["lease_waits"] == 1)
        assert waiter.got == []
        first_model.open(len(WORDS))
        await asyncio.gather(owner.task, waiter.task)
        assert owner.got == waiter.got == WORDS
        assert (first_model.runs, second_model.runs) == (1, 0)


def test_a_stream_is_shared_live_and_replayed_under_trio() -> None:
    runs = 0

    async def main() -> None:
        nonlocal runs
        cache = DecisionCache()
        gate = trio.Event()
        got: dict[str, list[str]] = {"leader": [], "follower": []}
        first = {"leader": trio.Event(), "follower": trio.Event()}

        @cached_prediction(cache)
        async def tokens(prompt: str) -> AsyncIterator[str]:
            nonlocal runs
            runs += 1
            yield WORDS[0]
            await gate.wait()
            for word in WORDS[1:]:
                yield word

        async def read(who: str) -> None:
            async for chunk in tokens("hi"):
                got[who].append(chunk)
                first[who].set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read, "leader")
            await first["leader"].wait()
            nursery.start_soon(read, "follower")
            await first["follower"].wait()
            assert got["follower"] == WORDS[:1]  # the chunk so far, before the rest exists
            gate.set()
        assert got["leader"] == got["follower"] == WORDS
        assert [chunk async for chunk in tokens("hi")] == WORDS
        stats = cache.stats()
        assert (stats["hits"], stats["coalesced"], stats["stores"]) == (1, 1, 1)
        await cache.aclose()

    trio.run(main)
    assert runs == 1


def test_nobody_reading_closes_the_generator_under_trio() -> None:
    closed: list[bool] = []

    async def main() -> None:
        cache = DecisionCache()
        ended = trio.Event()

        @cached_prediction(cache)
        async def tokens(prompt: str) -> AsyncIterator[str]:
            try:
                yield WORDS[0]
                await trio.sleep_forever()
                yield WORDS[1]
            finally:
                closed.append(True)
                ended.set()

        stream = tokens("hi")
        assert await anext(stream) == WORDS[0]
        await stream.aclose()
        with trio.fail_after(WAIT_TIMEOUT):  # a hang guard
            await ended.wait()
        assert closed == [True]
        assert cache.stats()["stores"] == 0
        await cache.aclose()

    trio.run(main)


async def test_a_hit_replays_at_the_recorded_pace_only_when_asked() -> None:
    async with DecisionCache() as cache:

        @cached_prediction(cache, namespace="slow")
        async def slow(prompt: str) -> AsyncIterator[str]:
            for word in WORDS:
                await asyncio.sleep(0.005)
                yield word

        paced = cached_prediction(cache, namespace="slow", pace=True)(slow.__wrapped__)
        assert await _all(slow("hi")) == WORDS
        await until(lambda: cache.stats()["stores"] == 1)
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        ticker = asyncio.ensure_future(tick())
        await asyncio.sleep(0)
        ticks = 0
        assert await _all(slow("hi")) == WORDS
        assert ticks == 0  # replayed at once: the loop never ran anything else
        assert await _all(paced("hi")) == WORDS
        assert ticks > 0  # paced: the replay waited between chunks
        ticker.cancel()
        assert cache.stats()["hits"] == 2


async def test_a_streaming_method_binds_its_instance_for_calls_keys_and_uncached() -> None:
    runs = 0

    class Chat:
        __cache_fingerprint__ = "chat-v1"

        def __init__(self, cache: DecisionCache) -> None:
            self.cache = cache

        @cached_prediction(DecisionCache(), namespace="chat")
        async def stream(self, prompt: str) -> AsyncIterator[str]:
            nonlocal runs
            runs += 1
            for word in prompt.split():
                yield word

    chat = Chat(DecisionCache())
    assert await _all(chat.stream("a b")) == ["a", "b"]
    assert await _all(chat.stream("a b")) == ["a", "b"]
    assert runs == 1
    assert chat.stream.key("a b") == Chat.stream.key(chat, "a b")
    assert await _all(chat.stream.uncached("a b")) == ["a", "b"]
    assert runs == 2


async def test_callers_that_miss_together_share_one_stream_live(store_url: str) -> None:
    # Both look the key up before either starts the generator (a store that answers
    # after a round trip): the second still reads the first's stream as it is produced.
    model = Gated()
    async with _cache(store_url) as cache:
        tokens = _tokens(cache, model)
        first, second = Reader(tokens("hi")), Reader(tokens("hi"))
        await until(lambda: model.runs == 1)
        model.open()
        await until(lambda: len(first.got) == 1 and len(second.got) == 1)
        assert not first.ended and not second.ended
        model.open(len(WORDS) - 1)
        await asyncio.gather(first.task, second.task)
        assert first.got == second.got == WORDS
        assert model.runs == 1
        assert cache.stats()["coalesced"] == 1


@pytest.mark.parametrize("whose", ["cache", "function"])
async def test_a_stale_stream_is_replayed_at_once_and_refreshed_once(whose: str) -> None:
    # stale_while_revalidate through the stream door (the cache's, or the generator's
    # own): the stale chunks at once, one refresh that collects the whole stream and
    # replaces them.
    window = {"stale_while_revalidate": 60.0}
    cache = DecisionCache(open_store("memory://"), ttl=0.2, **(window if whose == "cache" else {}))
    runs = 0

    @cached_prediction(cache, **(window if whose == "function" else {}))
    async def count(x: int) -> AsyncIterator[int]:
        nonlocal runs
        runs += 1
        for i in range(3):
            yield x + i + runs * 10

    assert [c async for c in count(1)] == [11, 12, 13]
    await asyncio.sleep(0.3)
    stale = await asyncio.gather(*(_collect(count(1)) for _ in range(5)))
    assert stale == [[11, 12, 13]] * 5
    await until(lambda: cache.stats()["stores"] == 2)
    assert [c async for c in count(1)] == [21, 22, 23]
    stats = cache.stats()
    assert (runs, stats["stale_hits"], stats["refreshes"], stats["refresh_failures"]) == (
        2,
        5,
        1,
        0,
    )
    await cache.aclose()


async def _collect(stream: AsyncIterator[int]) -> list[int]:
    return [chunk async for chunk in stream]


@pytest.mark.parametrize("buffer", ["bytearray", "numpy"])
async def test_a_stream_that_refills_one_buffer_is_stored_as_yielded(
    store_url: str, buffer: str
) -> None:
    # Issue 33 item 3: a generator that refills one buffer and yields it each time. Chunks
    # are kept as they were yielded, not by reference: every later hit and every follower
    # get [0, 1, 2, 3, 4], not five copies of the last fill.
    gate = asyncio.Event()

    async with _cache(store_url, ttl=3600) as cache:

        @cached_prediction(cache, namespace="refilled")
        async def fills(n: int) -> AsyncIterator[Any]:
            data: Any = bytearray(4) if buffer == "bytearray" else np.zeros(4, dtype=np.int64)
            for i in range(n):
                data[:] = [i] * 4 if buffer == "bytearray" else np.full(4, i)
                yield data
                if i == 0:
                    await gate.wait()  # a follower joins after the first chunk

        def firsts(chunks: list[Any]) -> list[int]:
            return [int(chunk[0]) for chunk in chunks]

        leader = Reader(fills(5))
        await until(lambda: len(leader.got) >= 1)
        follower = Reader(fills(5))
        await asyncio.sleep(0.01)
        gate.set()
        await leader.task
        await follower.task
        # The leader's own chunks are the generator's buffer: it reads each as yielded.
        assert firsts(follower.got) == [0, 1, 2, 3, 4]
        await until(lambda: cache.stats()["stores"] == 1)
        for _ in range(2):
            assert firsts(await _all(fills(5))) == [0, 1, 2, 3, 4]


async def test_a_stream_refresh_keeps_the_bounds_of_a_miss() -> None:
    # Issue 31 finding 7: a refresh stored 50 chunks past max_chunks=10 (and collected a
    # whole long stream in memory). A refresh is bounded as a miss is: past max_chunks
    # the generator is stopped and nothing is stored. What may not be stored ends the
    # stale entry (as a refresh answered no-store does): the next call streams live.
    cache = DecisionCache(open_store("memory://"), ttl=0.2, stale_while_revalidate=60)
    length = 5
    produced = 0

    @cached_prediction(cache, max_chunks=10)
    async def count(x: int) -> AsyncIterator[int]:
        nonlocal produced
        for i in range(length):
            produced += 1
            yield x + i

    assert await _all(count(1)) == [1, 2, 3, 4, 5]
    await asyncio.sleep(0.3)
    length = 50
    produced = 0
    assert await _all(count(1)) == [1, 2, 3, 4, 5]  # stale, and one refresh
    await until(lambda: cache.stats()["refreshes"] == 1 and not cache.engine.flights.keys())
    assert produced <= 11, "the refresh stopped the generator past max_chunks"
    assert cache.stats()["stores"] == 1, "nothing stored past max_chunks"
    assert await _all(count(1)) == list(range(1, 51))
    assert cache.stats()["stores"] == 1
    await cache.aclose()


async def test_replay_of_a_stream_says_why_as_a_single_call_does(tmp_path: Path) -> None:
    # Issue 31 finding 9: the stream door said "not recorded" for an expired recording
    # and for a missing file, where single calls say "expired" and "store unreadable".
    path = tmp_path / "recording.db"
    recording = DecisionCache(open_store(f"sqlite:///{path}"), mode="record", ttl=0.05)
    model = Gated()
    model.open(len(WORDS))
    assert await _all(_tokens(recording, model)("soon expired")) == WORDS
    await recording.aclose()
    await recording.store.aclose()
    await asyncio.sleep(0.1)
    async with DecisionCache(open_store(f"sqlite:///{path}"), mode="replay") as replaying:
        with pytest.raises(ReplayMiss) as expired:
            await _all(_tokens(replaying, model)("soon expired"))
        assert expired.value.reason == "expired"
        await replaying.store.aclose()
    gone = tmp_path / "no such recording.db"
    async with DecisionCache(open_store(f"sqlite:///{gone}"), mode="replay") as replaying:
        with pytest.raises(ReplayMiss) as unreadable:
            await _all(_tokens(replaying, model)("anything"))
        assert unreadable.value.reason == "store unreadable"
        await replaying.store.aclose()
    assert model.runs == 1
