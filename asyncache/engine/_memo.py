"""What the hit path remembers of recent hits: decoded results, by key.

A hit on a memory store costs decoding the stored envelope (orjson). For a
hot entry that is the same work every time, so the result is remembered for
a bounded number of recent keys, valid while the store holds the very bytes
it was decoded from (compared by identity, so a replaced entry is decoded
afresh). Only results that can be handed out again safely are kept: a
caller never gets an object another caller holds. Strings, numbers, booleans
and ``None`` are immutable and returned as they are; a list or a dict of
those is copied (one shallow copy, cheaper than decoding); anything nested is
decoded on every hit. (The keys of recent small inputs are remembered apart,
by ``asyncache.keys.RecentKeys``.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["ENTRIES", "MADE_BYTES", "SMALL_BYTES", "RecentValues", "Remembered", "copier", "same"]

ENTRIES = 512
"""How many recent results are remembered; the oldest goes first."""
# Plain decoded results are kept for entries stored in at most this many bytes: past
# it, decoding costs little beside what the caller does with the result.
SMALL_BYTES = 2048
# What a caller's ``made`` makes is kept for entries stored in at most this many
# bytes (signed or compressed ones too: the same bytes were checked once).
MADE_BYTES = 16 * 1024
_SCALARS = frozenset({str, int, float, bool, type(None)})


def same(value: Any) -> Any:
    """How a result that may be handed out as it is gets copied: it is not."""
    return value


def copier(result: Any) -> Callable[[Any], Any] | None:
    """How to hand ``result`` to one more caller, or ``None`` when only decoding will do."""
    kind = type(result)
    if kind in _SCALARS:
        return same
    if kind is list and all(type(item) in _SCALARS for item in result):
        return list.copy
    if kind is dict and all(type(item) in _SCALARS for item in result.values()):
        return dict.copy
    return None


class Remembered:
    """One remembered hit.

    Attributes:
        value: the stored bytes the result was decoded from.
        result: the result (``None`` when ``copy`` is: decode every time).
        copy: how to hand ``result`` to one more caller (``same``: as it is).
        saved: the compute seconds stored with it.
        ttl: the ttl stored with it.
        made: what made ``result`` from the decoded decision (``None``: decoded).
        windows: seconds the entry is kept past its ttl (``asyncache.engine._freshness``);
            0 for most entries, which are then fresh until their store expiry.
        revalidate: the first of those windows, stale-while-revalidate.
    """

    __slots__ = ("copy", "made", "result", "revalidate", "saved", "ttl", "value", "windows")

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
    ) -> None:
        self.value = value
        self.result = result
        self.copy = copy
        self.saved = saved
        self.ttl = ttl
        self.made = made
        self.windows = windows
        self.revalidate = revalidate


class RecentValues:
    """Decoded results of recent hits, by key, each with the stored bytes it came from.

    A caller may ask for its results made ready (``made``: the middleware turns
    a stored response into the messages it sends). What ``made`` returns must
    never be changed by whoever gets it, so it is handed out as it is, and it
    is only ever handed to a caller asking with that same ``made``.

    Attributes:
        records: key -> ``Remembered``. Read by the engine's hit path; written only here.
    """

    __slots__ = ("records",)

    def __init__(self) -> None:
        self.records: dict[bytes, Remembered] = {}

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
    ) -> Any:
        """Remember ``result`` (from ``value``, by ``made``) when it can be handed out again.

        A result that cannot is remembered as such, so that it is not looked
        over again on every hit. Returns what the caller gets: ``result``
        itself, the copy kept being another.
        """
        if len(value) > (SMALL_BYTES if made is None else MADE_BYTES):
            return result  # a bound on the memory the remembered results hold
        known = self.records
        seen = known.get(key)
        if seen is not None and seen.value is value and seen.made is made:
            return result  # judged before: it must be decoded on every hit
        copy = same if made is not None else copier(result)
        if len(known) >= ENTRIES and seen is None:
            del known[next(iter(known))]
        kept = None if copy is None else copy(result)
        known[key] = Remembered(value, kept, copy, saved, ttl, made, windows, revalidate)
        return result

    def clear(self) -> None:
        """Forget every result (the engine was pointed at another store)."""
        self.records.clear()
