"""``StoreContract``: the tests every ``DecisionStore`` must pass."""

from __future__ import annotations

import asyncio
import math
import os
import random
import time
from collections.abc import Awaitable, Callable

import pytest

from ..stores.protocol import DecisionStore, Entry

__all__ = ["StoreContract"]

HOUR = 3600.0


def _needs_delete(store: DecisionStore) -> Callable[[bytes], Awaitable[None]]:
    """``delete`` is optional (``DecisionStore``'s docstring): tested where a store has it."""
    delete = getattr(store, "delete", None)
    if not callable(delete):
        pytest.skip(f"{type(store).__name__} has no delete (mode='record' needs one)")
    return delete  # type: ignore[no-any-return]


def _needs_replace(
    store: DecisionStore,
) -> Callable[[bytes, bytes, bytes, float | None], Awaitable[Entry]]:
    """``replace`` is optional (``DecisionStore``'s docstring): tested where a store has it."""
    replace = getattr(store, "replace", None)
    if not callable(replace):
        pytest.skip(f"{type(store).__name__} has no replace (refreshes then delete and add)")
    return replace  # type: ignore[no-any-return]


def _key(n: int) -> bytes:
    """The n-th 16-byte test key, the size the engine's keys have."""
    return n.to_bytes(16, "big")


