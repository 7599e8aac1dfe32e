"""``LeaseStoreContract``: the tests of the optional ``LeaseStore`` methods."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable
from typing import Protocol, TypeVar

import pytest

from ..stores.protocol import DecisionStore, Entry, LeaseStore

__all__ = ["LeaseStoreContract"]

T = TypeVar("T")

# What "at once" and "never" mean below. A wait the store should end at once is
# given LONG and must end within GUARD; the gap between them is what is tested,
# not how fast the store is.
LONG = 3600.0
GUARD = 30.0
# A lease that has to expire during a test, and how long to sleep past it.
BRIEF = 0.05
PAST_BRIEF = 0.15


class _LeasingStore(DecisionStore, LeaseStore, Protocol):
    """A store with both protocols: the lease tests add entries too."""


def _key(n: int) -> bytes:
    return n.to_bytes(16, "big")


def _bounded(call: Awaitable[T]) -> Awaitable[T]:
    """``call``, failing the test instead of hanging when it never returns."""
    return asyncio.wait_for(call, GUARD)


@contextlib.asynccontextmanager
async def _waiting(store: _LeasingStore, key: bytes) -> AsyncIterator[asyncio.Task[Entry | None]]:
    """A task in ``wait_for_entry(key, LONG)``, cancelled on the way out if still running."""
    waiter = asyncio.create_task(store.wait_for_entry(key, LONG))
    try:
        yield waiter
    finally:
        if not waiter.done():
            waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiter


class LeaseStoreContract:
    """The ``LeaseStore`` contract, for stores that implement leases.

    Use it as ``StoreContract`` is used, usually together with it
    (``class TestMyStore(StoreContract, LeaseStoreContract)``): the subclass's
    ``store`` fixture yields a fresh, empty store that implements both
    ``DecisionStore`` and ``LeaseStore``, and closes it afterwards.

    The rules, as the engine's leases rely on them: a lease on a key is held by
    one token at a time and taken atomically; only its holder releases it; it
    ends by itself after its ``ttl``; it is not an entry. ``wait_for_entry``
    returns the live entry as soon as there is one, and ``None`` at its
    timeout or as soon as there is neither an entry nor a live lease (nobody is
    computing the key). The holder's own ``acquire_lease`` renews its lease for
    ``ttl`` from now: the engine keeps a short lease alive that way while the
    model runs. Three tests let a lease of 0.05 s expire.
    """

    pytestmark = pytest.mark.asyncio

    async def test_is_a_lease_store(self, store: _LeasingStore) -> None:
        """The store has every method of the ``LeaseStore`` protocol."""
        assert isinstance(store, LeaseStore)

    async def test_a_lease_is_exclusive(self, store: _LeasingStore) -> None:
        """While one token holds a key's lease, another cannot take it."""
        assert await store.acquire_lease(_key(1), b"a", 60) is True
        assert await store.acquire_lease(_key(1), b"b", 60) is False

    async def test_only_the_holder_releases(self, store: _LeasingStore) -> None:
        """``release_lease`` with another token leaves the lease held; the holder's frees it."""
        assert await store.acquire_lease(_key(1), b"a", 60) is True
        await store.release_lease(_key(1), b"b")
        assert await store.acquire_lease(_key(1), b"b", 60) is False
        await store.release_lease(_key(1), b"a")
        assert await store.acquire_lease(_key(1), b"b", 60) is True

    async def test_releasing_a_free_lease_does_nothing(self, store: _LeasingStore) -> None:
        """Releasing a lease nobody holds neither fails nor blocks the next acquire."""
        await store.release_lease(_key(1), b"a")
        assert await store.acquire_lease(_key(1), b"a", 60) is True

    async def test_leases_are_per_key(self, store: _LeasingStore) -> None:
        """A lease on one key does not hold another key."""
        assert await store.acquire_lease(_key(1), b"a", 60) is True
        assert await store.acquire_lease(_key(2), b"b", 60) is True

    async def test_one_of_many_concurrent_acquires_wins(self, store: _LeasingStore) -> None:
        """Taking a lease is atomic: of many concurrent tokens, exactly one gets it."""
        taken = await asyncio.gather(
            *(store.acquire_lease(_key(1), f"token-{n}".encode(), 60) for n in range(20))
        )
        assert taken.count(True) == 1
        assert taken.count(False) == 19

    async def test_an_expired_lease_is_taken_over(self, store: _LeasingStore) -> None:
        """A lease whose ttl passed (its holder died) can be taken by another token."""
        assert await store.acquire_lease(_key(1), b"a", BRIEF) is True
        await asyncio.sleep(PAST_BRIEF)
        assert await store.acquire_lease(_key(1), b"b", 60) is True

    async def test_the_holder_renews_its_lease(self, store: _LeasingStore) -> None:
        """The holder's own acquire extends its lease: it outlives its first ttl."""
        assert await store.acquire_lease(_key(1), b"a", BRIEF) is True
        assert await store.acquire_lease(_key(1), b"a", 60) is True
        await asyncio.sleep(PAST_BRIEF)
        assert await store.acquire_lease(_key(1), b"b", 60) is False
        assert await store.acquire_lease(_key(1), b"a", 60) is True

    async def test_a_lease_is_not_an_entry(self, store: _LeasingStore) -> None:
        """A lease is neither returned nor counted as an entry, and does not block ``add``."""
        assert await store.acquire_lease(_key(1), b"a", 60) is True
        assert await store.get(_key(1)) is None
        assert await store.get_many([_key(1)]) == [None]
        assert await store.count() == 0
        assert await store.add(_key(1), b"decided", None) == Entry(b"decided", None)
        assert await store.count() == 1

    async def test_wait_returns_an_existing_entry(self, store: _LeasingStore) -> None:
        """``wait_for_entry`` on a key with a live entry returns it at once."""
        await store.add(_key(1), b"there", None)
        assert await _bounded(store.wait_for_entry(_key(1), LONG)) == Entry(b"there", None)

    async def test_wait_without_lease_or_entry_returns_none(self, store: _LeasingStore) -> None:
        """With neither an entry nor a lease nobody is computing the key: ``None`` at once."""
        assert await _bounded(store.wait_for_entry(_key(1), LONG)) is None

    async def test_wait_ignores_an_expired_entry(self, store: _LeasingStore) -> None:
        """An expired entry is not returned by ``wait_for_entry`` either."""
        await store.add(_key(1), b"stale", time.time() - 1)
        assert await _bounded(store.wait_for_entry(_key(1), LONG)) is None
        assert await store.acquire_lease(_key(1), b"a", 60) is True
        assert await _bounded(store.wait_for_entry(_key(1), 0.1)) is None

    async def test_wait_returns_the_holders_entry(self, store: _LeasingStore) -> None:
        """A waiter gets the entry the lease's holder adds before releasing it."""
        assert await store.acquire_lease(_key(1), b"a", 60) is True
        async with _waiting(store, _key(1)) as waiter:
            await asyncio.sleep(0.05)
            assert not waiter.done()  # the lease is held and there is no entry yet
            await store.add(_key(1), b"decided", None)
            await store.release_lease(_key(1), b"a")
            assert await _bounded(waiter) == Entry(b"decided", None)

    async def test_wait_ends_when_the_lease_is_released(self, store: _LeasingStore) -> None:
        """A lease released without an entry ends the wait with ``None``."""
        assert await store.acquire_lease(_key(1), b"a", 60) is True
        async with _waiting(store, _key(1)) as waiter:
            await asyncio.sleep(0.05)
            assert not waiter.done()
            await store.release_lease(_key(1), b"a")
            assert await _bounded(waiter) is None

    async def test_wait_times_out_while_the_lease_is_held(self, store: _LeasingStore) -> None:
        """While the lease is held and no entry appears, the wait ends at its timeout."""
        assert await store.acquire_lease(_key(1), b"a", 60) is True
        assert await _bounded(store.wait_for_entry(_key(1), 0.1)) is None
        assert await store.acquire_lease(_key(1), b"b", 60) is False  # still held

    async def test_wait_ends_when_the_lease_expires(self, store: _LeasingStore) -> None:
        """A lease that expires (its holder died) ends the wait, and can be taken over."""
        assert await store.acquire_lease(_key(1), b"a", BRIEF) is True
        assert await _bounded(store.wait_for_entry(_key(1), LONG)) is None
        assert await store.acquire_lease(_key(1), b"b", 60) is True
