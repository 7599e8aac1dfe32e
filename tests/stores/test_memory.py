"""memory.py: MemoryStore is an LRU bounded by entries and by bytes it never underestimates."""

from __future__ import annotations

import gc
import os
import random
import time
import tracemalloc

import pytest

from asyncache import DecisionCache, cached_prediction
from asyncache.stores import DecisionStore, Entry, entries_of, open_store
from asyncache.stores.memory import MemoryStore, entry_size

FAR = time.time() + 3600.0


def k(i: int) -> bytes:
    return i.to_bytes(16, "big")


def test_is_a_decision_store() -> None:
    assert isinstance(MemoryStore(), DecisionStore)


async def test_get_add_and_first_decision_wins() -> None:
    store = MemoryStore()
    assert await store.get(k(1)) is None
    first = await store.add(k(1), b"first", FAR)
    assert first == Entry(b"first", FAR)
    second = await store.add(k(1), b"second", FAR + 10)
    assert second == first  # the existing live entry is kept and returned
    assert await store.get(k(1)) == first
    assert await store.count() == 1


async def test_add_replaces_an_expired_entry() -> None:
    store = MemoryStore()
    await store.add(k(1), b"old", time.time() - 1)
    fresh = await store.add(k(1), b"new", FAR)
    assert fresh == Entry(b"new", FAR)
    assert await store.get(k(1)) == fresh


async def test_entries_without_expiry_live_forever() -> None:
    store = MemoryStore()
    await store.add(k(1), b"v", None)
    assert await store.get(k(1)) == Entry(b"v", None)
    assert await store.prune() == 0


async def test_expired_entries_are_never_returned_and_are_dropped_on_read() -> None:
    store = MemoryStore()
    await store.add(k(1), b"gone", time.time() - 0.001)
    await store.add(k(2), b"kept", FAR)
    assert await store.get(k(1)) is None
    assert await store.get_many([k(1), k(2), k(3)]) == [None, Entry(b"kept", FAR), None]
    assert len(store) == 1  # the read dropped it
    assert store.nbytes == entry_size(k(2), b"kept")
    assert await store.renew(k(1), FAR) is False


async def test_prune_drops_only_expired_entries() -> None:
    store = MemoryStore()
    past = time.time() - 1
    for i in range(10):
        await store.add(k(i), b"x", past if i % 2 else FAR)
    assert await store.count() == 10
    assert await store.prune() == 5
    assert await store.count() == 5
    assert all(entry is not None for entry in await store.get_many([k(i) for i in range(0, 10, 2)]))
    assert store.nbytes == 5 * entry_size(k(0), b"x")


async def test_lru_order_decides_what_max_entries_evicts() -> None:
    store = MemoryStore(max_entries=3)
    for i in range(3):
        await store.add(k(i), b"v", FAR)
    assert await store.get(k(0)) is not None  # 0 is now the most recently used
    await store.add(k(3), b"v", FAR)  # evicts 1, the least recently used
    assert [await store.get(k(i)) is not None for i in range(4)] == [True, False, True, True]
    await store.add(k(2), b"ignored", FAR)  # an add that finds an entry uses it too
    await store.add(k(4), b"v", FAR)  # evicts 0 (3 was read after 0 above)
    assert [await store.get(k(i)) is not None for i in range(5)] == [
        False,
        False,
        True,
        True,
        True,
    ]
    assert len(store) == 3
    assert store.evictions == 2