class StoreContract:
    """The ``DecisionStore`` contract, as tests of a store the subclass provides.

    Subclass it in a test module under a name pytest collects (``TestMyStore``)
    and define a ``store`` fixture in the subclass that yields a fresh, empty
    store for each test and closes it (``await store.aclose()``) afterwards.
    Declare the fixture with ``pytest_asyncio.fixture`` (needed in
    pytest-asyncio's strict mode; ``pytest.fixture`` is enough in auto mode).
    A test may close the store itself: ``aclose()`` must be safe to call twice.

    Each test checks one rule of the contract that the engine relies on:
    ``add`` keeps a live entry and returns it (the first decision wins),
    expired entries are never returned, values and keys are exact bytes,
    ``get_many`` and ``add_many`` answer in order, ``renew``, ``delete``, ``prune``,
    ``count`` and ``clear`` do what they say, and concurrent calls from one
    event loop agree. A persistent store should also be tested across
    processes; this suite runs in one.
    """

    pytestmark = pytest.mark.asyncio

    async def test_is_a_decision_store(self, store: DecisionStore) -> None:
        """The store has every method of the ``DecisionStore`` protocol."""
        assert isinstance(store, DecisionStore)

    async def test_starts_empty(self, store: DecisionStore) -> None:
        """The fixture's store holds nothing."""
        assert await store.count() == 0
        assert await store.get(_key(1)) is None

    async def test_add_then_get(self, store: DecisionStore) -> None:
        """``add`` stores the entry and returns it; ``get`` returns it with its exact expiry."""
        expires_at = time.time() + HOUR
        added = await store.add(_key(1), b"decision", expires_at)
        assert added == Entry(b"decision", expires_at)  # expiries round-trip exactly
        got = await store.get(_key(1))
        assert got is not None
        assert got.value == b"decision"
        assert got.expires_at == expires_at

    async def test_entry_without_expiry(self, store: DecisionStore) -> None:
        """An entry added with ``expires_at=None`` is kept and returned with ``None``."""
        assert await store.add(_key(1), b"forever", None) == Entry(b"forever", None)
        assert await store.get(_key(1)) == Entry(b"forever", None)

    @pytest.mark.parametrize("far", [math.inf, 1e300, 1e17], ids=["inf", "1e300", "1e17"])
    async def test_an_expiry_past_the_stores_range_never_expires(
        self, store: DecisionStore, far: float
    ) -> None:
        """``inf`` means no expiry; a finite expiry past what the store can hold is clamped:
        the entry is kept (never an error, never an entry that vanishes)."""
        added = await store.add(_key(1), b"far", far)
        assert added.value == b"far"
        [entry] = await store.add_many([(_key(2), b"far too", far)])
        assert entry.value == b"far too"
        for key, value in ((_key(1), b"far"), (_key(2), b"far too")):
            got = await store.get(key)
            assert got is not None and got.value == value
            assert got.expires_at is None or got.expires_at > time.time() + 100 * 365 * 86400
        assert await store.renew(_key(1), far) is True
        got = await store.get(_key(1))
        assert got is not None and got.value == b"far"

    async def test_first_add_wins(self, store: DecisionStore) -> None:
        """A second ``add`` of a live key keeps the first entry, expiry included, and returns it."""
        expires_at = time.time() + HOUR
        first = await store.add(_key(1), b"first", expires_at)
        second = await store.add(_key(1), b"second", expires_at + 10)
        assert first.value == second.value == b"first"
        assert second.expires_at == expires_at
        got = await store.get(_key(1))
        assert got is not None and got.value == b"first"

    async def test_delete_then_add_replaces(self, store: DecisionStore) -> None:
        """``delete`` drops a live entry, so the next ``add`` stores its own (``mode="record"``);
        other keys keep theirs."""
        delete = _needs_delete(store)
        await store.add(_key(1), b"old", time.time() + HOUR)
        await store.add(_key(2), b"other", None)
        await delete(_key(1))
        assert await store.get(_key(1)) is None
        added = await store.add(_key(1), b"new", None)
        assert added == Entry(b"new", None)
        assert await store.get(_key(1)) == Entry(b"new", None)
        assert await store.get(_key(2)) == Entry(b"other", None)

    async def test_delete_of_a_missing_key_does_nothing(self, store: DecisionStore) -> None:
        """Deleting a key that holds nothing is not an error and drops nothing else."""
        delete = _needs_delete(store)
        await store.add(_key(2), b"kept", None)
        await delete(_key(1))
        await delete(_key(1))
        assert await store.get(_key(1)) is None
        assert await store.get(_key(2)) == Entry(b"kept", None)

    async def test_keys_are_distinct(self, store: DecisionStore) -> None:
        """Entries under different keys do not mix."""
        await store.add(_key(1), b"one", None)
        await store.add(_key(2), b"two", None)
        assert await store.get(_key(1)) == Entry(b"one", None)
        assert await store.get(_key(2)) == Entry(b"two", None)

    async def test_expired_entry_is_not_returned_and_is_replaced(
        self, store: DecisionStore
    ) -> None:
        """An entry added already expired is never returned, and the next ``add`` replaces it."""
        await store.add(_key(1), b"stale", time.time() - 1)
        assert await store.get(_key(1)) is None
        assert await store.get_many([_key(1)]) == [None]
        fresh = await store.add(_key(1), b"fresh", time.time() + HOUR)
        assert fresh.value == b"fresh"
        got = await store.get(_key(1))
        assert got is not None and got.value == b"fresh"

    async def test_entry_expires(self, store: DecisionStore) -> None:
        """An entry stops being returned once its expiry passes, and can then be replaced."""
        expires_at = time.time() + 0.5
        await store.add(_key(1), b"brief", expires_at)
        got = await store.get(_key(1))
        # A loaded machine may stall past the expiry before the get returns: only then
        # may it miss (the store's clock and this one are the same machine's).
        if got is None:
            assert time.time() >= expires_at
        else:
            assert got.value == b"brief"
        await asyncio.sleep(max(0.0, expires_at - time.time()) + 0.05)
        assert await store.get(_key(1)) is None
        replaced = await store.add(_key(1), b"next", time.time() + HOUR)
        assert replaced.value == b"next"

    async def test_renew_live_entry(self, store: DecisionStore) -> None:
        """``renew`` moves a live entry's expiry (to a time or to ``None``) and keeps its value."""
        await store.add(_key(1), b"v", time.time() + HOUR)
        later = time.time() + 2 * HOUR
        assert await store.renew(_key(1), later) is True
        got = await store.get(_key(1))
        assert got is not None
        assert got.value == b"v"
        assert got.expires_at == later
        assert await store.renew(_key(1), None) is True
        assert await store.get(_key(1)) == Entry(b"v", None)

    async def test_renew_into_the_past_expires(self, store: DecisionStore) -> None:
        """Renewing to a past time expires the entry, even one a cache tier has read."""
        await store.add(_key(1), b"v", time.time() + HOUR)
        await store.get(_key(1))  # a tier now holds a copy too
        assert await store.renew(_key(1), time.time() - 1) is True
        assert await store.get(_key(1)) is None

    async def test_renew_missing_or_expired(self, store: DecisionStore) -> None:
        """``renew`` returns ``False`` for a missing or expired key and does not revive it."""
        assert await store.renew(_key(1), time.time() + HOUR) is False
        await store.add(_key(2), b"stale", time.time() - 1)
        assert await store.renew(_key(2), time.time() + HOUR) is False
        assert await store.get(_key(2)) is None

    async def test_prune_keeps_live_entries(self, store: DecisionStore) -> None:
        """``prune`` drops the expired entries only."""
        now = time.time()
        for n in range(3):
            await store.add(_key(n), b"stale", now - 1)
        await store.add(_key(10), b"live", now + HOUR)
        await store.add(_key(11), b"forever", None)
        pruned = await store.prune()
        assert pruned >= 0
        assert await store.count() == 2
        assert await store.get_many([_key(10), _key(11), _key(0)]) == [
            Entry(b"live", now + HOUR),
            Entry(b"forever", None),
            None,
        ]

    async def test_count_and_clear(self, store: DecisionStore) -> None:
        """``count`` counts the entries; ``clear`` drops them all and the store stays usable."""
        for n in range(5):
            await store.add(_key(n), b"v", time.time() + HOUR)
        assert await store.count() == 5
        await store.clear()
        assert await store.count() == 0
        assert await store.get(_key(0)) is None
        assert await store.get_many([_key(1), _key(2)]) == [None, None]
        again = await store.add(_key(0), b"after", None)
        assert again.value == b"after"
        assert await store.count() == 1

    async def test_get_many_keeps_order(self, store: DecisionStore) -> None:
        """``get_many`` answers each key in the order asked, repeats and misses included."""
        await store.add(_key(1), b"one", None)
        await store.add(_key(3), b"three", None)
        got = await store.get_many([_key(3), _key(2), _key(1), _key(3)])
        assert got == [
            Entry(b"three", None),
            None,
            Entry(b"one", None),
            Entry(b"three", None),
        ]
        assert await store.get_many([]) == []

    async def test_add_many_returns_winners(self, store: DecisionStore) -> None:
        """``add_many`` is ``add`` for each item in order: an earlier entry or item wins."""
        expires_at = time.time() + HOUR
        await store.add(_key(1), b"first", expires_at)
        winners = await store.add_many(
            [
                (_key(1), b"late", expires_at),
                (_key(2), b"two", expires_at),
                (_key(2), b"two-again", expires_at),
                (_key(3), b"three", None),
            ]
        )
        assert [w.value for w in winners] == [b"first", b"two", b"two", b"three"]
        assert winners[3].expires_at is None
        assert await store.get_many([_key(1), _key(2), _key(3)]) == winners[:2] + winners[3:]
        assert await store.add_many([]) == []

    async def test_add_many_replaces_expired(self, store: DecisionStore) -> None:
        """``add_many`` replaces an expired entry, as ``add`` does."""
        await store.add(_key(1), b"stale", time.time() - 1)
        [winner] = await store.add_many([(_key(1), b"fresh", None)])
        assert winner == Entry(b"fresh", None)

    @pytest.mark.parametrize(
        "value",
        [b"", bytes(range(256)), bytes(range(256))[::-1] * 4, os.urandom(1024 * 1024)],
        ids=["empty", "all-bytes", "all-bytes-reversed", "1MiB"],
    )
    async def test_values_are_exact_bytes(self, store: DecisionStore, value: bytes) -> None:
        """Values come back as the exact ``bytes`` stored: empty, every byte value, 1 MiB."""
        k = bytes(range(240, 256))  # high bytes, and NUL-free keys elsewhere
        added = await store.add(k, value, None)
        assert added.value == value
        got = await store.get(k)
        assert got is not None and got.value == value
        [many] = await store.get_many([k])
        assert many is not None and many.value == value
        assert type(got.value) is bytes

    async def test_keys_are_exact_bytes(self, store: DecisionStore) -> None:
        """Keys are compared as bytes: NUL, 0xff and glob characters are not special."""
        keys = [bytes(16), b"\xff" * 16, bytes(range(16)), b"*?[]\\" + bytes(11)]
        for n, k in enumerate(keys):
            await store.add(k, str(n).encode(), None)
        assert [e.value if e else None for e in await store.get_many(keys)] == [
            b"0",
            b"1",
            b"2",
            b"3",
        ]
        assert await store.count() == len(keys)

    async def test_concurrent_adds_agree(self, store: DecisionStore) -> None:
        """Many tasks that look and, on a miss, add: every task sees the one stored winner."""
        keys = [_key(n) for n in range(20)]
        expires_at = time.time() + HOUR
        rng = random.Random(7)

        async def task(t: int) -> dict[bytes, bytes]:
            mine = rng.sample(keys, 10)
            seen: dict[bytes, bytes] = {}
            for k in mine:
                if rng.random() < 0.3:
                    await asyncio.sleep(0)
                # What the engine does: look, and on a miss compute and add.
                winner = await store.get(k)
                if winner is None:
                    winner = await store.add(k, f"task-{t}".encode(), expires_at)
                seen[k] = winner.value
            return seen

        results = await asyncio.gather(*(task(t) for t in range(200)))
        stored = dict(zip(keys, await store.get_many(keys), strict=True))
        answered: dict[bytes, set[bytes]] = {}
        for seen in results:
            for k, value in seen.items():
                answered.setdefault(k, set()).add(value)
        for k in keys:
            entry = stored[k]
            assert entry is not None
            assert answered[k] == {entry.value}
            assert entry.value.startswith(b"task-")

    async def test_concurrent_adds_without_looking(self, store: DecisionStore) -> None:
        """Many tasks that only ``add``, in different orders: all get the same winners."""
        keys = [_key(n) for n in range(50)]

        async def task(t: int) -> list[bytes]:
            order = random.Random(t).sample(keys, len(keys))
            winners = {}
            for k in order:
                winners[k] = (await store.add(k, f"task-{t}".encode(), None)).value
            return [winners[k] for k in keys]

        results = await asyncio.gather(*(task(t) for t in range(200)))
        stored = [e.value if e else None for e in await store.get_many(keys)]
        assert all(result == stored for result in results)
        assert await store.count() == len(keys)

    async def test_replace_swaps_the_entry_it_expects(self, store: DecisionStore) -> None:
        """``replace`` stores over the entry holding the expected value, even after a renew."""
        replace = _needs_replace(store)
        expires_at = time.time() + HOUR
        await store.add(_key(1), b"stale", expires_at)
        assert await store.renew(_key(1), expires_at + 60)  # a renewal keeps the value
        winner = await replace(_key(1), b"stale", b"fresh", expires_at + 120)
        assert winner == Entry(b"fresh", expires_at + 120)
        assert await store.get(_key(1)) == winner

    async def test_replace_keeps_a_newer_decision(self, store: DecisionStore) -> None:
        """A late refresher (expecting a value no longer there) never overwrites; it gets
        the entry that is there."""
        replace = _needs_replace(store)
        expires_at = time.time() + HOUR
        await store.add(_key(1), b"stale", expires_at)
        newer = await replace(_key(1), b"stale", b"newer", expires_at + 1)
        late = await replace(_key(1), b"stale", b"late", expires_at + 2)
        assert late == newer == Entry(b"newer", expires_at + 1)
        got = await store.get(_key(1))
        assert got is not None and got.value == b"newer"

    async def test_replace_stores_where_nothing_lives(self, store: DecisionStore) -> None:
        """``replace`` over no entry, or an expired one, stores the new entry."""
        replace = _needs_replace(store)
        assert await replace(_key(1), b"gone", b"new", None) == Entry(b"new", None)
        await store.add(_key(2), b"old", time.time() - 1)
        assert await replace(_key(2), b"other", b"new", None) == Entry(b"new", None)
        assert [e.value if e else None for e in await store.get_many([_key(1), _key(2)])] == [
            b"new",
            b"new",
        ]

    async def test_concurrent_replaces_one_wins(self, store: DecisionStore) -> None:
        """Refreshers racing on one stale entry: exactly one value is stored, and every
        refresher is told that one."""
        replace = _needs_replace(store)
        await store.add(_key(1), b"stale", None)
        winners = await asyncio.gather(
            *(replace(_key(1), b"stale", f"refresh-{n}".encode(), None) for n in range(20))
        )
        assert len({winner.value for winner in winners}) == 1
        got = await store.get(_key(1))
        assert got is not None and got == winners[0] and got.value.startswith(b"refresh-")

    async def test_aclose_twice(self, store: DecisionStore) -> None:
        """``aclose`` may be called twice (the fixture closes the store once more)."""
        await store.add(_key(1), b"v", None)
        await store.aclose()
        await store.aclose()
