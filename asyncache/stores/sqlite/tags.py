"""SQLiteStore's tag index and tombstones: what ``forget`` drops, and what it refuses after.

Two tables, created on first use (``CREATE TABLE IF NOT EXISTS``, as the drop
log is), so files written before them gain them without a schema version:

- ``asyncache_tags``: one row per (label, key) of a tagged decision, with the
  decision's expiry; ``prune`` deletes the rows of expired decisions.
- ``asyncache_forgotten``: one row per forgotten label, with the time up to
  which writes that began earlier are refused (``asyncache.tags``).

No statement here needs a transaction of its own. A tagged write indexes its
key first, then adds the entry in one statement that adds nothing when a
tombstone of its labels covers its start. A forget writes the tombstones
first, then deletes the indexed entries and the index rows. Whatever the
interleaving, an entry is either indexed before the forget deletes (and goes)
or added after the tombstone (and is refused). A refused write may leave
index rows behind: they point at no entry (or at one with the same inputs,
so the same tags), and expire with the expiry they were written with.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from ...tags import MARGIN, TOMBSTONE_SECONDS
from ..protocol import Entry
from .sql import (
    FOLLOW_TAGS,
    FORGOTTEN_OLD,
    INDEX_KEY,
    PRUNE_TAGS,
    TAG_TABLES,
    TOMBSTONE,
    Execute,
    add_unless_forgotten,
    forget_entries,
    forget_index,
    live_tagged,
)

__all__ = ["TagIndex"]

# Labels bound per statement: far under SQLITE_MAX_VARIABLE_NUMBER.
_LABELS_CHUNK = 500


class TagIndex:
    """The tag index of one SQLiteStore, on its write connection."""

    def __init__(self, execute: Execute, read: Execute) -> None:
        self._execute = execute
        self._read = read
        self._created = False

    async def _create(self) -> None:
        if not self._created:
            for statement in TAG_TABLES:
                await self._execute(statement, ())
            self._created = True

    async def add(
        self,
        key: bytes,
        value: bytes,
        expires_at: float | None,
        labels: Sequence[bytes],
        since: float,
    ) -> Entry | None:
        """Index ``key`` under ``labels``, then add its entry unless a tombstone refuses it.

        Returns the winner, or ``None`` when refused (nothing was stored).
        """
        await self._create()
        for label in labels:
            await self._execute(INDEX_KEY, (label, key, expires_at))
        rows = await self._execute(
            add_unless_forgotten(len(labels)), (time.time(), key, value, expires_at, since, *labels)
        )
        if not rows:
            return None
        stored, stored_expiry = rows[0]
        return Entry(stored, None if stored_expiry is None else float(stored_expiry))

    async def forget(
        self,
        labels: Sequence[bytes],
        *,
        dry_run: bool,
        progress: Callable[[int, int], object] | None,
    ) -> int:
        """Tombstones first, then the indexed entries and the index rows; how many went."""
        await self._create()
        now = time.time()
        dropped = 0
        chunks = [labels[i : i + _LABELS_CHUNK] for i in range(0, len(labels), _LABELS_CHUNK)]
        for done, chunk in enumerate(chunks, 1):
            marks = len(chunk)
            if dry_run:
                rows = await self._read(live_tagged(marks), (now, *chunk))
                dropped += int(rows[0][0])
            else:
                for label in chunk:
                    await self._execute(TOMBSTONE, (label, now + MARGIN))
                rows = await self._execute(forget_entries(marks), (now, *chunk))
                dropped += sum(
                    1 for (expires_at,) in rows if expires_at is None or expires_at > now
                )
                await self._execute(forget_index(marks), (0, *chunk))
            if progress is not None:
                progress(done, len(chunks))
        return dropped

    async def follow(self, key: bytes, expires_at: float | None) -> None:
        """A renewed or refreshed decision's index rows take its new expiry (if it has rows)."""
        if await self._exists():
            await self._execute(FOLLOW_TAGS, (key, expires_at))

    async def _exists(self) -> bool:
        """Whether the file has the tag tables (this store, or another, made them)."""
        if not self._created:
            rows = await self._read(
                "SELECT count(*) FROM sqlite_master WHERE name = 'asyncache_tags'", ()
            )
            if not rows[0][0]:
                return False
            await self._create()  # the indexes of this asyncache too
        return True

    async def prune(self, now: float) -> None:
        """Drop the index rows of expired decisions and the tombstones past their keeping."""
        if not await self._exists():
            return
        await self._execute(PRUNE_TAGS, (now,))
        await self._execute(FORGOTTEN_OLD, (now - TOMBSTONE_SECONDS,))

    async def clear(self) -> None:
        """Drop every index row (``clear``); tombstones stay, for writes still in flight."""
        await self._create()
        await self._execute("DELETE FROM asyncache_tags", ())
