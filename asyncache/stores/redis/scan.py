"""RedisStore's whole-prefix operations: count, clear, describe and walk, by ``SCAN``.

Each is one ``SCAN MATCH <prefix>*`` (over every primary of a cluster), so
O(keys in the database): for tools and operators, not for hot paths. Redis
drops expired keys itself, so every key found is live. An entry whose own key
starts with ``lease:`` is taken for a lease; a 16-byte key from ``make_key``
does with probability 2**-48.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from redis.asyncio.cluster import RedisCluster

from ..protocol import Entry
from .layout import LEASE, glob_escape, unpack
from .tags import FORGOTTEN, LABELS, TAGS
from .url import Client

__all__ = ["count_entries", "describe_prefix", "unlink_all", "walk_entries"]

# Keys unlinked, or measured, per round trip.
_CHUNK = 500


def _match(prefix: bytes) -> bytes:
    return glob_escape(prefix) + b"*"


def _not_entries(prefix: bytes) -> tuple[bytes, ...]:
    """What the names under ``prefix`` that hold no entry start with: leases, tag indexes
    and tombstones (``tags``)."""
    return (prefix + LEASE, prefix + TAGS, prefix + FORGOTTEN, prefix + LABELS)


async def count_entries(client: Client, prefix: bytes) -> int:
    """How many entries (not leases) are under ``prefix``."""
    total = 0
    others = _not_entries(prefix)
    async for name in client.scan_iter(match=_match(prefix), count=1000):
        if not name.startswith(others):
            total += 1
    return total


async def unlink_all(client: Client, prefix: bytes) -> None:
    """``UNLINK`` every key under ``prefix`` (entries and leases), and nothing else."""
    chunk: list[bytes] = []
    async for name in client.scan_iter(match=_match(prefix), count=1000):
        chunk.append(name)
        if len(chunk) >= _CHUNK:
            await client.unlink(*chunk)
            chunk = []
    if chunk:
        await client.unlink(*chunk)


async def walk_entries(
    client: Client, prefix: bytes, batch_size: int
) -> AsyncIterator[list[tuple[bytes, Entry]]]:
    """The live entries under ``prefix`` (keys without it), one ``MGET`` per batch.

    ``SCAN`` may report a key twice; each is yielded once (the walk remembers
    the names it has seen: 16 bytes and change per entry).
    """
    others = _not_entries(prefix)
    seen: set[bytes] = set()
    names: list[bytes] = []

    async def read() -> list[tuple[bytes, Entry]]:
        if isinstance(client, RedisCluster):
            raws = await client.mget_nonatomic(names)
        else:
            raws = await client.mget(names)
        now = time.time()
        batch = []
        for name, raw in zip(names, raws, strict=True):
            entry = None if raw is None else unpack(raw, now)
            if entry is not None:
                batch.append((name[len(prefix) :], entry))
        names.clear()
        return batch

    async for name in client.scan_iter(match=_match(prefix), count=1000):
        if name.startswith(others) or name in seen:
            continue
        seen.add(name)
        names.append(name)
        if len(names) >= batch_size:
            batch = await read()
            if batch:
                yield batch
    if names:
        batch = await read()
        if batch:
            yield batch


async def describe_prefix(
    client: Client, prefix: bytes, pipeline: Callable[[], Any]
) -> dict[str, Any]:
    """Entries, bytes (values with their 9-byte header), expiries and leases under ``prefix``.

    Args:
        client: the store's client.
        prefix: the store's prefix.
        pipeline: makes a non-transactional pipeline on ``client``.

    Raises:
        redis.exceptions.RedisError: a command failed.
    """
    lease_prefix = prefix + LEASE
    indexes = (prefix + TAGS, prefix + FORGOTTEN, prefix + LABELS)
    now = time.time()
    entries = leases = forever = stored_bytes = 0
    first: float | None = None
    last: float | None = None
    names: list[bytes] = []

    async def measure() -> None:
        nonlocal forever, stored_bytes, first, last
        pipe = pipeline()
        for name in names:
            pipe.strlen(name)
            pipe.pttl(name)
        replies = await pipe.execute()
        for length, ttl_ms in zip(replies[::2], replies[1::2], strict=True):
            stored_bytes += length
            if ttl_ms == -1:
                forever += 1
                continue
            if ttl_ms < 0:
                continue  # gone since the scan found it
            expires = now + ttl_ms / 1000
            first = expires if first is None else min(first, expires)
            last = expires if last is None else max(last, expires)
        names.clear()

    async for name in client.scan_iter(match=_match(prefix), count=1000):
        if name.startswith(lease_prefix):
            leases += 1
            continue
        if name.startswith(indexes):
            continue
        entries += 1
        names.append(name)
        if len(names) >= _CHUNK:
            await measure()
    if names:
        await measure()
    return {
        "entries": entries,
        "live": entries,
        "expired": 0,
        "without_expiry": forever,
        "stored_bytes": stored_bytes,
        "next_expiry": first,
        "last_expiry": last,
        "leases": leases,
    }
