"""MemoryStore: an in-process LRU bounded by entries and by estimated bytes, and per scope.

A key is a digest: the store cannot tell whose entry it holds. The door that
knows (the middleware, with its ``scope`` function) says so in
``ENTRY_SCOPE`` around the calls that may add, and ``max_entries_per_scope``
then keeps each scope within its own budget: a scope over it evicts its own
least recently used entry, never another scope's.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from ..errors import ConfigurationError
from ..keys import canonical
from ..tags import DECISION_TAGS, MARGIN, TOMBSTONE_SECONDS, labels_of, refused
from .protocol import Entry

__all__ = ["ENTRY_SCOPE", "MemoryStore", "entries_of", "memory_options"]

ENTRY_SCOPE: ContextVar[str | None] = ContextVar("asyncache_entry_scope", default=None)
"""The scope (tenant, principal) the entries added in this context belong to;
``None``: unscoped. Only ``max_entries_per_scope`` reads it; entries added
without it share the unscoped budget."""


@contextmanager
def entries_of(scope: Any) -> Iterator[None]:
    """Within it, what is added counts against ``scope``'s budget (``ENTRY_SCOPE``).

    ``scope`` is the key's scope (a principal, a tenant): a string as it is,
    anything else by its canonical encoding, so equal scopes share a budget.
    """
    if scope is None:
        yield
        return
    token = ENTRY_SCOPE.set(scope if type(scope) is str else canonical(scope).decode())
    try:
        yield
    finally:
        ENTRY_SCOPE.reset(token)


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
_NO_SCOPE: Any = object()  # a key no scope was charged for


def entry_size(key: bytes, value: bytes) -> int:
    """Estimated resident bytes of one stored entry (never below what it really takes)."""
    return (
        _block(_BYTES_OVERHEAD + len(key)) + _block(_BYTES_OVERHEAD + len(value)) + _ENTRY_OVERHEAD
    )


class MemoryStore:
    """An LRU of decisions in this process's memory.

    Least recently used entries are evicted first when either bound is reached.
    Every operation is O(1) except ``prune``, and none awaits, so the store is
    safe under any interleaving of tasks on one event loop. Several threads may
    share it too (each running a loop of its own): what changes the entries
    takes a lock, and a hit's read takes none (one lookup, and moving the entry
    to the LRU's end, which another thread may have evicted meanwhile).

    Args:
        max_entries: most entries held; ``None`` for no bound.
        max_bytes: most estimated resident bytes (keys, values and per-entry
            overhead); ``None`` for no bound.
        max_entry_bytes: an entry estimated larger than this is not kept
            (``add`` still returns it to its caller).
        max_entries_per_scope: most entries one scope (``ENTRY_SCOPE``, the
            unscoped ones together being one) holds; ``None`` for no budget.
            A scope at its budget evicts its own least recently used entry.
            The store-wide bounds still evict the least recently used entry
            of any scope: set ``max_entries`` to at least the budget times
            the scopes expected, so that only a scope past its budget loses
            entries to itself.
    """

    def __init__(
        self,
        *,
        max_entries: int | None = 100_000,
        max_bytes: int | None = 256 * 1024 * 1024,
        max_entry_bytes: int | None = 8 * 1024 * 1024,
        max_entries_per_scope: int | None = None,
    ) -> None:
        for name, bound in (
            ("max_entries", max_entries),
            ("max_bytes", max_bytes),
            ("max_entry_bytes", max_entry_bytes),
            ("max_entries_per_scope", max_entries_per_scope),
        ):
            if bound is not None and bound <= 0:
                raise ValueError(f"{name} must be positive or None, got {bound!r}")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_entry_bytes
        self.max_entries_per_scope = max_entries_per_scope
        self._data: OrderedDict[bytes, Entry] = OrderedDict()
        # The key last put or read, which the order holds last: reading it again moves
        # nothing (a hot input read over and over costs no reordering). A key dropped
        # since is never read here; two threads' reads racing may leave one key a place
        # short of last, as the unlocked moves themselves may.
        self._newest: bytes | None = None
        self._bytes = 0
        self.evictions = 0
        # With a budget: each scope's keys, least recently used first, and each key's scope.
        self._scopes: dict[str | None, OrderedDict[bytes, None]] = {}
        self._scope_of: dict[bytes, str | None] = {}
        # Forgetting: the keys under each label, each key's labels, and the tombstones
        # (label -> until when writes that began earlier are refused).
        self._index: dict[bytes, set[bytes]] = {}
        self._labels_of: dict[bytes, tuple[bytes, ...]] = {}
        self._tombstones: dict[bytes, float] = {}
        # Held by whatever adds, replaces or drops entries (reentrant: add_now reads, then
        # puts). A hit takes it only to drop an expired entry.
        self._lock = threading.RLock()

    @classmethod
    def from_url(cls, url: str) -> MemoryStore:
        """A store from ``memory://?max_entries=1000&max_bytes=...&max_entry_bytes=...``
        (and ``max_entries_per_scope``).

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
            with self._lock:
                if self._data.get(key) is entry:  # not replaced or dropped meanwhile
                    self._drop(key, entry)
            return None
        if key is self._newest:
            return entry  # last in the order already (and in its scope's: nothing moved since)
        try:
            self._data.move_to_end(key)
            if self._scope_of:
                scope = self._scope_of.get(key, _NO_SCOPE)
                if scope is not _NO_SCOPE:
                    self._scopes[scope].move_to_end(key)
        except KeyError:
            return entry  # dropped by another thread since the lookup: this read still had it
        self._newest = key
        return entry

    # The engine's synchronous fast path: a hit here costs no coroutine.
    peek = get_now

    def add_now(self, key: bytes, value: bytes, expires_at: float | None) -> Entry:
        """``add`` without the coroutine, for callers already on the loop."""
        with self._lock:  # first writer wins across threads too
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
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._bytes -= entry_size(key, old.value)
                self._unscope(key)
            self._data[key] = entry
            self._newest = key
            self._bytes += size
            if self.max_entries_per_scope is not None:
                self._charge(key, ENTRY_SCOPE.get())
            self._evict()

    def _charge(self, key: bytes, scope: str | None) -> None:
        """Count ``key`` in ``scope``'s budget, evicting that scope's oldest entries past it."""
        budget = self.max_entries_per_scope
        assert budget is not None
        keys = self._scopes.get(scope)
        if keys is None:
            keys = self._scopes[scope] = OrderedDict()
        keys[key] = None
        self._scope_of[key] = scope
        while len(keys) > budget:
            # Popped, not iterated: another thread's hit may move a key meanwhile.
            oldest, _ = keys.popitem(last=False)
            self._scope_of.pop(oldest, None)
            entry = self._data.pop(oldest, None)
            if entry is not None:
                self._bytes -= entry_size(oldest, entry.value)
            self.evictions += 1

    def delete_now(self, key: bytes) -> None:
        """Drop ``key`` if present."""
        with self._lock:
            entry = self._data.get(key)
            if entry is not None:
                self._drop(key, entry)

    async def get(self, key: bytes) -> Entry | None:
        return self.get_now(key)

    async def get_many(self, keys: Sequence[bytes]) -> list[Entry | None]:
        return [self.get_now(key) for key in keys]

    async def add(self, key: bytes, value: bytes, expires_at: float | None) -> Entry:
        if DECISION_TAGS.get() is not None:
            return await self._add_tagged(key, value, expires_at, None)
        return self.add_now(key, value, expires_at)

    async def add_many(self, items: Sequence[tuple[bytes, bytes, float | None]]) -> list[Entry]:
        if DECISION_TAGS.get() is not None:
            return [await self._add_tagged(key, value, exp, None) for key, value, exp in items]
        return [self.add_now(key, value, expires_at) for key, value, expires_at in items]

    async def _add_tagged(
        self, key: bytes, value: bytes, expires_at: float | None, expected: bytes | None
    ) -> Entry:
        """``add`` (or, with ``expected``, ``replace``) of a decision the door tagged."""
        found = await labels_of(key)  # may run the user's tag function: before deciding
        if found is None:
            if expected is not None:
                return self.replace_now(key, expected, value, expires_at)
            return self.add_now(key, value, expires_at)
        tagging, labels = found
        with self._lock:  # the tombstones, the write and its labels: one step for every thread
            if self._tombstones and refused(self._tombstones, labels, tagging.since):
                tagging.refuse(key)
                return Entry(value, expires_at)
            if expected is not None:
                winner = self.replace_now(key, expected, value, expires_at)
            else:
                winner = self.add_now(key, value, expires_at)
            if winner.value is value and key in self._data:
                self._label(key, labels)
            return winner

    def _label(self, key: bytes, labels: tuple[bytes, ...]) -> None:
        """Index ``key`` under each of ``labels``."""
        if self._labels_of:
            self._unlabel(key)
        self._labels_of[key] = labels
        for label in labels:
            self._index.setdefault(label, set()).add(key)

    def _unlabel(self, key: bytes) -> None:
        """Drop ``key`` from the index (it is being dropped or replaced)."""
        labels = self._labels_of.pop(key, ())
        for label in labels:
            keys = self._index.get(label)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._index[label]

    async def forget(
        self,
        labels: Sequence[bytes],
        *,
        dry_run: bool = False,
        progress: Callable[[int, int], object] | None = None,
    ) -> int:
        """Drop every live decision indexed under any of ``labels``; return how many.

        No await inside, and under the lock: no write comes in between the drop and the
        tombstones, from this loop or another thread's.
        """
        with self._lock:
            now = time.time()
            keys: set[bytes] = set()
            for label in labels:
                keys |= self._index.get(label, set())
            live = [key for key in keys if self.get_now(key) is not None]
            if not dry_run:
                for key in live:
                    self.delete_now(key)
                for label, until in list(self._tombstones.items()):
                    if until + TOMBSTONE_SECONDS < now:
                        del self._tombstones[label]
                for label in labels:
                    self._tombstones[label] = now + MARGIN
        if progress is not None:
            progress(len(live), len(live))
        return len(live)

    async def renew(self, key: bytes, expires_at: float | None) -> bool:
        with self._lock:
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
        if DECISION_TAGS.get() is not None:
            return await self._add_tagged(key, value, expires_at, expected)
        return self.replace_now(key, expected, value, expires_at)

    def replace_now(
        self, key: bytes, expected: bytes, value: bytes, expires_at: float | None
    ) -> Entry:
        """``replace`` without the coroutine (no await: nothing can come in between)."""
        with self._lock:  # nor another thread
            existing = self.get_now(key)
            if existing is not None and existing.value != expected:
                return existing
            entry = Entry(value, expires_at)
            self.put_now(key, entry)
            return entry

    async def prune(self) -> int:
        now = time.time()
        with self._lock:
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
        with self._lock:
            self._data.clear()
            self._scopes.clear()
            self._scope_of.clear()
            self._index.clear()
            self._labels_of.clear()
            self._bytes = 0

    async def aclose(self) -> None:
        await self.clear()

    async def entries(self, *, batch_size: int = 500) -> AsyncIterator[list[tuple[bytes, Entry]]]:
        """Yield the live entries, least recently used first, without touching their order."""
        # A snapshot: callers may get and add between batches, which reorders the dict.
        with self._lock:
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
        with self._lock:
            held = list(self._data.values())
        for entry in held:
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
            "max_entries_per_scope": self.max_entries_per_scope,
        }

    def _drop(self, key: bytes, entry: Entry) -> None:
        del self._data[key]
        self._bytes -= entry_size(key, entry.value)
        self._unscope(key)
        if self._labels_of:
            self._unlabel(key)

    def _unscope(self, key: bytes) -> None:
        if self._scope_of:
            scope = self._scope_of.pop(key, _NO_SCOPE)
            if scope is not _NO_SCOPE:
                keys = self._scopes[scope]
                del keys[key]
                if not keys:
                    del self._scopes[scope]

    def _evict(self) -> None:
        data = self._data
        while data and (
            (self.max_entries is not None and len(data) > self.max_entries)
            or (self.max_bytes is not None and self._bytes > self.max_bytes)
        ):
            key, entry = data.popitem(last=False)
            self._bytes -= entry_size(key, entry.value)
            self._unscope(key)
            if self._labels_of:
                self._unlabel(key)
            self.evictions += 1


def memory_options(options: dict[str, str]) -> dict[str, int | None]:
    """Parse a memory URL's ``max_entries``, ``max_bytes``, ``max_entry_bytes`` and
    ``max_entries_per_scope``.

    Each is a positive integer, or ``none`` for no bound (``max_entries=none``).
    """
    known = {"max_entries", "max_bytes", "max_entry_bytes", "max_entries_per_scope"}
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
