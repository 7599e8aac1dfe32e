"""Record and replay: record every decision once, replay them without the model, and fail
loudly on a call that was never recorded, through every door."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
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
