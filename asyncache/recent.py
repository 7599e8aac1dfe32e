"""What the hit path remembers of recent hits: keys of small inputs, decoded small results.

A hit on a memory store costs building the key (canonical JSON, then
BLAKE2b) and decoding the stored envelope (orjson). For a hot input both are
the same work every time, so both are remembered, for a bounded number of
recent ones:

- ``RecentKeys``: canonical bytes -> key, for inputs that encode small. The
  canonical bytes are still built (they are what identifies the input); only
  hashing them again is saved, and the key is the same.
- ``RecentValues``: key -> the decoded result, valid while the store holds the
  very bytes it was decoded from (compared by identity, so a replaced entry
  is decoded afresh). Only results that can be handed out again safely are
  kept: a caller never gets an object another caller holds. Strings, numbers,
  booleans and ``None`` are immutable and returned as they are; a list or a
  dict of those is copied (one shallow copy, cheaper than decoding); anything
  nested is decoded on every hit, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from .keys import PLAIN_OPTIONS, KeyBuilder, canonical, refuse

__all__ = ["RecentKeys", "RecentValues"]

# Inputs encoding to at most this many bytes have their keys remembered; past it,
# hashing the bytes once costs about what looking them up would.
KEY_BYTES = 256
ENTRIES = 512
"""How many recent keys (and, apart, results) each remembers; the oldest goes first."""

# What a caller's ``made`` makes is kept for entries stored in at most this many
# bytes (signed or compressed ones too: the same bytes were checked once).
MADE_BYTES = 16 * 1024
# A function whose inputs encode large looks up one call in this many.
PROBE_EVERY = 64
_dumps = orjson.dumps
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


class RecentKeys:
    """``KeyBuilder.key`` for unscoped inputs, with the keys of recent small ones remembered.

    Remembered by orjson's plain bytes of the inputs, looked up before anything
    else, and kept only when those bytes are the inputs' canonical bytes (they
    hold no ``null``, so no ``None`` can be a NaN: ``keys.canonical``'s rule);
    so an input found here keys exactly as ``KeyBuilder.key`` keys it. A
    function whose inputs encode large skips the lookup (probing again now and
    then), so it pays for no second encoding.

    Args:
        builder: builds the keys.
    """

    __slots__ = ("_builder", "_known", "_skip")

    def __init__(self, builder: KeyBuilder) -> None:
        self._builder = builder
        self._known: dict[bytes, bytes] = {}
        self._skip = 0

    def key(self, inputs: Any) -> bytes:
        """The key of ``inputs`` (unscoped), as ``KeyBuilder.key`` gives it.

        Raises:
            TypeError: an input cannot be encoded.
        """
        if self._skip:
            self._skip -= 1
            return self._builder.key(inputs)
        try:
            raw = _dumps(inputs, default=refuse, option=PLAIN_OPTIONS)
        except orjson.JSONEncodeError:
            return self._builder.key(inputs)  # tagged: the careful walk
        if len(raw) > KEY_BYTES:
            self._skip = PROBE_EVERY
            return self._builder.key(inputs)
        known = self._known
        key = known.get(raw)
        if key is None:
            exact = canonical(inputs)
            key = self._builder.digest(exact)  # KeyBuilder.key, unscoped
            if exact == raw and raw.find(b"null") < 0:
                if len(known) >= ENTRIES:
                    del known[next(iter(known))]
                # A copy: orjson's own bytes keep the spare room of its buffer (4 KiB).
                known[bytes(memoryview(raw))] = key
        return key


class RecentValues:
    """Decoded results of recent hits, by key, each with the stored bytes it came from.

    A caller may ask for its results made ready (``made``: the middleware turns
    a stored response into the messages it sends). What ``made`` returns must
    never be changed by whoever gets it, so it is handed out as it is, and it
    is only ever handed to a caller asking with that same ``made``.

    Attributes:
        records: key -> (stored bytes, result, copy or ``None`` (decode every
            time), compute seconds, ttl, what made the result (``None``:
            decoded)). Read by the engine's hit path; written only here.
    """

    __slots__ = ("records",)

    def __init__(self) -> None:
        self.records: dict[
            bytes, tuple[bytes, Any, Callable[[Any], Any] | None, float, Any, Any]
        ] = {}

    def get(self, key: bytes, value: bytes, made: Any = None) -> tuple[Any, float, Any] | None:
        """A caller's own result, its compute seconds and ttl, if ``value`` was decoded here."""
        known = self.records.get(key)
        if known is None or known[0] is not value or known[5] is not made:
            return None
        copy = known[2]
        if copy is same:  # the hot case (what was made, or a scalar): no call to make
            return known[1], known[3], known[4]
        if copy is None:
            return None
        return copy(known[1]), known[3], known[4]

    def keep(
        self, key: bytes, value: bytes, result: Any, saved: float, ttl: Any, made: Any = None
    ) -> Any:
        """Remember ``result`` (from ``value``, by ``made``) when it can be handed out again.

        A result that cannot is remembered as such, so that it is not looked
        over again on every hit. Returns what the caller gets: ``result``
        itself, the copy kept being another.
        """
        known = self.records
        if made is not None and len(value) > MADE_BYTES:
            return result  # a bound on the memory what is made may hold
        seen = known.get(key)
        if seen is not None and seen[0] is value and seen[5] is made:
            return result  # judged before: it must be decoded on every hit
        copy = same if made is not None else copier(result)
        if len(known) >= ENTRIES and seen is None:
            del known[next(iter(known))]
        known[key] = (value, None if copy is None else copy(result), copy, saved, ttl, made)
        return result

    def clear(self) -> None:
        """Forget every result (the engine was pointed at another store)."""
        self.records.clear()
