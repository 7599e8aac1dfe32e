"""MemoryStore: an in-process LRU bounded by entries and by estimated bytes."""

from __future__ import annotations

import sys
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from typing import Any

from ..errors import ConfigurationError
from .protocol import Entry

__all__ = ["MemoryStore", "memory_options"]


def _block(size: int) -> int:
    """Bytes an allocator really hands out for ``size``: 16-byte blocks, 8 of header room."""
    return (size + 23) & ~15


# What one entry costs beyond its key and value objects: the Entry tuple, its
# float expiry, and the OrderedDict's share of hash table, node and node index.
# The containers' share peaks at 124 bytes per entry right after the table grows
# (tracemalloc, CPython 3.11); 128 keeps the estimate from ever undershooting.
_CONTAINER_OVERHEAD = 128
_ENTRY_OVERHEAD = (
    _block(sys.getsizeof(Entry(b"", 0.0))) + _block(sys.getsizeof(0.0)) + _CONTAINER_OVERHEAD
)
_BYTES_OVERHEAD = sys.getsizeof(b"")


def entry_size(key: bytes, value: bytes) -> int:
    """Estimated resident bytes of one stored entry (never below what it really takes)."""
    return (
        _block(_BYTES_OVERHEAD + len(key)) + _block(_BYTES_OVERHEAD + len(value)) + _ENTRY_OVERHEAD
    )


