"""Record and replay: record every decision once, replay them without the model, and fail
loudly on a call that was never recorded, through every door."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import os
import sqlite3
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from asyncache import (
    AsyncacheError,
    ConfigurationError,
    DecisionCache,
    DecisionStore,
    ReplayMiss,
    StoreError,
    cached_prediction,
    open_store,
)
from asyncache.middleware import DecisionCacheMiddleware

from ..middleware import RecordingApp, call


@dataclasses.dataclass(frozen=True)
class Verdict:
    label: str
    version: int


@pytest_asyncio.fixture(params=["memory", "sqlite", "tiered", "redis"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[[], DecisionStore]]:
    """A factory of stores that all see the same decisions (a file, a server, one memory)."""
    opened: list[DecisionStore] = []
    if request.param == "memory":
        shared = open_store("memory://")

        def make() -> DecisionStore:
            return shared

    else:
        if request.param == "redis":
            url = request.getfixturevalue("redis_url")
            prefix = request.getfixturevalue("redis_prefix")
            target = f"{url}?prefix={prefix}"
        else:
            target = f"sqlite:///{tmp_path / 'decisions.sqlite'}"
        if request.param == "tiered":
            target = f"tiered+{target}"

        def make() -> DecisionStore:
            opened.append(open_store(target))
            return opened[-1]

    yield make
    for each in opened:
        await each.aclose()


class Model:
    """A model whose answers change with its version, counting its calls."""

    fingerprint = "verdicts"

    def __init__(self, cache: DecisionCache, version: int) -> None:
        self.version = version
        self.calls: list[str] = []
        self.predict = cached_prediction(cache, namespace="verdict", fingerprint="f")(self._run)
        self.batched = cached_prediction(cache, namespace="verdicts", fingerprint="f", batch=True)(
            self._run_batch
        )

    async def _run(self, text: str) -> Verdict:
        self.calls.append(text)
        await asyncio.sleep(0)
        return Verdict(text.upper(), self.version)

    async def _run_batch(self, texts: list[str]) -> list[Verdict]:
        self.calls.extend(texts)
        return [Verdict(text.upper(), self.version) for text in texts]


async def test_record_computes_every_call_and_replaces_what_was_stored(
    store: Callable[[], DecisionStore],
) -> None:
    live = DecisionCache(store())
    old = Model(live, version=1)
    assert await old.predict("a") == Verdict("A", 1)
    assert await old.batched.many(["b", "c"]) == [Verdict("B", 1), Verdict("C", 1)]

    recording = DecisionCache(store(), mode="record")
    new = Model(recording, version=2)
    for _ in range(2):  # recording never serves the store: the model runs every time
        assert await new.predict("a") == Verdict("A", 2)
        assert await new.batched.many(["b", "c"]) == [Verdict("B", 2), Verdict("C", 2)]
    assert await new.batched("d") == Verdict("D", 2)
    assert new.calls == ["a", "b", "c", "a", "b", "c", "d"]
    assert recording.stats()["hits"] == 0

    # What was recorded replaced what the old model had stored.
    later = Model(DecisionCache(store()), version=3)
    assert await later.predict("a") == Verdict("A", 2)
    assert await later.batched.many(["b", "c", "d"]) == [Verdict(t, 2) for t in "BCD"]
    assert later.calls == []
    await old.batched.aclose()
    await new.batched.aclose()
    await later.batched.aclose()


async def test_replay_answers_from_the_store_and_never_runs_the_model(
    store: Callable[[], DecisionStore],
) -> None:
    recorder = Model(DecisionCache(store(), mode="record"), version=1)
    assert await recorder.predict("a") == Verdict("A", 1)
    assert await recorder.batched.many(["b", "c"]) == [Verdict("B", 1), Verdict("C", 1)]

    replaying = DecisionCache(store(), mode="replay")
    replay = Model(replaying, version=2)
    hit = await replay.predict("a")
    assert hit == Verdict("A", 1) and type(hit) is Verdict
    assert await replay.batched("b") == Verdict("B", 1)
    assert await replay.batched.many(["c", "b", "c"]) == [Verdict(t, 1) for t in "CBC"]

    with pytest.raises(ReplayMiss) as single:
        await replay.predict("never recorded")
    with pytest.raises(ReplayMiss) as batched:
        await replay.batched("never recorded")
    with pytest.raises(ReplayMiss) as many:
        await replay.batched.many(["b", "never recorded"])
    assert replay.calls == []  # the model never ran, not even for the misses
    assert single.value.function == "verdict"
    assert batched.value.function == many.value.function == "verdicts"
    assert "verdict" in str(single.value) and single.value.digest in str(single.value)
    assert len(single.value.digest) == 12
    # The digest is of the inputs: the same call gives the same one, another call another.
    with pytest.raises(ReplayMiss) as again:
        await replay.predict("never recorded")
    with pytest.raises(ReplayMiss) as other:
        await replay.predict("another")
    assert again.value.digest == single.value.digest != other.value.digest
    assert isinstance(single.value, AsyncacheError)
    await recorder.batched.aclose()
    await replay.batched.aclose()


async def test_followers_of_a_replay_miss_each_get_the_error() -> None:
    cache = DecisionCache(mode="replay")
    model = Model(cache, version=1)
    results = await asyncio.gather(*(model.predict("x") for _ in range(3)), return_exceptions=True)
    assert [type(result) for result in results] == [ReplayMiss] * 3
    assert model.calls == []
    await cache.aclose()


async def test_the_middleware_replays_and_refuses_what_it_did_not_record() -> None:
    store = open_store("memory://")
    recorded = RecordingApp()
    recording = DecisionCacheMiddleware(recorded, cache=DecisionCache(store, mode="record"))
    first = await call(recording, body=b'{"text": "a"}')
    assert first.status == 200 and recorded.calls == 1

    replayed = RecordingApp()
    replaying = DecisionCacheMiddleware(replayed, cache=DecisionCache(store, mode="replay"))
    answer = await call(replaying, body=b'{"text": "a"}')
    assert (answer.status, answer.cache, answer.body) == (200, "hit", first.body)
    refused = await call(replaying, body=b'{"text": "b"}')
    assert (refused.status, refused.cache) == (500, "replay_miss")
    assert b"no recorded decision" in refused.body
    assert replayed.calls == 0


def test_asyncache_mode_sets_the_mode() -> None:
    for mode in ("live", "shadow", "record", "replay"):
        cache = DecisionCache.from_env({"ASYNCACHE_MODE": mode.upper()})
        assert cache.mode == mode
    assert DecisionCache.from_env({}).mode == "live"
    with pytest.raises(ConfigurationError, match="ASYNCACHE_MODE='playback'"):
        DecisionCache.from_env({"ASYNCACHE_MODE": "playback"})
    with pytest.raises(ValueError, match="replay"):
        DecisionCache(mode="playback")  # type: ignore[arg-type]


def test_a_replay_miss_survives_copying_and_pickling() -> None:
    import copy
    import pickle

    miss = ReplayMiss("verdict", "0123456789ab", bytes(16))
    for clone in (copy.copy(miss), pickle.loads(pickle.dumps(miss))):
        assert (clone.function, clone.digest, clone.key) == ("verdict", "0123456789ab", bytes(16))
        assert str(clone) == str(miss)


def test_record_needs_a_store_that_can_delete() -> None:
    class AddOnly:
        """A store written before ``delete`` was used: it has the nine methods only."""

        def __init__(self) -> None:
            self.inner = open_store("memory://")

        def __getattr__(self, name: str) -> Any:
            if name == "delete":
                raise AttributeError(name)
            return getattr(self.inner, name)

    store = AddOnly()
    assert not hasattr(store, "delete")
    with pytest.raises(ConfigurationError, match=r"mode='record'.*delete.*AddOnly"):
        DecisionCache(store, mode="record")  # type: ignore[arg-type]
    DecisionCache(store, mode="replay")  # type: ignore[arg-type]  # replay only reads


# -- replay never writes ---------------------------------------------------------
# Each attack leaves the recording byte for byte as it was: the file is hashed with
# its WAL folded in (every connection closed) before and after the replay.


def file_digest(path: Path) -> str:
    wal = path.with_name(path.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0  # checkpointed: the file is all
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def record_into(path: Path, texts: list[str], **options: Any) -> None:
    """Record a verdict for each text, through single calls and ``many``."""
    cache = DecisionCache(open_store(f"sqlite:///{path}"), mode="record", **options)
    model = Model(cache, version=1)
    for text in texts:
        await model.predict(text)
    await model.batched.many(texts)
    await model.batched.aclose()
    await cache.aclose()


async def replay_each_door(model: Model, texts: list[str]) -> list[BaseException | Verdict]:
    """One call of every door for each text: what each returned or raised, in order."""
    calls = [model.predict(text) for text in texts]
    calls += [model.batched(text) for text in texts]
    outcomes: list[Any] = list(await asyncio.gather(*calls, return_exceptions=True))
    try:
        outcomes.extend(await model.batched.many(texts))
    except ReplayMiss as miss:
        outcomes.append(miss)
    return outcomes


async def test_replay_under_another_secret_says_so_and_deletes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "decisions.sqlite"
    texts = ["a", "b", "c"]
    await record_into(path, texts, secret="recorded-with")
    before = file_digest(path)

    cache = DecisionCache(open_store(f"sqlite:///{path}"), mode="replay", secret="rotated")
    model = Model(cache, version=2)
    outcomes = await replay_each_door(model, texts)
    assert model.calls == []
    assert await cache.store.count() == 6  # every recorded row is still there
    assert outcomes and all(isinstance(outcome, ReplayMiss) for outcome in outcomes)
    for miss in outcomes:
        assert isinstance(miss, ReplayMiss) and miss.reason == "signature does not match"
        assert "signature does not match" in str(miss) and "ASYNCACHE_SECRET" in str(miss)
        assert "record it first" not in str(miss)
    await model.batched.aclose()
    await cache.aclose()
    assert file_digest(path) == before

    # The right secret replays them all.
    cache = DecisionCache(open_store(f"sqlite:///{path}"), mode="replay", secret="recorded-with")
    model = Model(cache, version=2)
    assert await replay_each_door(model, texts) == [Verdict(t.upper(), 1) for t in texts * 3]
    await model.batched.aclose()
    await cache.aclose()
    assert file_digest(path) == before


async def test_replay_with_renew_on_hit_keeps_the_recorded_expiries(tmp_path: Path) -> None:
    path = tmp_path / "decisions.sqlite"
    texts = ["a", "b"]
    await record_into(path, texts, ttl=16.0)
    before = file_digest(path)
    await asyncio.sleep(1.1)  # older than ttl/16: a live cache would renew these now

    cache = DecisionCache(
        open_store(f"sqlite:///{path}"), mode="replay", ttl=16.0, renew_on_hit=True
    )
    model = Model(cache, version=2)
    for _ in range(2):
        assert await replay_each_door(model, texts) == [Verdict(t.upper(), 1) for t in texts * 3]
    await model.batched.aclose()
    await cache.aclose()  # awaits background renewals, had any started
    assert cache.stats()["renewals"] == 0
    assert file_digest(path) == before


async def test_replay_of_an_expired_recording_says_so_and_prunes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "decisions.sqlite"
    texts = ["a", "b", "c"]
    await record_into(path, texts, ttl=0.3)
    before = file_digest(path)
    await asyncio.sleep(0.4)  # every recorded decision has expired

    store = open_store(f"sqlite:///{path}?prune_interval=0.05")
    cache = DecisionCache(store, mode="replay")
    model = Model(cache, version=2)
    outcomes = await replay_each_door(model, texts)
    assert model.calls == []
    await asyncio.sleep(0.3)  # six background prune intervals
    assert await store.count() == 6
    for miss in outcomes:
        assert isinstance(miss, ReplayMiss) and miss.reason == "expired", miss
        assert "expired" in str(miss) and "record it first" not in str(miss)
    await model.batched.aclose()
    await cache.aclose()
    assert file_digest(path) == before


async def test_replay_of_a_path_with_no_recording_creates_no_file_and_says_so(
    tmp_path: Path,
) -> None:
    path = tmp_path / "never-recorded.sqlite"
    cache = DecisionCache(open_store(f"sqlite:///{path}"), mode="replay")
    model = Model(cache, version=1)
    outcomes = await replay_each_door(model, ["a", "b"])
    assert model.calls == []
    for miss in outcomes:
        assert isinstance(miss, ReplayMiss) and miss.reason == "store unreadable", miss
        assert "no SQLite store at" in str(miss) and "not recorded" not in str(miss)
    await model.batched.aclose()
    await cache.aclose()
    assert os.listdir(tmp_path) == []  # no file, no -wal, no -shm


async def test_replay_of_a_corrupt_entry_says_so_and_leaves_it(tmp_path: Path) -> None:
    path = tmp_path / "decisions.sqlite"
    await record_into(path, ["a"])
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE asyncache_entries SET value = x'10ff'")
    before = file_digest(path)

    cache = DecisionCache(open_store(f"sqlite:///{path}"), mode="replay")
    model = Model(cache, version=2)
    outcomes = await replay_each_door(model, ["a"])
    assert await cache.store.count() == 2
    for miss in outcomes:
        assert isinstance(miss, ReplayMiss) and miss.reason == "corrupt", miss
    with pytest.raises(ReplayMiss, match="not recorded"):
        await model.predict("never recorded")
    assert cache.stats()["corrupt"] == 3
    await model.batched.aclose()
    await cache.aclose()
    assert file_digest(path) == before


# -- record never loses ------------------------------------------------------------

HOLD_THE_WRITE_LOCK = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
db.execute("COMMIT")
"""


