"""SQLiteStore's leases: one row per key being computed, in ``asyncache_leases``.

A lease is taken by an upsert that wins only over an expired lease or the
holder's own token; waiters poll (with backoff) for the entry or the lease's end.
"""

from __future__ import annotations

import time

import anyio

from ..protocol import Entry
from .sql import ACQUIRE, POLL, RELEASE, RENEW_LEASE, Execute

__all__ = ["LeaseTable"]

_POLL_FIRST = 0.005
_POLL_MAX = 0.1


class LeaseTable:
    """The ``LeaseStore`` capability of one SQLiteStore, on its connections.

    Args:
        execute: runs a statement that writes, on the store's write connection.
        read: runs a statement that only reads, on its read connection.
    """

    __slots__ = ("execute", "read")

    def __init__(self, execute: Execute, read: Execute) -> None:
        self.execute = execute
        self.read = read

    async def acquire(self, key: bytes, token: bytes, ttl: float) -> bool:
        """Take the lease on ``key`` for ``ttl`` seconds unless another token holds it."""
        now = time.time()
        return bool(await self.execute(ACQUIRE, (key, token, now + ttl, now)))

    async def renew(self, key: bytes, token: bytes, ttl: float) -> bool:
        """Extend the lease on ``key`` to ``ttl`` seconds from now if ``token`` still holds it."""
        return bool(await self.execute(RENEW_LEASE, (key, token, time.time() + ttl)))

    async def release(self, key: bytes, token: bytes) -> None:
        """Drop the lease on ``key`` if ``token`` still holds it."""
        await self.execute(RELEASE, (key, token))

    async def wait_for_entry(self, key: bytes, timeout: float) -> Entry | None:  # noqa: ASYNC109
        """Poll for an entry under ``key`` for up to ``timeout`` seconds.

        ``None`` at the timeout, and as soon as there is neither an entry nor a
        live lease.
        """
        deadline = time.monotonic() + timeout
        delay = _POLL_FIRST
        while True:
            rows = await self.read(POLL, (time.time(), key))
            value, expires_at, leased = rows[0]
            if value is not None:
                return Entry(value, None if expires_at is None else float(expires_at))
            remaining = deadline - time.monotonic()
            if not leased or remaining <= 0:
                return None
            await anyio.sleep(min(delay, remaining))
            delay = min(delay * 2, _POLL_MAX)
