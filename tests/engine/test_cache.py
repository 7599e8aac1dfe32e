"""cache.py: ttl, admission, renewal, store faults, corruption, conflicts, batches, stats.

Coalescing has its own module (test_flight.py). The stores here wrap a real
MemoryStore; only faults a MemoryStore cannot produce (raising, hanging, a
rival writer between lookup and add) are simulated.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from asyncache import DecisionCache, DecisionStore, Entry, MemoryStore
from asyncache.codec import decode, encode, normalize_secret
from asyncache.errors import StoreError

from ..support import until

K1, K2, K3 = (bytes([i]) * 16 for i in range(1, 4))


class Calls:
    """A compute function that counts its calls and returns ``result``."""

    def __init__(self, result: Any = "spam") -> None:
        self.count = 0
        self.result = result

    async def __call__(self) -> Any:
        self.count += 1
        return self.result


class WrappedStore:
    """A MemoryStore reached through the async protocol only (no fast path); counts calls."""

    def __init__(self, inner: MemoryStore | None = None) -> None:
        self.inner = inner if inner is not None else MemoryStore()
        self.calls: Counter[str] = Counter()

    async def get(self, key: bytes) -> Entry | None:
        self.calls["get"] += 1
        return await self.inner.get(key)

    async def get_many(self, keys: Sequence[bytes]) -> list[Entry | None]:
        self.calls["get_many"] += 1
        return await self.inner.get_many(keys)

    async def add(self, key: bytes, value: bytes, expires_at: float | None) -> Entry:
        self.calls["add"] += 1
        return await self.inner.add(key, value, expires_at)

    async def add_many(self, items: Sequence[tuple[bytes, bytes, float | None]]) -> list[Entry]:
        self.calls["add_many"] += 1
        return await self.inner.add_many(items)

    async def renew(self, key: bytes, expires_at: float | None) -> bool:
        self.calls["renew"] += 1
        return await self.inner.renew(key, expires_at)

    async def delete(self, key: bytes) -> None:
        self.calls["delete"] += 1
        await self.inner.delete(key)

    async def prune(self) -> int:
        return await self.inner.prune()

    async def count(self) -> int:
        return await self.inner.count()

    async def clear(self) -> None:
        await self.inner.clear()

    async def aclose(self) -> None:
        self.calls["aclose"] += 1


class FaultyStore(WrappedStore):
    """Raises (a broken connection) or hangs (a stalled server) on every call while ``fault``."""

    def __init__(self, fault: str | None = "raise") -> None:
        super().__init__()
        self.fault = fault
        self.never = asyncio.Event()

    async def _trip(self, what: str) -> None:
        self.calls[f"tried {what}"] += 1
        if self.fault == "raise":
            raise StoreError(f"connection reset during {what}")
        if self.fault == "hang":
            await self.never.wait()

    async def get(self, key: bytes) -> Entry | None:
        await self._trip("get")
        return await super().get(key)

    async def get_many(self, keys: Sequence[bytes]) -> list[Entry | None]:
        await self._trip("get_many")
        return await super().get_many(keys)

    async def add(self, key: bytes, value: bytes, expires_at: float | None) -> Entry:
        await self._trip("add")
        return await super().add(key, value, expires_at)

    async def add_many(self, items: Sequence[tuple[bytes, bytes, float | None]]) -> list[Entry]:
        await self._trip("add_many")
        return await super().add_many(items)


class RivalStore(WrappedStore):
    """Another writer gets in between our lookup and our add, with its own decision."""

    def __init__(self, rival: Any) -> None:
        super().__init__()
        self.rival = rival

    def rival_value(self, key: bytes) -> bytes:
        return encode(self.rival, ttl=None, created_at=1.0, compute_seconds=2.0, key=key)

    async def add(self, key: bytes, value: bytes, expires_at: float | None) -> Entry:
        await self.inner.add(key, self.rival_value(key), None)
        return await super().add(key, value, expires_at)

    async def add_many(self, items: Sequence[tuple[bytes, bytes, float | None]]) -> list[Entry]:
        for key, _, _ in items:
            await self.inner.add(key, self.rival_value(key), None)
        return await super().add_many(items)


class GatedRenewStore(WrappedStore):
    """A store whose renew waits for ``gate``: shows renewal is off the caller's path."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def renew(self, key: bytes, expires_at: float | None) -> bool:
        self.calls["renew started"] += 1
        await self.gate.wait()
        return await super().renew(key, expires_at)


