"""RedisStore's writes: ``add`` and ``add_many`` (one ``SET NX GET`` each), and who won.

Expiries go through ``layout.expiry`` first: ``inf`` is no expiry, and an
expiry past Redis's range is clamped to ``MAX_EXPIRES_AT``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ...stores.protocol import Entry
from .layout import EXPIRES, HEADER, NO_EXPIRY_HEADER, expiry, pack, pxat, unpack
from .loops import Bound, Command

__all__ = ["Writes"]


class Writes:
    """The write path of one RedisStore, with its counters.

    Args:
        prefix: the store's prefix.
    """

    def __init__(self, prefix: bytes) -> None:
        self.prefix = prefix
        self.writes = 0
        """Items written (won or not)."""
        self.conflicts = 0
        """Adds that found another writer's live entry."""
        self.replaced = 0
        """Entries stored over one that expired by this clock but not Redis's."""

    async def add(self, bound: Bound, key: bytes, value: bytes, expires_at: float | None) -> Entry:
        """Store ``value`` unless a live entry exists; return the winner. One round trip.

        Adds that arrive while another is in flight go out together in one pipeline.
        """
        name = self.prefix + key
        expires_at = expiry(expires_at)
        command = self._command(name, value, expires_at, time.time())
        adds = bound.adds
        if adds.lone():
            adds.busy += 1
            try:
                async with bound.gate:
                    old = await bound.execute(*command[0], **command[1])
            finally:
                adds.busy -= 1
        else:
            old = await adds.join(command)
        self.writes += 1
        return await self._settle(bound, name, value, expires_at, old)

    async def add_many(
        self, bound: Bound, items: Sequence[tuple[bytes, bytes, float | None]]
    ) -> list[Entry]:
        """``add`` for each item, in order, in one pipeline; return the winners."""
        items = [(key, value, expiry(expires_at)) for key, value, expires_at in items]
        now = time.time()
        pipe = bound.pipeline()
        prefix = self.prefix
        for key, value, expires_at in items:
            args, options = self._command(prefix + key, value, expires_at, now)
            pipe.execute_command(*args, **options)
        async with bound.gate:
            olds = await pipe.execute()
        self.writes += len(items)
        return [
            await self._settle(bound, prefix + key, value, expires_at, old)
            for (key, value, expires_at), old in zip(items, olds, strict=True)
        ]

    @staticmethod
    def _command(name: bytes, value: bytes, expires_at: float | None, now: float) -> Command:
        """The one command of an ``add``: ``SET NX (PXAT) GET``, or a ``GET`` when expired."""
        if expires_at is None:
            return ("SET", name, NO_EXPIRY_HEADER + value, "NX", "GET"), {"get": True}
        if expires_at > now:
            stored = HEADER.pack(EXPIRES, expires_at) + value
            return ("SET", name, stored, "NX", "PXAT", pxat(expires_at), "GET"), {"get": True}
        # Already expired: nothing to store, but a live entry there still wins.
        return ("GET", name), {}

    async def _settle(
        self, bound: Bound, name: bytes, value: bytes, expires_at: float | None, old: bytes | None
    ) -> Entry:
        """The winner of an ``add`` that found ``old`` under ``name``."""
        if old is None:
            return Entry(value, expires_at)
        now = time.time()
        existing = unpack(old, now)
        if existing is not None:
            self.conflicts += 1
            return existing
        if expires_at is not None and expires_at <= now:
            return Entry(value, expires_at)
        return await self._replace_stale(bound, name, old, value, expires_at)

    async def _replace_stale(
        self, bound: Bound, name: bytes, old: bytes, value: bytes, expires_at: float | None
    ) -> Entry:
        """Store over an entry that expired by this clock but not yet by Redis's.

        Happens only when this host's clock runs ahead of the server's. A
        compare-and-set, so an entry another writer stored meanwhile still wins.
        """
        stored = pack(value, expires_at)
        expiry_ms: bytes | int = b"" if expires_at is None else pxat(expires_at)
        for _ in range(3):
            async with bound.gate:
                current = await bound.replace(keys=[name], args=[old, stored, expiry_ms])
            if current is None:
                self.replaced += 1
                return Entry(value, expires_at)
            existing = unpack(current, time.time())
            if existing is not None:
                self.conflicts += 1
                return existing
            old = current
        return Entry(value, expires_at)