async def test_a_recording_is_complete_or_fails_while_another_process_holds_the_lock(
    tmp_path: Path,
) -> None:
    path = tmp_path / "decisions.sqlite"
    texts = [f"ticket {n}" for n in range(300)]
    first = DecisionCache(open_store(f"sqlite:///{path}"), mode="record")
    old = Model(first, version=1)
    for text in texts:
        await old.predict(text)
    await old.batched.aclose()
    await first.aclose()

    # Another process takes SQLite's write lock and keeps it for 6 s, far past the
    # store's busy_timeout and the cache's store_timeout (1 s each).
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOLD_THE_WRITE_LOCK, str(path), "6",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert holder.stdout is not None
    assert await holder.stdout.readline() == b"locked\n"
    cache = DecisionCache(open_store(f"sqlite:///{path}"), mode="record")
    new = Model(cache, version=2)
    answered: dict[str, Verdict] = {}
    failure: BaseException | None = None
    try:
        for text in texts:
            answered[text] = await new.predict(text)
    except StoreError as exc:
        failure = exc
    finally:
        await new.batched.aclose()
        await cache.aclose()
        holder.kill()
        await holder.wait()

    replaying = DecisionCache(open_store(f"sqlite:///{path}"), mode="replay")
    replay = Model(replaying, version=3)
    if failure is None:
        # Complete: every decision recorded is the one its caller got.
        assert answered == {text: Verdict(text.upper(), 2) for text in texts}
    else:
        # Or loud, and nothing a caller got is missing from the file.
        assert "record:" in str(failure) and "incomplete" in str(failure)
        assert len(answered) < len(texts)
    for text, verdict in answered.items():
        assert await replay.predict(text) == verdict
    await replay.batched.aclose()
    await replaying.aclose()