@pytest.mark.parametrize("scoped", [False, True], ids=["one-order", "scoped"])
def test_eviction_follows_a_reference_lru_through_repeated_reads(scoped: bool) -> None:
    """Reading the key read last moves nothing (it is last already): over random puts,
    reads (the same key often several times running, with equal keys that are other
    objects), drops and replacements, what the store evicts is what an exact LRU
    evicts, globally and, with budgets, in each scope."""
    rng = random.Random(20261206)
    budget = 4
    store = MemoryStore(max_entries=6, max_entries_per_scope=budget if scoped else None)
    model: dict[bytes, str] = {}  # key -> scope, least recently used first

    def touch(key: bytes) -> None:
        model[key] = model.pop(key)

    def evict_past_bounds(scope: str) -> None:
        if scoped:
            in_scope = [key for key, of in model.items() if of == scope]
            for key in in_scope[: max(0, len(in_scope) - budget)]:
                del model[key]
        while len(model) > 6:
            del model[next(iter(model))]

    keys = [k(i) for i in range(9)]
    for _ in range(3000):
        key = bytes(rng.choice(keys)) if rng.random() < 0.5 else rng.choice(keys)
        scope = "even" if key[-1] % 2 == 0 else "odd"
        action = rng.random()
        if action < 0.45:
            got = store.get_now(key)
            assert (got is not None) == (key in model)
            if got is not None:
                touch(key)
        elif action < 0.55 and key in model:
            repeats = rng.randint(2, 5)  # the same key read several times running
            for _ in range(repeats):
                assert store.get_now(key) is not None
            touch(key)
        elif action < 0.65:
            store.delete_now(key)
            model.pop(key, None)
        else:
            with entries_of(scope if scoped else None):
                store.put_now(key, Entry(b"v", None))
            model.pop(key, None)
            model[key] = scope
            evict_past_bounds(scope)
        assert list(store._data) == list(model)


