"""The store contract: ``DecisionStore``, ``LeaseStore`` and ``Entry``.

A store maps 16-byte keys to encoded decisions with an optional expiry in Unix
seconds. Its ``add`` keeps an existing unexpired entry and returns it, so the
first decision stored wins across tasks, processes and machines.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import NamedTuple, Protocol, runtime_checkable

__all__ = ["DecisionStore", "Entry", "EntryScan", "Forgetting", "LeaseStore", "is_live"]


class Entry(NamedTuple):
    """One stored decision: the encoded value and when it expires (Unix seconds)."""

    value: bytes
    expires_at: float | None


def is_live(expires_at: float | None, now: float | None = None) -> bool:
    """Whether an entry with this expiry may still be returned."""
    return expires_at is None or expires_at > (time.time() if now is None else now)


@runtime_checkable
class DecisionStore(Protocol):
    """What the engine needs from a store.

    Every method is safe under concurrent use from one event loop; persistent
    stores are also safe across processes. Expired entries are never returned.

    A store may also have an ``enforces_timeouts`` attribute (optional, not a
    member of the protocol). ``True`` promises that every call ends, returning
    or raising, within bounds the store keeps itself (a ``RedisStore`` from
    ``from_url``: socket, connect and pool timeouts); the engine then does not
    time its calls with ``store_timeout``, which saves joining the deadline
    that calls share (``asyncache.engine._guard``; about a microsecond a call).
    A cache reads it once, when it starts using the store.

    ``async delete(key)`` is optional too (not a member, so that a store
    written before it stays a store): it drops the entry under a key, if any.
    The engine deletes corrupt entries with it when it is there, and
    ``mode="record"`` needs it to replace what a key holds (``add`` keeps the
    first decision). Every store of asyncache has it, and ``StoreContract``
    tests it where a store has it.

    ``async replace(key, expected, value, expires_at) -> Entry`` is optional
    likewise: a compare-and-set. It stores ``value`` if the entry under
    ``key`` still holds ``expected`` (or there is no live entry) and returns
    what is stored afterwards: the new entry, or the one another writer put
    there meanwhile. The refresh of a stale entry (``stale_while_revalidate``,
    ``stale_if_error``) stores through it, so a late refresher never
    overwrites a newer decision; without it the engine deletes and adds.
    Every store of asyncache has it.

    Stores keep an entry until its ``expires_at``, which for a cache with
    stale windows is the end of the last window (stale-until); the envelope
    says where its ttl ended (fresh-until), and the engine tells fresh from
    stale (``asyncache.engine._freshness``).
    """

    async def get(self, key: bytes) -> Entry | None:
        """Return the live entry under ``key``, or ``None``."""
        ...

    async def get_many(self, keys: Sequence[bytes]) -> list[Entry | None]:
        """Return the live entry (or ``None``) for each key, in order."""
        ...

    async def add(self, key: bytes, value: bytes, expires_at: float | None) -> Entry:
        """Store ``value`` unless a live entry exists; return whichever is stored."""
        ...

    async def add_many(self, items: Sequence[tuple[bytes, bytes, float | None]]) -> list[Entry]:
        """``add`` for each item, in order; return the winners."""
        ...

    async def renew(self, key: bytes, expires_at: float | None) -> bool:
        """Move a live entry's expiry; ``False`` when there is none."""
        ...

    async def prune(self) -> int:
        """Drop expired entries; return how many were dropped (when known)."""
        ...

    async def count(self) -> int:
        """How many entries the store holds (expired ones may be counted)."""
        ...

    async def clear(self) -> None:
        """Drop every entry this store owns."""
        ...

    async def aclose(self) -> None:
        """Release connections and background work; safe to call twice."""
        ...


@runtime_checkable
class LeaseStore(Protocol):
    """Optional capability: short cross-process leases on keys being computed.

    A lease says "this process is computing that key"; others wait for the
    decision instead of running the model again.
    """

    async def acquire_lease(self, key: bytes, token: bytes, ttl: float) -> bool:
        """Take the lease on ``key`` for ``ttl`` seconds unless another holds it."""
        ...

    async def release_lease(self, key: bytes, token: bytes) -> None:
        """Drop the lease if ``token`` still holds it."""
        ...

    async def wait_for_entry(self, key: bytes, timeout: float) -> Entry | None:  # noqa: ASYNC109
        """Wait up to ``timeout`` seconds for an entry under ``key`` to appear."""
        ...


@runtime_checkable
class EntryScan(Protocol):
    """Optional capability: walk every live entry (``asyncache copy`` and ``export``).

    Not a member of ``DecisionStore``, so that a store written before it
    stays a store; every store of asyncache has it (memory, tiered, SQLite,
    Redis, Redis Cluster), and ``asyncache.testing.EntryScanContract`` tests it.
    """

    def entries(self, *, batch_size: int = 500) -> AsyncIterator[list[tuple[bytes, Entry]]]:
        """Yield ``(key, entry)`` pairs of the live entries, ``batch_size`` at most at a time.

        Each key is yielded once, with the entry as it was when its batch was
        read; an entry added or dropped during the walk may or may not be seen.
        Expired entries are never yielded. For tools, not hot paths: O(entries).
        """
        ...


@runtime_checkable
class Forgetting(Protocol):
    """Optional capability: decisions indexed by label, and dropped by label (``cache.forget``).

    A store with it reads ``asyncache.tags.tagging_of(key)`` in ``add``,
    ``add_many`` and ``replace``: when the door tagged the key, it stores the
    decision with the key indexed under each of its labels (``Tagging.labels``),
    atomically with the write where it can, and refuses the write (noting the
    key with ``Tagging.refuse`` and returning the candidate unstored) when a
    forget of any of the labels came at or after ``Tagging.since``. Indexes
    expire with their decisions. Every store of asyncache has it;
    ``asyncache.testing.ForgetContract`` tests it.
    """

    async def forget(
        self,
        labels: Sequence[bytes],
        *,
        dry_run: bool = False,
        progress: Callable[[int, int], object] | None = None,
    ) -> int:
        """Drop every live decision indexed under any of ``labels``; return how many.

        Afterwards, a write whose computation began before the call returned is
        refused (a tombstone per label, ``asyncache.tags``), and memory tiers of
        every process in front of the store drop their copies. ``dry_run``
        counts and drops nothing (and leaves no tombstone). ``progress(done,
        total)`` is called as the work goes (units are the store's: keys or nodes).
        """
        ...
