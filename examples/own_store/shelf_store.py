"""A store of your own: ShelfStore keeps decisions in a dict, and registers shelf://."""

from __future__ import annotations

import time
from collections.abc import Sequence

from asyncache import ConfigurationError, Entry, register_store


class ShelfStore:
    """Decisions in a dict of this process: a sketch of a third-party DecisionStore."""

    def __init__(self) -> None:
        self._shelf: dict[bytes, Entry] = {}

    @classmethod
    def from_url(cls, url: str) -> ShelfStore:
        if url != "shelf://":
            raise ConfigurationError(f"ShelfStore takes no options: {url!r}")
        return cls()

    def _live(self, key: bytes) -> Entry | None:
        entry = self._shelf.get(key)
        if entry is None or (entry.expires_at is not None and entry.expires_at <= time.time()):
            return None  # an expired entry is never returned, deleted or not
        return entry

    async def get(self, key: bytes) -> Entry | None:
        return self._live(key)

    async def get_many(self, keys: Sequence[bytes]) -> list[Entry | None]:
        return [self._live(key) for key in keys]

    async def add(self, key: bytes, value: bytes, expires_at: float | None) -> Entry:
        # Look and write with no await in between: atomic within one event loop.
        # A shared backend needs its own conditional write (SET NX, ON CONFLICT).
        winner = self._live(key)
        if winner is None:
            winner = self._shelf[key] = Entry(value, expires_at)
        return winner

    async def add_many(self, items: Sequence[tuple[bytes, bytes, float | None]]) -> list[Entry]:
        return [await self.add(key, value, expires_at) for key, value, expires_at in items]

    async def renew(self, key: bytes, expires_at: float | None) -> bool:
        entry = self._live(key)
        if entry is None:
            return False
        self._shelf[key] = entry._replace(expires_at=expires_at)
        return True

    async def delete(self, key: bytes) -> None:  # corrupt entries, mode="record"
        self._shelf.pop(key, None)

    async def replace(  # refreshes of stale entries: a compare-and-set
        self, key: bytes, expected: bytes, value: bytes, expires_at: float | None
    ) -> Entry:
        current = self._live(key)
        if current is not None and current.value != expected:
            return current  # a newer decision is there: it stays
        winner = self._shelf[key] = Entry(value, expires_at)
        return winner

    async def prune(self) -> int:
        expired = [key for key in self._shelf if self._live(key) is None]
        for key in expired:
            del self._shelf[key]
        return len(expired)

    async def count(self) -> int:
        return len(self._shelf)

    async def clear(self) -> None:
        self._shelf.clear()

    async def aclose(self) -> None:
        pass  # nothing to release; a real store closes its connections here


# On import, open_store("shelf://") and ASYNCACHE_STORE_URL=shelf:// know the scheme.
register_store("shelf", ShelfStore.from_url)