async def test_max_bytes_bounds_the_estimate() -> None:
    size = entry_size(k(0), b"v" * 100)
    store = MemoryStore(max_entries=None, max_bytes=size * 4 + size // 2)
    for i in range(10):
        await store.add(k(i), b"v" * 100, FAR)
        assert store.nbytes <= store.max_bytes  # type: ignore[operator]
    assert len(store) == 4
    assert [await store.get(k(i)) is not None for i in range(10)] == [False] * 6 + [True] * 4
    big = b"b" * (size * 2)
    await store.add(k(99), big, FAR)  # one large entry pushes out as many as it needs
    assert await store.get(k(99)) == Entry(big, FAR)
    assert store.nbytes <= store.max_bytes  # type: ignore[operator]
    assert len(store) < 4


async def test_max_entry_bytes_skips_large_entries_but_returns_them() -> None:
    store = MemoryStore(max_entry_bytes=1000)
    small = await store.add(k(1), b"s" * 100, FAR)
    entry = await store.add(k(2), b"L" * 2000, FAR)
    assert entry == Entry(b"L" * 2000, FAR)  # the caller still gets its decision
    assert await store.get(k(2)) is None
    assert await store.get(k(1)) == small
    assert await store.count() == 1


async def test_renew_moves_the_expiry_of_a_live_entry() -> None:
    store = MemoryStore()
    await store.add(k(1), b"v", time.time() + 5)
    assert await store.renew(k(1), FAR) is True
    assert await store.get(k(1)) == Entry(b"v", FAR)
    assert await store.renew(k(1), None) is True
    assert await store.get(k(1)) == Entry(b"v", None)
    assert await store.renew(k(2), FAR) is False
    assert await store.count() == 1
    assert store.nbytes == entry_size(k(1), b"v")


async def test_add_many_and_get_many_keep_order_and_first_wins() -> None:
    store = MemoryStore()
    await store.add(k(2), b"existing", FAR)
    winners = await store.add_many([(k(1), b"a", FAR), (k(2), b"b", FAR), (k(3), b"c", None)])
    assert winners == [Entry(b"a", FAR), Entry(b"existing", FAR), Entry(b"c", None)]
    assert [e and e.value for e in await store.get_many([k(3), k(2), k(1)])] == [
        b"c",
        b"existing",
        b"a",
    ]


async def test_delete_clear_count_and_aclose() -> None:
    store = MemoryStore()
    for i in range(5):
        await store.add(k(i), b"v", FAR)
    await store.delete(k(0))
    await store.delete(k(0))  # deleting what is gone is fine
    assert await store.count() == 4
    await store.clear()
    assert await store.count() == 0
    assert store.nbytes == 0
    await store.add(k(1), b"v", FAR)
    await store.aclose()
    await store.aclose()
    assert await store.count() == 0


async def test_put_now_overwrites_and_keeps_the_byte_count() -> None:
    store = MemoryStore()
    store.put_now(k(1), Entry(b"a" * 10, FAR))
    store.put_now(k(1), Entry(b"b" * 500, None))
    assert store.get_now(k(1)) == Entry(b"b" * 500, None)
    assert store.nbytes == entry_size(k(1), b"b" * 500)
    store.delete_now(k(1))
    assert store.nbytes == 0


def test_bounds_must_be_positive() -> None:
    for name in ("max_entries", "max_bytes", "max_entry_bytes"):
        with pytest.raises(ValueError, match=name):
            MemoryStore(**{name: 0})  # type: ignore[arg-type]


async def test_open_store_memory_url() -> None:
    store = open_store("memory://?max_entries=2&max_bytes=100000&max_entry_bytes=5000")
    assert isinstance(store, MemoryStore)
    assert (store.max_entries, store.max_bytes, store.max_entry_bytes) == (2, 100000, 5000)
    assert isinstance(open_store("memory://"), MemoryStore)


def _measure(count: int, value_size: int, *, churn: int = 0) -> tuple[int, int]:
    """(real bytes by tracemalloc, estimated bytes) of a store holding ``count`` entries."""
    keys = [os.urandom(16) for _ in range(count + churn)]
    values = [os.urandom(value_size) for _ in range(count + churn)]
    expiries = [FAR + i for i in range(count + churn)]  # distinct floats, as real expiries are
    store = MemoryStore(max_entries=count, max_bytes=None)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for key, value, expires_at in zip(keys, values, expiries, strict=True):
            store.add_now(key, value, expires_at)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # The store holds the last ``count`` keys, values and expiries, which existed before
    # tracing started; count them as the store's own.
    kept = zip(keys[churn:], values[churn:], strict=True)
    own = sum(len(key) + len(value) + 2 * 33 + 24 for key, value in kept)
    return held + own, store.nbytes


@pytest.mark.parametrize(
    ("count", "value_size", "churn"),
    [
        (1_000, 100, 0),
        (5_462, 100, 0),
        (21_846, 100, 0),  # right after the hash table grew: the worst case per entry
        (43_691, 60, 0),
        (20_000, 1500, 0),
        (10_000, 100, 25_000),  # after many evictions
    ],
)
def test_byte_estimate_is_never_below_the_real_size(
    count: int, value_size: int, churn: int
) -> None:
    real, estimate = _measure(count, value_size, churn=churn)
    assert estimate >= real, (real / count, estimate / count)
    assert estimate <= real * 1.5  # and is not absurdly pessimistic either


async def test_a_scope_over_its_budget_evicts_only_its_own_entries() -> None:
    store = MemoryStore(max_entries=100, max_entries_per_scope=2)
    with entries_of("victim"):
        await store.add(b"v1", b"a", None)
        await store.add(b"v2", b"b", None)
    with entries_of("attacker"):
        for n in range(10):
            await store.add(b"a%d" % n, b"x", None)
    assert await store.get(b"v1") is not None and await store.get(b"v2") is not None
    assert len(store) == 4
    assert store.evictions == 8
    # Least recently used within the scope goes first: a read keeps an entry.
    with entries_of("victim"):
        assert await store.get(b"v1") is not None
        await store.add(b"v3", b"c", None)
    assert await store.get(b"v2") is None
    assert await store.get(b"v1") is not None
    await store.clear()
    with entries_of({"tenant": 1}):  # any keyable scope, by its canonical form
        await store.add(b"t", b"x", None)
    assert len(store) == 1
    assert MemoryStore.from_url("memory://?max_entries_per_scope=3").max_entries_per_scope == 3


async def test_the_decorator_charges_a_scoped_call_to_its_scope() -> None:
    store = MemoryStore(max_entries_per_scope=1)

    @cached_prediction(cache=DecisionCache(store), scope=lambda text, tenant: tenant)
    async def classify(text: str, tenant: str) -> str:
        return text.upper()

    await classify("a", "victim")
    for text in "bcdef":
        await classify(text, "attacker")
    assert len(store) == 2  # the victim's entry and the attacker's last