@dataclasses.dataclass(frozen=True)
class ScoredVerdict:
    label: str
    version: int
    score: float  # a field added since the recording


async def test_replay_of_a_decision_that_no_longer_fits_its_type_leaves_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "decisions.sqlite"
    await record_into(path, ["a"])
    before = file_digest(path)
    cache = DecisionCache(open_store(f"sqlite:///{path}"), mode="replay")

    @cached_prediction(cache, namespace="verdict", fingerprint="f")
    async def predict(text: str) -> ScoredVerdict:
        raise AssertionError("replay never runs the model")

    @cached_prediction(cache, namespace="verdicts", fingerprint="f", batch=True)
    async def batched(texts: list[str]) -> list[ScoredVerdict]:
        raise AssertionError("replay never runs the model")

    doors: list[Callable[[], Awaitable[Any]]] = [
        lambda: predict("a"),
        lambda: batched("a"),
        lambda: batched.many(["a"]),
    ]
    for door in doors:
        with pytest.raises(ReplayMiss) as miss:
            await door()
        assert miss.value.reason == "corrupt" and "does not fit" in str(miss.value)
        assert miss.value.function in ("verdict", "verdicts")
    assert await cache.store.count() == 2
    await batched.aclose()
    await cache.aclose()
    assert file_digest(path) == before