class MemoryStore:
    """An LRU of decisions in this process's memory.

    Least recently used entries are evicted first when either bound is reached.
    Every operation is O(1) except ``prune``, and none awaits, so the store is
    safe under any interleaving of tasks on one event loop.

    Args:
        max_entries: most entries held; ``None`` for no bound.
        max_bytes: most estimated resident bytes (keys, values and per-entry
            overhead); ``None`` for no bound.
        max_entry_bytes: an entry estimated larger than this is not kept
            (``add`` still returns it to its caller).
    """

    def __init__(
        self,
        *,
        max_entries: int | None = 100_000,
        max_bytes: int | None = 256 * 1024 * 1024,
        max_entry_bytes: int | None = 8 * 1024 * 1024,
    ) -> None:
        for name, bound in (
            ("max_entries", max_entries),
            ("max_bytes", max_bytes),
            ("max_entry_bytes", max_entry_bytes),
        ):
            if bound is not None and bound <= 0:
                raise ValueError(f"{name} must be positive or None, got {bound!r}")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_entry_bytes
        self._data: OrderedDict[bytes, Entry] = OrderedDict()
        self._bytes = 0
        self.evictions = 0

    @classmethod
    def from_url(cls, url: str) -> MemoryStore:
        """A store from ``memory://?max_entries=1000&max_bytes=...&max_entry_bytes=...``.

        Each bound is a positive integer, or ``none`` for no bound.

        Raises:
            ConfigurationError: an option is unknown, or neither a positive integer nor none.
        """
        from urllib.parse import parse_qsl, urlsplit  # here: it costs `import asyncache` 2 ms

        return cls(**memory_options(dict(parse_qsl(urlsplit(url).query))))

    @property
    def nbytes(self) -> int:
        """Estimated resident bytes of everything held."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return (
            f"MemoryStore(entries={len(self._data)}, nbytes={self._bytes}, "
            f"max_entries={self.max_entries}, max_bytes={self.max_bytes})"
        )

    def get_now(self, key: bytes) -> Entry | None:
        """``get`` without the coroutine, for callers already on the loop."""
        entry = self._data.get(key)
        if entry is None:
            return None
        expires_at = entry.expires_at
        if expires_at is not None and expires_at <= time.time():
            self._drop(key, entry)
            return None
        self._data.move_to_end(key)
        return entry

    # The engine's synchronous fast path: a hit here costs no coroutine.
    peek = get_now

    def add_now(self, key: bytes, value: bytes, expires_at: float | None) -> Entry:
        """``add`` without the coroutine, for callers already on the loop."""
        existing = self.get_now(key)
        if existing is not None:
            return existing
        entry = Entry(value, expires_at)
        self.put_now(key, entry)
        return entry

    def put_now(self, key: bytes, entry: Entry) -> None:
        """Store ``entry`` whatever is there (used by tiers copying a winner)."""
        size = entry_size(key, entry.value)
        if self.max_entry_bytes is not None and size > self.max_entry_bytes:
            return
        old = self._data.pop(key, None)
        if old is not None:
            self._bytes -= entry_size(key, old.value)
        self._data[key] = entry
        self._bytes += size
        self._evict()

    def delete_now(self, key: bytes) -> None:
        """Drop ``key`` if present."""
        entry = self._data.get(key)
        if entry is not None:
            self._drop(key, entry)

    async def get(self, key: bytes) -> Entry | None:
        return self.get_now(key)

    async def get_many(self, keys: Sequence[bytes]) -> list[Entry | None]:
        return [self.get_now(key) for key in keys]

    async def add(self, key: bytes, value: bytes, expires_at: float | None) -> Entry:
        return self.add_now(key, value, expires_at)

    async def add_many(self, items: Sequence[tuple[bytes, bytes, float | None]]) -> list[Entry]:
        return [self.add_now(key, value, expires_at) for key, value, expires_at in items]

    async def renew(self, key: bytes, expires_at: float | None) -> bool:
        entry = self.get_now(key)
        if entry is None:
            return False
        self._data[key] = Entry(entry.value, expires_at)
        return True

    async def delete(self, key: bytes) -> None:
        self.delete_now(key)

    async def replace(
        self, key: bytes, expected: bytes, value: bytes, expires_at: float | None
    ) -> Entry:
        """Store ``value`` if ``key`` still holds ``expected`` (or nothing live); the winner."""
        return self.replace_now(key, expected, value, expires_at)

    def replace_now(
        self, key: bytes, expected: bytes, value: bytes, expires_at: float | None
    ) -> Entry:
        """``replace`` without the coroutine (no await: nothing can come in between)."""
        existing = self.get_now(key)
        if existing is not None and existing.value != expected:
            return existing
        entry = Entry(value, expires_at)
        self.put_now(key, entry)
        return entry

    async def prune(self) -> int:
        now = time.time()
        expired = [
            key
            for key, entry in self._data.items()
            if entry.expires_at is not None and entry.expires_at <= now
        ]
        for key in expired:
            self._drop(key, self._data[key])
        return len(expired)

    async def count(self) -> int:
        return len(self._data)

    async def clear(self) -> None:
        self._data.clear()
        self._bytes = 0

    async def aclose(self) -> None:
        await self.clear()

    async def entries(self, *, batch_size: int = 500) -> AsyncIterator[list[tuple[bytes, Entry]]]:
        """Yield the live entries, least recently used first, without touching their order."""
        # A snapshot: callers may get and add between batches, which reorders the dict.
        snapshot = list(self._data.items())
        for start in range(0, len(snapshot), batch_size):
            now = time.time()
            batch = [
                (key, entry)
                for key, entry in snapshot[start : start + batch_size]
                if entry.expires_at is None or entry.expires_at > now
            ]
            if batch:
                yield batch

    async def describe(self) -> dict[str, Any]:
        """What this process's memory holds, for ``asyncache stats``.

        Keys: ``kind`` (``"memory"``), ``entries`` (``live``, ``expired`` (not
        yet dropped) and ``without_expiry`` among them), ``stored_bytes`` (the
        values), ``resident_bytes`` (the estimate the bounds use),
        ``next_expiry`` and ``last_expiry`` (Unix seconds of live entries, or
        ``None``), ``evictions``, and the bounds ``max_entries``, ``max_bytes``
        and ``max_entry_bytes``. O(entries).
        """
        now = time.time()
        expired = forever = stored = 0
        first: float | None = None
        last: float | None = None
        for entry in self._data.values():
            stored += len(entry.value)
            expires_at = entry.expires_at
            if expires_at is None:
                forever += 1
            elif expires_at <= now:
                expired += 1
            else:
                first = expires_at if first is None else min(first, expires_at)
                last = expires_at if last is None else max(last, expires_at)
        return {
            "kind": "memory",
            "entries": len(self._data),
            "live": len(self._data) - expired,
            "expired": expired,
            "without_expiry": forever,
            "stored_bytes": stored,
            "resident_bytes": self._bytes,
            "next_expiry": first,
            "last_expiry": last,
            "evictions": self.evictions,
            "max_entries": self.max_entries,
            "max_bytes": self.max_bytes,
            "max_entry_bytes": self.max_entry_bytes,
        }

    def _drop(self, key: bytes, entry: Entry) -> None:
        del self._data[key]
        self._bytes -= entry_size(key, entry.value)

    def _evict(self) -> None:
        data = self._data
        while data and (
            (self.max_entries is not None and len(data) > self.max_entries)
            or (self.max_bytes is not None and self._bytes > self.max_bytes)
        ):
            key, entry = data.popitem(last=False)
            self._bytes -= entry_size(key, entry.value)
            self.evictions += 1


def memory_options(options: dict[str, str]) -> dict[str, int | None]:
    """Parse a memory URL's ``max_entries``, ``max_bytes`` and ``max_entry_bytes``.

    Each is a positive integer, or ``none`` for no bound (``max_entries=none``).
    """
    known = {"max_entries", "max_bytes", "max_entry_bytes"}
    unknown = set(options) - known
    if unknown:
        raise ConfigurationError(
            f"unknown memory store option(s) {sorted(unknown)}; known: {sorted(known)}"
        )
    parsed: dict[str, int | None] = {}
    for name, value in options.items():
        if value.strip().lower() == "none":
            parsed[name] = None
            continue
        try:
            number = int(value)
        except ValueError:
            raise ConfigurationError(
                f"store option {name}={value!r} is not an integer (or none, for no bound)"
            ) from None
        if number <= 0:
            raise ConfigurationError(
                f"store option {name}={value!r} must be positive (or none, for no bound)"
            )
        parsed[name] = number
    return parsed
