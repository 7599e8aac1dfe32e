"""How RedisStore lays out its keys and values.

::

    <prefix><key>           a decision: a 9-byte header, then the value
    <prefix>lease:<key>     a lease: its ttl in ms, ``:``, the holder's token
                            (``acquire_lease``), expiring after that ttl; on a
                            cluster ``<prefix>lease:{<tag>}<key>``, where the
                            hash tag puts it in its decision's slot
                            (``lease_name``)
    <prefix>lease:released  the pub/sub channel a released lease is announced on
    <prefix>invalidated     the pub/sub channel ``clear`` (empty message) and
                            ``delete`` (the key) are announced on
    <prefix>tags:...        tag indexes, a tagged decision's labels and the
    <prefix>labels:...      tombstones of forgotten labels (``tags``); on a
    <prefix>forgotten:...   cluster the first two in their decision's slot
                            (``in_slot_of``)

The header is a tag byte and the expiry as a big-endian IEEE double (Unix
seconds; the tag says whether there is one). A value that does not start with
a header (written by something else) is handed to the engine whole, whose
decoder rejects it: the entry is then counted as corrupt and deleted.
"""

from __future__ import annotations

import binascii
import functools
import math
import struct

from ..protocol import Entry

__all__ = [
    "EXPIRES",
    "HEADER",
    "HEADER_SIZE",
    "INVALIDATED",
    "LEASE",
    "MAX_EXPIRES_AT",
    "NO_EXPIRY",
    "NO_EXPIRY_HEADER",
    "RELEASED",
    "expiry",
    "glob_escape",
    "in_slot",
    "in_slot_of",
    "lease_is_live",
    "lease_name",
    "lease_value",
    "pack",
    "pxat",
    "unpack",
]

HEADER = struct.Struct(">Bd")
HEADER_SIZE = HEADER.size  # 9
NO_EXPIRY = 0xA0
"""The header's tag for an entry without expiry."""
EXPIRES = 0xA1
"""The header's tag for an entry whose expiry follows."""
NO_EXPIRY_HEADER = HEADER.pack(NO_EXPIRY, 0.0)

LEASE = b"lease:"
"""After the prefix: the lease keys."""
RELEASED = b"lease:released"
"""After the prefix: the channel released leases are announced on."""
INVALIDATED = b"invalidated"
"""After the prefix: the channel dropped entries are announced on (empty: all of them)."""

SLOTS = 16384
"""A Redis Cluster's hash slots."""


def _slot(name: bytes) -> int:
    """The hash slot of key ``name`` (Redis's ``CLUSTER KEYSLOT``: its hash tag, if any)."""
    start = name.find(b"{")
    if start != -1:
        end = name.find(b"}", start + 1)
        if end > start + 1:
            name = name[start + 1 : end]
    return binascii.crc_hqx(name, 0) % SLOTS


@functools.cache
def _slot_tags() -> tuple[bytes, ...]:
    """For each slot, a short tag that hashes to it (made once: about 0.1 s)."""
    tags: list[bytes | None] = [None] * SLOTS
    missing, number = SLOTS, 0
    while missing:
        tag = b"%x" % number
        slot = binascii.crc_hqx(tag, 0) % SLOTS
        if tags[slot] is None:
            tags[slot] = tag
            missing -= 1
        number += 1
    return tuple(tag for tag in tags if tag is not None)


def lease_name(prefix: bytes, key: bytes, *, cluster: bool) -> bytes:
    """The lease key of ``key``'s decision.

    On a cluster it lives in the decision's own slot, so on the same primary:
    otherwise a lease lives on some other node, and that node's failure would
    stop the leases (one computation per fleet) of keys whose primary is up.
    """
    if not cluster:
        return prefix + LEASE + key
    return in_slot_of(prefix, key, LEASE, key)


def in_slot_of(prefix: bytes, key: bytes, kind: bytes, rest: bytes) -> bytes:
    """``prefix + kind + rest``, hash-tagged into the slot of ``key``'s decision.

    What lives beside a decision on a cluster (its lease, its tag indexes) goes there.
    """
    return in_slot(prefix, _slot(prefix + key), kind, rest)


def in_slot(prefix: bytes, slot: int, kind: bytes, rest: bytes) -> bytes:
    """``prefix + kind + rest``, hash-tagged into ``slot``."""
    tagged = prefix + kind + b"{" + _slot_tags()[slot] + b"}" + rest
    # A prefix with braces of its own may tag the name first: then keep what hashes right.
    return tagged if _slot(tagged) == slot else prefix + kind + rest


MAX_EXPIRES_AT = 9.2e15
"""The latest expiry stored (Unix seconds, some 290 million years away).

Redis takes ``PXAT`` milliseconds up to 2**63 - 1 (about 9.22e15 seconds);
later expiries are clamped to this one, which is safely inside that range.
"""


def expiry(expires_at: float | None) -> float | None:
    """``expires_at`` as stored: ``inf`` is ``None`` (none); past ``MAX_EXPIRES_AT``, clamped."""
    if expires_at is not None and expires_at > MAX_EXPIRES_AT:
        return None if expires_at == math.inf else MAX_EXPIRES_AT
    return expires_at


def pack(value: bytes, expires_at: float | None) -> bytes:
    """What is stored for ``value``: the header, then the value."""
    if expires_at is None:
        return NO_EXPIRY_HEADER + value
    return HEADER.pack(EXPIRES, expires_at) + value


def unpack(raw: bytes, now: float) -> Entry | None:
    """The entry ``raw`` holds, ``None`` when it expired."""
    if len(raw) >= HEADER_SIZE:
        tag, expires_at = HEADER.unpack_from(raw)
        if tag == EXPIRES:
            return Entry(raw[HEADER_SIZE:], expires_at) if expires_at > now else None
        if tag == NO_EXPIRY:
            return Entry(raw[HEADER_SIZE:], None)
    # Not written by a RedisStore: the engine's decoder rejects it, counts and deletes it.
    return Entry(raw, None)


def pxat(expires_at: float) -> int:
    """Redis's expiry (``PXAT`` milliseconds) for ``expires_at``."""
    # Rounded up, so Redis never drops a key before its header says it expired.
    return math.ceil(expires_at * 1000)


def lease_value(token: bytes, ms: int) -> bytes:
    """What a lease key holds: the ttl it was taken for, so that readers can bound it."""
    return b"%d:%s" % (ms, token)


def lease_is_live(value: bytes | None, pttl: int) -> bool:
    """Whether a lease key holding ``value`` with ``pttl`` ms left (Redis's ``PTTL``) is live.

    Only a lease whose time left is within the ttl written in it: a key without
    an expiry (``-1``), or expiring later than its own ttl allows, or holding no
    lease at all, was not written by ``acquire_lease`` and would otherwise keep
    waiters waiting forever. The ``ACQUIRE`` script applies the same rule.
    """
    if value is None or pttl <= 0:
        return False
    ttl, colon, _ = value.partition(b":")
    return bool(colon) and ttl.isdigit() and pttl <= int(ttl)


def glob_escape(prefix: bytes) -> bytes:
    """``prefix`` with ``SCAN MATCH``'s special characters escaped."""
    for special in (b"\\", b"*", b"?", b"[", b"]"):
        prefix = prefix.replace(special, b"\\" + special)
    return prefix