def test_helper_stores_implement_the_protocol() -> None:
    for store in (WrappedStore(), FaultyStore(), RivalStore(1), GatedRenewStore()):
        assert isinstance(store, DecisionStore)


# -- ttl and admission -----------------------------------------------------


async def test_fixed_ttl_sets_the_expiry_and_is_recorded_in_the_entry() -> None:
    store = MemoryStore()
    cache = DecisionCache(store, ttl=60)
    before = time.time()
    await cache.get_or_compute(K1, Calls())
    entry = store.get_now(K1)
    assert entry is not None and entry.expires_at is not None
    assert before + 60 <= entry.expires_at <= time.time() + 60
    decoded = decode(entry.value, key=K1)
    assert decoded.ttl == 60.0
    assert before <= decoded.created_at <= time.time()


async def test_ttl_none_never_expires() -> None:
    store = MemoryStore()
    await DecisionCache(store, ttl=None).get_or_compute(K1, Calls())
    entry = store.get_now(K1)
    assert entry is not None and entry.expires_at is None


async def test_ttl_function_gets_inputs_and_result() -> None:
    store = MemoryStore()
    seen: list[tuple[Any, Any]] = []

    def ttl(inputs: Any, result: Any) -> float | None:
        seen.append((inputs, result))
        return {"short": 5.0, "long": 500.0}.get(result)

    cache = DecisionCache(store, ttl=ttl)
    now = time.time()
    await cache.get_or_compute(K1, Calls("short"), inputs={"text": "a"})
    await cache.get_or_compute(K2, Calls("long"), inputs={"text": "b"})
    await cache.get_or_compute(K3, Calls("forever"), inputs={"text": "c"})
    assert seen == [({"text": "a"}, "short"), ({"text": "b"}, "long"), ({"text": "c"}, "forever")]
    expiries = [entry.expires_at if entry else 0 for entry in map(store.get_now, (K1, K2, K3))]
    assert expiries[0] is not None and now + 5 <= expiries[0] < now + 100
    assert expiries[1] is not None and now + 500 <= expiries[1] < now + 1000
    assert expiries[2] is None


@pytest.mark.parametrize(
    "options",
    [
        {"ttl": 0},
        {"ttl": -5},
        {"ttl": lambda inputs, result: 0.0},
        {"ttl": lambda inputs, result: math.nan},
        {"admit": lambda i, r: False},
    ],
    ids=["ttl=0", "ttl<0", "ttl()=0", "ttl()=nan", "admit=False"],
)
async def test_not_admitted_results_are_returned_but_not_stored(options: dict[str, Any]) -> None:
    store = MemoryStore()
    cache = DecisionCache(store, **options)
    model = Calls({"label": "fallback"})
    assert await cache.get_or_compute(K1, model) == {"label": "fallback"}
    assert await cache.get_or_compute(K1, model) == {"label": "fallback"}
    assert model.count == 2
    assert len(store) == 0
    stats = cache.stats()
    assert (stats["not_admitted"], stats["stores"], stats["hits"]) == (2, 0, 0)


