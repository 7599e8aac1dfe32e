"""``EntryScanContract``: the tests of the optional ``EntryScan.entries`` walk."""

from __future__ import annotations

import asyncio
import time

import pytest

from ..stores.protocol import DecisionStore, Entry, EntryScan, LeaseStore

__all__ = ["EntryScanContract"]

HOUR = 3600.0


def _key(n: int) -> bytes:
    return n.to_bytes(16, "big")


async def _walk(store: DecisionStore, batch_size: int = 500) -> list[list[tuple[bytes, Entry]]]:
    assert isinstance(store, EntryScan)
    return [batch async for batch in store.entries(batch_size=batch_size)]


class EntryScanContract:
    """What ``asyncache copy`` and ``export`` rely on: every live entry, once, exactly.

    Subclass it next to ``StoreContract``, with the same ``store`` fixture.
    """

    pytestmark = pytest.mark.asyncio

    async def test_is_an_entry_scan(self, store: DecisionStore) -> None:
        assert isinstance(store, EntryScan)

    async def test_an_empty_store_yields_nothing(self, store: DecisionStore) -> None:
        assert await _walk(store) == []

    async def test_every_live_entry_once_with_its_value_and_expiry(
        self, store: DecisionStore
    ) -> None:
        """Across batches, each key once; values are exact bytes, expiries exact floats."""
        expires_at = time.time() + HOUR
        items = [
            (_key(n), bytes([n]) * n + b"\x00\xff", None if n % 3 == 0 else expires_at + n)
            for n in range(1, 24)
        ]
        await store.add_many(items)
        batches = await _walk(store, batch_size=5)
        assert all(0 < len(batch) <= 5 for batch in batches)
        walked = [pair for batch in batches for pair in batch]
        assert len(walked) == len(items)
        assert dict(walked) == {key: Entry(value, expiry) for key, value, expiry in items}

    async def test_expired_entries_are_not_yielded(self, store: DecisionStore) -> None:
        await store.add(_key(1), b"short", time.time() + 0.2)
        await store.add(_key(2), b"long", time.time() + HOUR)
        await asyncio.sleep(0.4)
        walked = [key for batch in await _walk(store) for key, _ in batch]
        assert walked == [_key(2)]

    async def test_leases_are_not_entries(self, store: DecisionStore) -> None:
        """A store with leases walks only its decisions (and so does one without)."""
        await store.add(_key(1), b"decision", None)
        if isinstance(store, LeaseStore):
            assert await store.acquire_lease(_key(2), b"token", 30.0)
        walked = [pair for batch in await _walk(store) for pair in batch]
        assert walked == [(_key(1), Entry(b"decision", None))]
