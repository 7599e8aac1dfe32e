"""SQLiteStore's expiries at the edge of the range: ``inf``, NaN, and numbers SQLite cannot bind.

``inf`` means no expiry, and is kept as such (``None``), so the entry counts and
is evicted as one without expiry. A number past SQLite's 64-bit integers is
kept as a float (one past the floats is ``inf``). Never an error, never an
entry that vanishes.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from asyncache.stores import Entry
from asyncache.stores.sqlite import SQLiteStore

from ..support import key

CENTURY = 100 * 365 * 86400.0


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(tmp_path / "decisions.db", prune_interval=None) as opened:
        yield opened


@pytest.mark.parametrize(
    ("far", "kept"),
    [
        (math.inf, None),
        (math.nan, None),
        (10**400, None),  # past the floats
        (2**63, float(2**63)),  # past SQLite's integers
        (10**20, 1e20),
        (1e300, 1e300),  # a float SQLite holds as it is
    ],
    ids=["inf", "nan", "past-floats", "2**63", "1e20", "1e300"],
)
async def test_a_far_expiry_is_kept(store: SQLiteStore, far: float, kept: float | None) -> None:
    assert await store.add(key(1), b"far", far) == Entry(b"far", kept)
    assert await store.add_many([(key(2), b"far too", far)]) == [Entry(b"far too", kept)]
    assert await store.get(key(1)) == Entry(b"far", kept)
    assert await store.get_many([key(2)]) == [Entry(b"far too", kept)]
    assert await store.renew(key(1), far) is True
    assert await store.get(key(1)) == Entry(b"far", kept)
    # Not expired, not pruned, and the first add stays the winner.
    assert await store.prune() == 0
    assert (await store.add(key(1), b"second", time.time() + 60)).value == b"far"


async def test_inf_counts_as_no_expiry(store: SQLiteStore) -> None:
    await store.add(key(1), b"forever", math.inf)
    await store.add(key(2), b"soon", time.time() + 60)
    facts = await store.describe()
    assert facts["without_expiry"] == 1
    assert facts["last_expiry"] < time.time() + CENTURY


async def test_inf_is_evicted_with_the_entries_without_expiry(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "bounded.db", max_entries=2, prune_interval=None) as store:
        await store.add(key(1), b"forever", math.inf)
        await store.add(key(2), b"forever too", None)
        await store.add(key(3), b"an hour", time.time() + 3600)
        await store.prune()
        # Soonest-expiring first: the entry with an expiry goes, not the one with inf.
        present = await store.get_many([key(1), key(2), key(3)])
        assert [entry is not None for entry in present] == [True, True, False]


async def test_one_unbindable_expiry_does_not_fail_the_adds_gathered_with_it(
    store: SQLiteStore,
) -> None:
    later = time.time() + 60
    added = await asyncio.gather(
        store.add(key(1), b"one", later),
        store.add(key(2), b"two", 10**30),
        store.add(key(3), b"three", None),
    )
    assert [entry.value for entry in added] == [b"one", b"two", b"three"]
    assert added[1].expires_at == 1e30