async def test_the_middleware_replay_under_another_secret_is_a_500_that_says_so(
    tmp_path: Path,
) -> None:
    path = tmp_path / "decisions.sqlite"
    recording = DecisionCache(open_store(f"sqlite:///{path}"), mode="record", secret="a")
    first = await call(DecisionCacheMiddleware(RecordingApp(), cache=recording), body=b'{"t": 1}')
    assert first.status == 200
    await recording.aclose()
    before = file_digest(path)

    app = RecordingApp()
    replaying = DecisionCache(open_store(f"sqlite:///{path}"), mode="replay", secret="b")
    answer = await call(DecisionCacheMiddleware(app, cache=replaying), body=b'{"t": 1}')
    assert (answer.status, answer.cache) == (500, "replay_miss")
    assert b"signature does not match" in answer.body and b"ASYNCACHE_SECRET" in answer.body
    assert app.calls == 0
    assert await replaying.store.count() == 1
    await replaying.aclose()
    assert file_digest(path) == before


async def test_a_recording_fails_on_a_decision_it_cannot_store(tmp_path: Path) -> None:
    # Too large, or not encodable: replay would miss it far from here, so recording fails.
    cache = DecisionCache(open_store(f"sqlite:///{tmp_path / 'd.sqlite'}"), mode="record")
    cache.max_entry_bytes = 200
    model = Model(cache, version=1)
    long = "".join(hashlib.sha256(bytes([n])).hexdigest() for n in range(20))  # no zlib gain
    assert await model.predict("short") == Verdict("SHORT", 1)
    with pytest.raises(StoreError, match=r"record: .* over max_entry_bytes=200"):
        await model.predict(long)
    with pytest.raises(StoreError, match="the recording is incomplete"):
        await model.batched.many(["short", long])

    @cached_prediction(cache)
    async def opaque(text: str) -> object:
        return object()

    with pytest.raises(StoreError, match="record: a result of type object cannot be stored"):
        await opaque("x")
    # Refusals the user asked for are not errors.
    cache.admit = lambda inputs, result: False
    assert await model.predict(long) == Verdict(long.upper(), 1)
    await model.batched.aclose()
    await cache.aclose()
