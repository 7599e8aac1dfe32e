"""TieredStore: a MemoryStore in front of a shared store.

Hits on hot keys are answered from this process's memory without a thread hop
or a network round trip; the shared store (L2) stays the one place where the
first decision wins. An L2 that announces what it drops (``RedisStore``) has
every tier in front of it drop its copies too.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, NamedTuple, Self, cast

from ..tags import DECISION_TAGS, tagging_of
from .memory import MemoryStore
from .protocol import DecisionStore, Entry

__all__ = ["TieredStore"]


def _refused(key: bytes) -> bool:
    """Whether L2 refused to store ``key``'s decision (a forget came after it began)."""
    if DECISION_TAGS.get() is None:
        return False
    found = tagging_of(key)
    return found is not None and key in found.refused


class _Copy(NamedTuple):
    """What L1 holds: L2's entry, with the expiry L1 goes by beside it.

    MemoryStore reads only ``value`` and ``expires_at``, so this passes for an
    ``Entry`` there while ``entry`` keeps L2's real expiry for callers.
    """

    value: bytes
    expires_at: float | None
    entry: Entry


class TieredStore:
    """A memory L1 read through in front of any shared store (L2).

    A get that misses L1 reads L2 and copies the entry into L1 for at most
    ``l1_ttl`` seconds (never past L2's expiry); the entry returned carries
    L2's real expiry. ``add`` always goes to L2, which decides the winner, and
    the winner is copied into L1. ``renew``, ``delete``, ``prune`` and
    ``clear`` go to both tiers.

    Another process's ``clear`` or ``delete`` drops entries from L2, and a
    later miss may store a different decision there. An L2 with
    ``subscribe_invalidations(callback)`` (``RedisStore`` over pub/sub,
    ``SQLiteStore`` through its file's drop log) announces what it drops, to
    the tiers of every process: this one drops its copies as soon as the
    announcement arrives, and does not copy what an L2 read returned when an
    announcement came while the read was in flight. Over any other L2 a copy
    outlives the entry it copied by up to ``l1_ttl`` seconds, and may in that
    time differ from what L2 now holds. Another process's ``renew`` reaches
    L1 when the copy expires.

    Args:
        l1: the memory tier, owned by this store from now on.
        l2: the shared tier (SQLiteStore, RedisStore...), owned likewise.
        l1_ttl: most seconds an entry stays in L1 after it was read from L2
            or added; ``None`` to keep it for as long as L2 does.
    """

    def __init__(self, l1: MemoryStore, l2: DecisionStore, *, l1_ttl: float | None = 60.0) -> None:
        if l1_ttl is not None and not l1_ttl > 0:
            raise ValueError(f"l1_ttl must be > 0 seconds or None, got {l1_ttl!r}")
        self.l1 = l1
        self.l2 = l2
        self.l1_ttl = l1_ttl
        # L1 holds only _Copy tuples (see _keep); typed so once, not cast per hit.
        self._l1_get = cast(Callable[[bytes], _Copy | None], l1.get_now)
        self.l1_hits = 0
        self.l2_hits = 0
        self.misses = 0
        self.invalidations = 0
        """Announcements heard (and local clears and deletes): an L2 read
        that spans one is not copied into L1."""
        subscribe = getattr(l2, "subscribe_invalidations", None)
        self._unsubscribe: Callable[[], object] | None = (
            subscribe(self._invalidated) if callable(subscribe) else None
        )

    def __repr__(self) -> str:
        return f"TieredStore({self.l1!r}, {self.l2!r}, l1_ttl={self.l1_ttl!r})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def peek(self, key: bytes) -> Entry | None:
        """L1's entry without a coroutine, or ``None``: then ``get`` asks L2.

        The engine's synchronous fast path, so that a repeated hit through a
        tier costs what a memory hit costs.
        """
        copy = self._l1_get(key)
        if copy is None:
            return None
        self.l1_hits += 1
        return copy.entry

    async def get(self, key: bytes) -> Entry | None:
        """Return the entry from L1, else from L2 (copying it into L1), else ``None``."""
        copy = self._l1_get(key)
        if copy is not None:
            self.l1_hits += 1
            return copy.entry
        seen = self.invalidations
        entry = await self.l2.get(key)
        if entry is None:
            self.misses += 1
            return None
        self.l2_hits += 1
        if self.invalidations == seen:
            self._keep(key, entry, time.time())
        return entry

    async def get_many(self, keys: Sequence[bytes]) -> list[Entry | None]:
        """``get`` for each key, in order; L1's misses are one ``L2.get_many``."""
        results: list[Entry | None] = []
        missing: list[int] = []
        for i, key in enumerate(keys):
            copy = self._l1_get(key)
            if copy is None:
                missing.append(i)
                results.append(None)
            else:
                results.append(copy.entry)
        self.l1_hits += len(keys) - len(missing)
        if not missing:
            return results
        seen = self.invalidations
        entries = await self.l2.get_many([keys[i] for i in missing])
        now = time.time()
        keep = self.invalidations == seen
        for i, entry in zip(missing, entries, strict=True):
            if entry is None:
                self.misses += 1
            else:
                self.l2_hits += 1
                if keep:
                    self._keep(keys[i], entry, now)
                results[i] = entry
        return results

    async def add(self, key: bytes, value: bytes, expires_at: float | None) -> Entry:
        """Add to L2, which decides the winner; copy the winner into L1."""
        seen = self.invalidations
        winner = await self.l2.add(key, value, expires_at)
        if self.invalidations == seen and not _refused(key):
            self._keep(key, winner, time.time())
        return winner

    async def add_many(self, items: Sequence[tuple[bytes, bytes, float | None]]) -> list[Entry]:
        """``L2.add_many``; copy the winners into L1."""
        seen = self.invalidations
        winners = await self.l2.add_many(items)
        if self.invalidations == seen:
            now = time.time()
            for (key, _, _), winner in zip(items, winners, strict=True):
                if not _refused(key):
                    self._keep(key, winner, now)
        return winners

    async def replace(
        self, key: bytes, expected: bytes, value: bytes, expires_at: float | None
    ) -> Entry:
        """Compare-and-set in L2 (which decides, for every process); copy the winner into L1.

        An L2 without ``replace`` gets a delete and an add, where a writer in between wins.
        """
        seen = self.invalidations
        replace = getattr(self.l2, "replace", None)
        if replace is not None:
            winner: Entry = await replace(key, expected, value, expires_at)
        else:
            delete = getattr(self.l2, "delete", None)
            if delete is not None:
                await delete(key)
            winner = await self.l2.add(key, value, expires_at)
        self.l1.delete_now(key)
        if self.invalidations == seen and not _refused(key):
            self._keep(key, winner, time.time())
        return winner

    async def forget(
        self,
        labels: Sequence[bytes],
        *,
        dry_run: bool = False,
        progress: Callable[[int, int], object] | None = None,
    ) -> int:
        """Forget in L2, and drop every L1 copy, here and (through L2's announcement) elsewhere.

        L1 keeps no labels: it drops all its copies, which later reads copy
        again from L2. An L2 that announces drops (Redis, SQLite) has every
        other process's tier drop its copies too, as a ``clear`` does.

        Raises:
            TypeError: L2 cannot forget (it has no ``forget``).
        """
        forget = getattr(self.l2, "forget", None)
        if not callable(forget):
            raise TypeError(
                f"{type(self.l2).__name__} cannot forget decisions by tag or scope "
                "(it has no forget(); see asyncache.stores.protocol.Forgetting)"
            )
        if dry_run:
            return int(await forget(labels, dry_run=True, progress=progress))
        self.invalidations += 1
        await self.l1.clear()
        dropped = int(await forget(labels, progress=progress))
        # Reads in flight during the forget may have copied what it dropped.
        self.invalidations += 1
        await self.l1.clear()
        return dropped

    async def renew(self, key: bytes, expires_at: float | None) -> bool:
        """Renew in L2, and move (or drop) the L1 copy to match."""
        renewed = await self.l2.renew(key, expires_at)
        copy = self._l1_get(key)
        if copy is not None:
            # Drop first: an expiry moved into the past must not leave the old copy live.
            self.l1.delete_now(key)
            if renewed:
                self._keep(key, Entry(copy.entry.value, expires_at), time.time())
        return renewed

    async def delete(self, key: bytes) -> None:
        """Drop ``key`` from both tiers (from L1 only when L2 cannot delete)."""
        self.invalidations += 1
        self.l1.delete_now(key)
        delete = getattr(self.l2, "delete", None)
        if delete is not None:
            await delete(key)
            self.invalidations += 1
            self.l1.delete_now(key)

    async def expired_at(self, key: bytes) -> float | None:
        """When L2's entry under ``key`` expired, if L2 can tell (``SQLiteStore`` can)."""
        expired_at = getattr(self.l2, "expired_at", None)
        return None if expired_at is None else await expired_at(key)

    def pause_upkeep(self) -> None:
        """Pause L2's own background writes, when it has any (replay)."""
        pause = getattr(self.l2, "pause_upkeep", None)
        if pause is not None:
            pause()

    async def prune(self) -> int:
        """Prune both tiers; return how many entries L2 dropped."""
        await self.l1.prune()
        return await self.l2.prune()

    async def count(self) -> int:
        """How many entries L2 holds (L1 holds copies of some of them)."""
        return await self.l2.count()

    async def clear(self) -> None:
        """Clear both tiers; other processes' tiers drop their copies when L2 announces it.

        Over an L2 that does not announce, their copies expire within ``l1_ttl``.
        """
        self.invalidations += 1
        await self.l1.clear()
        await self.l2.clear()
        # Reads in flight during the clear may have copied what it dropped.
        self.invalidations += 1
        await self.l1.clear()

    async def aclose(self) -> None:
        """Stop hearing L2's announcements and close both tiers; safe to call twice."""
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe()
        await self.l1.aclose()
        await self.l2.aclose()

    async def entries(self, *, batch_size: int = 500) -> AsyncIterator[list[tuple[bytes, Entry]]]:
        """L2's entries (it holds every one; L1 only copies of some).

        Raises:
            TypeError: L2 cannot walk its entries (it has no ``entries``).
        """
        walk = getattr(self.l2, "entries", None)
        if not callable(walk):
            raise TypeError(f"{type(self.l2).__name__} cannot walk its entries")
        async for batch in walk(batch_size=batch_size):
            yield batch

    async def describe(self) -> dict[str, Any]:
        """What the tiers hold, for ``asyncache stats``: L2's figures, with L1's beside them.

        L2 holds every entry (L1 only copies of some), so the figures at the
        top level are L2's (``entries``, ``stored_bytes``...; see its
        ``describe``), with ``kind`` ``"tiered"`` and L2's own kind as
        ``l2_kind``; ``l1`` is L1's description and ``l1_ttl`` the most
        seconds a copy is kept. An L2 without ``describe`` gives ``entries`` only.
        """
        describe = getattr(self.l2, "describe", None)
        if callable(describe):
            shared: dict[str, Any] = dict(await describe())
        else:
            shared = {"kind": type(self.l2).__name__, "entries": await self.l2.count()}
        return {
            **shared,
            "kind": "tiered",
            "l2_kind": shared.get("kind"),
            "l1_ttl": self.l1_ttl,
            "l1": await self.l1.describe(),
        }

    def stats(self) -> dict[str, int]:
        """Hits per tier and misses, plus L2's own counters when it has them."""
        stats = {
            "l1_hits": self.l1_hits,
            "l2_hits": self.l2_hits,
            "misses": self.misses,
            "invalidations": self.invalidations,
        }
        l2_stats = getattr(self.l2, "stats", None)
        if callable(l2_stats):
            for name, value in l2_stats().items():
                stats.setdefault(f"l2_{name}", value)
        return stats

    async def _invalidated(self, key: bytes | None) -> None:
        """L2 announced that ``key`` (``None``: every entry) was dropped: drop the copies."""
        self.invalidations += 1
        if key is None:
            await self.l1.clear()
        else:
            self.l1.delete_now(key)

    def _keep(self, key: bytes, entry: Entry, now: float) -> None:
        """Copy ``entry`` into L1 until L2's expiry or ``l1_ttl``, whichever comes first."""
        expires_at = entry.expires_at
        if self.l1_ttl is not None:
            cap = now + self.l1_ttl
            if expires_at is None or expires_at > cap:
                expires_at = cap
        if expires_at is not None and expires_at <= now:
            return
        self.l1.put_now(key, cast(Entry, _Copy(entry.value, expires_at, entry)))
