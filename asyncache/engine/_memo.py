"""What the hit path remembers of recent hits: decoded results, by key.

A hit on a memory store costs decoding the stored envelope (orjson). For a
hot entry that is the same work every time, so the result is remembered for
a bounded number of recent keys, valid while the store holds the very bytes
it was decoded from (compared by identity, so a replaced entry is decoded
afresh). Only results that can be handed out again safely are kept: a
caller never gets an object another caller holds. Strings, numbers, booleans
and ``None`` are immutable and returned as they are; a list or a dict of
those is copied (one shallow copy, cheaper than decoding); anything else made
of JSON's types (a dict of lists...) is kept as its JSON and parsed for each
hit (orjson, a fraction of decoding the envelope); the rest is decoded on
every hit. (The keys of recent inputs are remembered apart, by
``asyncache.keys.RecentKeys``.)

What is remembered is bounded in bytes of what it holds, not only in entries:
each result by what it takes in memory once decoded (``held_bytes``: a
compressed entry may be a thousand times smaller than what it inflates to),
all of them together by ``HELD_BYTES``.

Several threads may share one engine (each running an event loop of its
own): a read is one dict lookup, safe as it is; remembering takes a lock, so
the bounds and their accounting hold under any interleaving.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

import orjson

__all__ = [
    "ENTRIES",
    "HELD_BYTES",
    "MADE_BYTES",
    "SMALL_BYTES",
    "RecentValues",
    "Remembered",
    "copier",
    "held_bytes",
    "same",
]

ENTRIES = 512
"""How many recent results are remembered; the oldest goes first."""
HELD_BYTES = 8 * 1024 * 1024
"""The most bytes all remembered results hold together (``held_bytes`` of each, and
the stored bytes each was decoded from); the oldest goes first."""
# Plain decoded results are kept when they hold at most this many bytes: past it,
# decoding costs little beside what the caller does with the result.
SMALL_BYTES = 8 * 1024
# What a caller's ``made`` makes is kept when the decoded value it was made from holds
# at most this many bytes (the middleware's replay holds about as much as its value).
MADE_BYTES = 64 * 1024
_SCALARS = frozenset({str, int, float, bool, type(None)})
_INT64_MIN, _UINT64_MAX = -(2**63), 2**64 - 1
_loads = orjson.loads
_sizeof = sys.getsizeof


def same(value: Any) -> Any:
    """How a result that may be handed out as it is gets copied: it is not."""
    return value


def held_bytes(value: Any, limit: int) -> int:
    """Bytes ``value`` holds in memory (its containers and leaves, each counted once
    per place it appears), or more than ``limit`` as soon as it passes ``limit``."""
    total = 0
    todo = [value]
    while todo:
        item = todo.pop()
        total += _sizeof(item)
        if total > limit:
            return total
        kind = type(item)
        if kind is list or kind is tuple:
            todo.extend(item)
        elif kind is dict:
            todo.extend(item)
            todo.extend(item.values())
    return total


def _json_exact(value: Any) -> bool:
    """Whether orjson reads back ``value``'s JSON as an equal value of the same types."""
    todo = [value]
    while todo:
        item = todo.pop()
        kind = type(item)
        if kind is str or kind is bool or item is None:
            continue
        if kind is int:
            if not _INT64_MIN <= item <= _UINT64_MAX:
                return False
        elif kind is float:
            if item - item != 0.0:  # NaN and the infinities are written as null
                return False
        elif kind is list:
            todo.extend(item)
        elif kind is dict:
            if not all(type(name) is str for name in item):
                return False
            todo.extend(item.values())
        else:
            return False
    return True


def copier(result: Any) -> tuple[Callable[[Any], Any], Any] | None:
    """How to hand ``result`` to one more caller, and what to keep for it; ``None``
    when only decoding will do."""
    kind = type(result)
    if kind in _SCALARS:
        return same, result
    if kind is list and all(type(item) in _SCALARS for item in result):
        return list.copy, list.copy(result)
    if kind is dict and all(type(item) in _SCALARS for item in result.values()):
        return dict.copy, dict.copy(result)
    if (kind is list or kind is dict) and _json_exact(result):
        # Nested: its JSON, parsed afresh for each caller (a new object all the way down).
        return _loads, orjson.dumps(result)
    return None