async def test_admit_sees_inputs_and_result_and_only_false_refuses() -> None:
    store = MemoryStore()
    seen: list[tuple[Any, Any]] = []

    def admit(inputs: Any, result: Any) -> Any:
        seen.append((inputs, result))
        return None if result == "maybe" else result != "degraded"

    cache = DecisionCache(store, admit=admit)
    await cache.get_or_compute(K1, Calls("good"), inputs=1)
    await cache.get_or_compute(K2, Calls("degraded"), inputs=2)
    await cache.get_or_compute(K3, Calls("maybe"), inputs=3)
    assert seen == [(1, "good"), (2, "degraded"), (3, "maybe")]
    assert [store.get_now(key) is not None for key in (K1, K2, K3)] == [True, False, True]


async def test_a_raising_hook_keeps_the_prediction_and_skips_the_write() -> None:
    def ttl(inputs: Any, result: Any) -> float:
        raise RuntimeError("hook bug")

    store = MemoryStore()
    cache = DecisionCache(store, ttl=ttl)
    assert await cache.get_or_compute(K1, Calls("ok")) == "ok"
    assert len(store) == 0 and cache.stats()["errors"] == 1


async def test_results_over_max_entry_bytes_are_returned_but_not_stored() -> None:
    store = MemoryStore()
    cache = DecisionCache(store, max_entry_bytes=200)
    big = {"text": "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(300))}
    assert await cache.get_or_compute(K1, Calls(big)) == big
    assert await cache.get_or_compute(K2, Calls("small")) == "small"
    assert store.get_now(K1) is None and store.get_now(K2) is not None
    assert cache.stats()["too_large"] == 1


class Unencodable:
    pass


async def test_unencodable_results_are_returned_counted_and_logged_once_per_type(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore()
    cache = DecisionCache(store)
    results = [Unencodable(), Unencodable(), {1, 2}, Unencodable()]
    with caplog.at_level(logging.WARNING, logger="asyncache"):
        for index, result in enumerate(results):
            assert await cache.get_or_compute(bytes([index]) * 16, Calls(result)) is result
    assert len(store) == 0
    assert cache.stats()["unencodable"] == 4
    warnings = [r.getMessage() for r in caplog.records if "not stored" in r.getMessage()]
    assert len(warnings) == 2
    assert "Unencodable" in warnings[0] and "set" in warnings[1]


# -- renewal ---------------------------------------------------------------


def age(store: WrappedStore, key: bytes, seconds: float, ttl: float) -> None:
    """Make the entry under ``key`` look as if it was stored ``seconds`` ago."""
    entry = store.inner.get_now(key)
    assert entry is not None
    store.inner.put_now(key, Entry(entry.value, time.time() + ttl - seconds))


async def test_renew_on_hit_renews_at_most_once_per_sixteenth_of_the_ttl() -> None:
    store = WrappedStore()
    cache = DecisionCache(store, ttl=1600.0, renew_on_hit=True)
    await cache.get_or_compute(K1, Calls())
    for _ in range(20):  # fresh entry: younger than ttl/16 = 100 s
        await cache.get_or_compute(K1, Calls())
    await until(lambda: not cache.engine.background)
    assert store.calls["renew"] == 0
    age(store, K1, 50.0, 1600.0)
    await cache.get_or_compute(K1, Calls())
    await until(lambda: not cache.engine.background)
    assert store.calls["renew"] == 0
    age(store, K1, 150.0, 1600.0)
    for _ in range(20):  # many hits while the entry is due: one renewal
        await cache.get_or_compute(K1, Calls())
    await until(lambda: not cache.engine.background)
    assert store.calls["renew"] == 1
    entry = store.inner.get_now(K1)
    assert entry is not None and entry.expires_at is not None
    assert entry.expires_at > time.time() + 1500  # it had 1450 s left
    for _ in range(5):  # just renewed: not due again
        await cache.get_or_compute(K1, Calls())
    await until(lambda: not cache.engine.background)
    assert store.calls["renew"] == 1
    assert cache.stats()["renewals"] == 1
    await cache.aclose()


async def test_renewal_runs_off_the_callers_path() -> None:
    store = GatedRenewStore()
    cache = DecisionCache(store, ttl=100.0, renew_on_hit=True)
    model = Calls({"a": 1})
    await cache.get_or_compute(K1, model)
    age(store, K1, 50.0, 100.0)
    # The hit returns while the renewal is still blocked in the store.
    assert await cache.get_or_compute(K1, model) == {"a": 1}
    await until(lambda: store.calls["renew started"] == 1)
    assert await cache.get_or_compute(K1, model) == {"a": 1}  # not a second renewal
    assert store.calls["renew started"] == 1 and cache.stats()["renewals"] == 0
    store.gate.set()
    await cache.aclose()  # awaits the owned background renewal
    assert cache.stats()["renewals"] == 1
    assert model.count == 1


async def test_no_renewal_without_renew_on_hit_or_without_ttl() -> None:
    for options in ({"ttl": 100.0}, {"ttl": None, "renew_on_hit": True}):
        store = WrappedStore()
        cache = DecisionCache(store, **options)
        await cache.get_or_compute(K1, Calls())
        if options["ttl"]:
            age(store, K1, 90.0, 100.0)
        await cache.get_or_compute(K1, Calls())
        await cache.aclose()
        assert store.calls["renew"] == 0


# -- store faults ----------------------------------------------------------


async def test_a_raising_store_never_fails_the_call() -> None:
    store = FaultyStore("raise")
    cache = DecisionCache(store, failure_threshold=1000)
    model = Calls({"label": "ham"})
    for _ in range(3):
        assert await cache.get_or_compute(K1, model) == {"label": "ham"}
    assert model.count == 3
    stats = cache.stats()
    assert stats["errors"] == 6  # a get and an add per call
    assert stats["misses"] == 3 and stats["stores"] == 0
    assert await cache.get_or_compute_many([K1, K2], _batch(["x", "y"])) == ["x", "y"]
    assert cache.stats()["errors"] == 8


async def test_a_hanging_store_times_out_into_a_miss() -> None:
    store = FaultyStore("hang")
    cache = DecisionCache(store, store_timeout=0.01, failure_threshold=1000)
    model = Calls("ok")
    assert await cache.get_or_compute(K1, model) == "ok"
    assert model.count == 1
    # A request pays one store timeout: after its get timed out, its add skips the store.
    assert cache.stats()["errors"] == 1
    assert store.calls["tried get"] == 1 and store.calls["tried add"] == 0


async def test_repeated_failures_skip_the_store_for_the_cooldown() -> None:
    store = FaultyStore("raise")
    cache = DecisionCache(store, failure_threshold=3, failure_cooldown=3600)
    model = Calls("ok")
    # Reads and writes count apart: each kind cools down after its own 3rd failure.
    for _ in range(3):
        await cache.get_or_compute(K1, model)  # one get and one add, both failing
    tried = sum(count for name, count in store.calls.items() if name.startswith("tried"))
    assert tried == 6
    for _ in range(10):
        assert await cache.get_or_compute(K1, model) == "ok"
    assert sum(c for name, c in store.calls.items() if name.startswith("tried")) == tried
    assert cache.stats()["errors"] == 6
    assert model.count == 13


async def test_the_store_is_tried_again_after_the_cooldown() -> None:
    store = FaultyStore("raise")
    cache = DecisionCache(store, failure_threshold=2, failure_cooldown=0.01)
    model = Calls("ok")
    await cache.get_or_compute(K1, model)
    await cache.get_or_compute(K1, model)  # two failed gets and adds: both cool down
    store.fault = None  # the server came back
    guard = cache.engine.guard
    skipped_until = max(guard.reads.skip_until, guard.writes.skip_until)
    await asyncio.sleep(0.02)  # let the cool-down pass (not a timing assertion)
    assert time.monotonic() > skipped_until
    assert await cache.get_or_compute(K1, model) == "ok"  # computes, and stores this time
    assert await cache.get_or_compute(K1, model) == "ok"  # a hit
    assert model.count == 3
    assert cache.stats()["hits"] == 1 and cache.stats()["stores"] == 1


# -- corrupt and foreign entries ------------------------------------------


@pytest.mark.parametrize("wrapped", [False, True], ids=["memory", "async store"])
async def test_corrupt_entries_are_misses_that_are_counted_and_deleted(wrapped: bool) -> None:
    inner = MemoryStore()
    store: DecisionStore = WrappedStore(inner) if wrapped else inner
    cache = DecisionCache(store)
    for key, garbage in ((K1, b"\x10{not json"), (K2, b"\xff\x00"), (K3, b"")):
        inner.put_now(key, Entry(garbage, None))
        assert await cache.get_or_compute(key, Calls("fresh")) == "fresh"
        entry = inner.get_now(key)
        assert entry is not None and decode(entry.value, key=key).value == "fresh"
    stats = cache.stats()
    assert (stats["corrupt"], stats["misses"], stats["stores"], stats["hits"]) == (3, 3, 3, 0)
    if wrapped:
        assert isinstance(store, WrappedStore) and store.calls["delete"] == 3


async def test_entries_under_another_secret_are_misses() -> None:
    store = MemoryStore()
    writer = DecisionCache(store, secret="alpha")
    await writer.get_or_compute(K1, Calls("from alpha"))
    reader = DecisionCache(store, secret="beta")
    assert await reader.get_or_compute(K1, Calls("from beta")) == "from beta"
    assert reader.stats()["corrupt"] == 1 and reader.stats()["hits"] == 0
    assert await reader.get_or_compute(K1, Calls("again")) == "from beta"  # its own entry now


async def test_unsigned_entries_are_misses_for_a_cache_with_a_secret() -> None:
    store = MemoryStore()
    await DecisionCache(store).get_or_compute(K1, Calls("unsigned"))
    secure = DecisionCache(store, secret=b"key")
    assert await secure.get_or_compute(K1, Calls("signed")) == "signed"
    entry = store.get_now(K1)
    assert entry is not None
    assert decode(entry.value, key=K1, secret=normalize_secret(b"key")).value == "signed"


async def test_a_signed_entry_moved_to_another_key_is_a_miss() -> None:
    store = MemoryStore()
    cache = DecisionCache(store, secret="s")
    await cache.get_or_compute(K1, Calls("for K1"))
    moved = store.get_now(K1)
    assert moved is not None
    store.put_now(K2, moved)
    assert await cache.get_or_compute(K2, Calls("for K2")) == "for K2"
    assert cache.stats()["corrupt"] == 1


# -- conflicts -------------------------------------------------------------


async def test_when_another_writer_wins_every_caller_gets_its_decision() -> None:
    store = RivalStore({"label": "rival", "scores": np.array([0.5, 0.5])})
    cache = DecisionCache(store)
    gate = asyncio.Event()

    async def ours() -> Any:
        await gate.wait()
        return {"label": "ours", "scores": np.array([0.9, 0.1])}

    callers = [asyncio.create_task(cache.get_or_compute(K1, ours)) for _ in range(4)]
    await until(lambda: cache.stats()["coalesced"] == 3)
    gate.set()
    results = await asyncio.gather(*callers)
    for result in results:
        assert result["label"] == "rival"
        assert np.array_equal(result["scores"], [0.5, 0.5])
    stats = cache.stats()
    assert (stats["conflicts"], stats["stores"]) == (1, 0)
    # And the rival's decision is what later hits see.
    assert (await cache.get_or_compute(K1, ours))["label"] == "rival"


async def test_batch_conflicts_hand_out_the_winners_too() -> None:
    store = RivalStore("rival")
    cache = DecisionCache(store)
    assert await cache.get_or_compute_many([K1, K2], _batch(["a", "b"])) == ["rival", "rival"]
    assert cache.stats()["conflicts"] == 2


async def test_store_result_returns_the_stored_decision() -> None:
    cache = DecisionCache(MemoryStore())
    assert await cache.store_result(K1, ("a", 1)) == ["a", 1]  # decoded: a tuple is a list
    assert await cache.store_result(K1, "later") == ["a", 1]  # first decision wins
    hit = await cache.lookup(K1)
    assert hit is not None and hit.value == ["a", 1]
    assert await cache.lookup(K2) is None


# -- batches ---------------------------------------------------------------


def _batch(results: list[Any], seen: list[list[int]] | None = None) -> Any:
    async def compute(indices: list[int]) -> list[Any]:
        if seen is not None:
            seen.append(indices)
        return [results[i] for i in indices]

    return compute


async def test_a_batch_uses_one_get_many_one_compute_and_one_add_many() -> None:
    store = WrappedStore()
    cache = DecisionCache(store)
    await cache.get_or_compute_many([K2], _batch(["two"]))
    store.calls.clear()
    seen: list[list[int]] = []
    got = await cache.get_or_compute_many([K1, K2, K3], _batch(["one", "x", "three"], seen))
    assert got == ["one", "two", "three"]
    assert seen == [[0, 2]]  # only the misses
    assert store.calls == Counter({"get_many": 1, "add_many": 1})
    stats = cache.stats()
    assert (stats["hits"], stats["misses"]) == (1, 3)
    # All stored: the same batch again is all hits and computes nothing.
    assert await cache.get_or_compute_many([K3, K1], _batch(["?", "?"], seen)) == ["three", "one"]
    assert seen == [[0, 2]]


async def test_duplicate_keys_in_a_batch_are_computed_once_and_copied() -> None:
    cache = DecisionCache(MemoryStore())
    seen: list[list[int]] = []
    results = [{"n": 1}, {"n": 1}, {"n": 2}]
    got = await cache.get_or_compute_many([K1, K1, K2], _batch(results, seen))
    assert seen == [[0, 2]]
    assert got == [{"n": 1}, {"n": 1}, {"n": 2}]
    assert got[0] is not got[1]
    assert cache.stats()["misses"] == 3
    again = await cache.get_or_compute_many([K1, K1], _batch(results, seen))
    assert again == [{"n": 1}, {"n": 1}] and again[0] is not again[1]
    assert cache.stats()["hits"] == 2


class ItemError(Exception):
    def __init__(self, item: str, reason: str) -> None:
        super().__init__(f"{item}: {reason}")  # args no longer match __init__ (uncopyable)


async def test_a_failed_item_fails_only_that_item() -> None:
    store = MemoryStore()
    cache = DecisionCache(store)
    failure = ItemError("b", "too long")
    seen: list[list[int]] = []
    with pytest.raises(ItemError) as raised:
        await cache.get_or_compute_many(
            [K1, K2, K2, K3], _batch(["a", failure, failure, "c"], seen)
        )
    assert raised.value is failure
    assert [store.get_now(key) is not None for key in (K1, K2, K3)] == [True, False, True]
    # The other items were stored: asking for them again computes nothing.
    assert await cache.get_or_compute_many([K1, K3], _batch(["?", "?"], seen)) == ["a", "c"]
    assert seen == [[0, 1, 3]]


async def test_a_batch_model_error_fails_the_batch_and_stores_nothing() -> None:
    store = MemoryStore()
    cache = DecisionCache(store)

    async def broken(indices: list[int]) -> list[Any]:
        raise OSError("device lost")

    with pytest.raises(OSError, match="device lost"):
        await cache.get_or_compute_many([K1, K2], broken)
    assert len(store) == 0 and cache.stats()["in_flight"] == 0

    async def short(indices: list[int]) -> list[Any]:
        return ["only one"]

    with pytest.raises(ValueError, match="1 results for 2 items"):
        await cache.get_or_compute_many([K1, K2], short)


# -- switches, lifecycle and stats ---------------------------------------


async def test_disabled_cache_computes_every_call_and_touches_no_store() -> None:
    store = WrappedStore()
    cache = DecisionCache(store, enabled=False)
    model = Calls("x")
    for _ in range(3):
        assert await cache.get_or_compute(K1, model) == "x"
    assert await cache.get_or_compute_many([K1, K2], _batch(["a", "b"])) == ["a", "b"]
    assert model.count == 3
    assert sum(store.calls.values()) == 0
    assert cache.stats()["bypassed"] == 5


async def test_compute_seconds_saved_adds_the_stored_compute_time_per_hit() -> None:
    store = MemoryStore()
    cache = DecisionCache(store)
    store.put_now(
        K1, Entry(encode("v", ttl=None, created_at=1.0, compute_seconds=0.5, key=K1), None)
    )
    for _ in range(4):
        await cache.get_or_compute(K1, Calls())
    assert cache.stats()["compute_seconds_saved"] == pytest.approx(2.0)


async def test_stats_has_every_counter_design_lists() -> None:
    cache = DecisionCache(MemoryStore())
    await cache.get_or_compute(K1, Calls())
    await cache.get_or_compute(K1, Calls())
    stats = cache.stats()
    for name in (
        "hits",
        "misses",
        "coalesced",
        "stores",
        "conflicts",
        "bypassed",
        "not_admitted",
        "too_large",
        "errors",
        "renewals",
        "corrupt",
        "in_flight",
        "compute_seconds_saved",
        "unencodable",
        "coalesce_timeouts",
    ):
        assert name in stats, name
    assert (stats["hits"], stats["misses"], stats["stores"]) == (1, 1, 1)
    assert all(
        stats[name] == 0
        for name in ("coalesced", "conflicts", "bypassed", "not_admitted", "too_large", "errors")
    )
    cache.reset_stats()
    assert cache.stats()["hits"] == 0


async def test_async_with_closes_the_store_once() -> None:
    store = WrappedStore()
    async with DecisionCache(store) as cache:
        assert await cache.get_or_compute(K1, Calls(1)) == 1
    await cache.aclose()
    assert store.calls["aclose"] == 1


def test_bad_options_are_refused() -> None:
    with pytest.raises(TypeError, match="ttl"):
        DecisionCache(ttl="60")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_entry_bytes"):
        DecisionCache(max_entry_bytes=0)


@pytest.mark.parametrize("ttl", [math.inf, 1e300])
async def test_an_infinite_or_huge_ttl_stores_without_expiry_on_every_store(
    tmp_path: Path, ttl: float
) -> None:
    from asyncache.stores.sqlite import SQLiteStore

    for store in (MemoryStore(), SQLiteStore(tmp_path / f"{ttl}.sqlite")):
        cache = DecisionCache(store, ttl=ttl)
        model = Calls("ok")
        for _ in range(12):  # past the store guard's failure threshold, were adds to fail
            assert await cache.get_or_compute(K1, model) == "ok"
        assert model.count == 1
        stats = cache.stats()
        assert stats["stores"] == 1 and stats["errors"] == 0 and stats["hits"] == 11
        entry = await store.get(K1)
        assert entry is not None
        assert entry.expires_at is None or entry.expires_at > time.time() + 1e9
        await cache.aclose()


@pytest.mark.parametrize("ttl", [-1.0, 0.0, math.nan])
async def test_a_negative_zero_or_nan_ttl_stores_nothing_and_is_counted(ttl: float) -> None:
    cache = DecisionCache(ttl=lambda inputs, result: ttl)
    model = Calls("ok")
    assert await cache.get_or_compute(K1, model) == "ok"
    assert await cache.get_or_compute(K1, model) == "ok"
    assert model.count == 2
    assert cache.stats()["not_admitted"] == 2 and cache.stats()["stores"] == 0
    await cache.aclose()