class Remembered:
    """One remembered hit.

    Attributes:
        value: the stored bytes the result was decoded from.
        result: what ``copy`` hands out (``None`` when ``copy`` is: decode every time).
        copy: how to hand ``result`` to one more caller (``same``: as it is).
        saved: the compute seconds stored with it.
        ttl: the ttl stored with it.
        made: what made ``result`` from the decoded decision (``None``: decoded).
        windows: seconds the entry is kept past its ttl (``asyncache.engine._freshness``);
            0 for most entries, which are then fresh until their store expiry.
        revalidate: the first of those windows, stale-while-revalidate.
        held: the bytes this record holds (``RecentValues.held`` counts them).
    """

    __slots__ = ("copy", "held", "made", "result", "revalidate", "saved", "ttl", "value", "windows")

    def __init__(
        self,
        value: bytes,
        result: Any,
        copy: Callable[[Any], Any] | None,
        saved: float,
        ttl: Any,
        made: Any,
        windows: float = 0.0,
        revalidate: float = 0.0,
        held: int = 0,
    ) -> None:
        self.value = value
        self.result = result
        self.copy = copy
        self.saved = saved
        self.ttl = ttl
        self.made = made
        self.windows = windows
        self.revalidate = revalidate
        self.held = held


class RecentValues:
    """Decoded results of recent hits, by key, each with the stored bytes it came from.

    A caller may ask for its results made ready (``made``: the middleware turns
    a stored response into the messages it sends). What ``made`` returns must
    never be changed by whoever gets it, so it is handed out as it is, and it
    is only ever handed to a caller asking with that same ``made``.

    Attributes:
        records: key -> ``Remembered``. Read by the engine's hit path; written only here.
        held: bytes the records hold together (at most ``HELD_BYTES``).
    """

    __slots__ = ("_lock", "held", "records")

    def __init__(self) -> None:
        self.records: dict[bytes, Remembered] = {}
        self.held = 0
        self._lock = threading.Lock()

    def get(self, key: bytes, value: bytes, made: Any = None) -> tuple[Any, Remembered] | None:
        """A caller's own result and what was remembered with it, if ``value`` was decoded here."""
        known = self.records.get(key)
        if known is None or known.value is not value or known.made is not made:
            return None
        copy = known.copy
        if copy is same:  # the hot case (what was made, or a scalar): no call to make
            return known.result, known
        if copy is None:
            return None
        return copy(known.result), known

    def keep(
        self,
        key: bytes,
        value: bytes,
        result: Any,
        saved: float,
        ttl: Any,
        made: Any = None,
        windows: float = 0.0,
        revalidate: float = 0.0,
        decoded: Any = None,
    ) -> Any:
        """Remember ``result`` (from ``value``, by ``made``) when it can be handed out again.

        A result that cannot is remembered as such, so that it is not looked
        over again on every hit. ``decoded`` is what ``made`` made ``result``
        from (its size stands for the made result's). Returns what the caller
        gets: ``result`` itself, the copy kept being another.
        """
        seen = self.records.get(key)
        if seen is not None and seen.value is value and seen.made is made:
            return result  # judged before: it must be decoded on every hit
        limit = SMALL_BYTES if made is None else MADE_BYTES
        if len(value) > limit:
            return result  # a bound on the memory the remembered results hold
        size = held_bytes(result if made is None else decoded, limit)
        if size > limit:
            return result  # a small entry that inflates large: decoded on every hit
        copy: Callable[[Any], Any] | None
        if made is not None:
            copy, kept = same, result
        else:
            how = copier(result)
            copy, kept = (None, None) if how is None else how
            if kept is not result and kept is not None:
                size = held_bytes(kept, limit)
        record = Remembered(
            value, kept, copy, saved, ttl, made, windows, revalidate, size + len(value)
        )
        with self._lock:
            known = self.records
            old = known.pop(key, None)
            if old is not None:
                self.held -= old.held
            while known and (len(known) >= ENTRIES or self.held + record.held > HELD_BYTES):
                self.held -= known.pop(next(iter(known))).held
            known[key] = record
            self.held += record.held
        return result

    def clear(self) -> None:
        """Forget every result (the engine was pointed at another store)."""
        with self._lock:
            self.records.clear()
            self.held = 0
