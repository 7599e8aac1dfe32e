"""RedisStore's leases: one key per key being computed, and a channel announcing releases.

A lease is ``SET <prefix>lease:<key> token NX PX ms``; releasing it is a
compare-and-delete script that also publishes the key on
``<prefix>lease:released``. Waiters are woken by that message through one
subscription per store, and poll with backoff too, for a lost message or a
listener that is down.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable
from typing import Any

from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from ...errors import StoreError
from ...stores.protocol import Entry
from .gate import Gate
from .layout import LEASE, RELEASED, unpack
from .scripts import RELEASE
from .url import Client

__all__ = ["LeaseKeys"]

_POLL_FIRST = 0.005
_POLL_MAX = 0.25


class LeaseKeys:
    """The ``LeaseStore`` capability of one RedisStore: its lease keys and their channel.

    Args:
        client: the store's client.
        gate: the store's gate; every command goes through it.
        prefix: the store's prefix.
        pipeline: makes a non-transactional pipeline on ``client``.
    """

    def __init__(
        self, client: Client, gate: Gate, prefix: bytes, pipeline: Callable[[], Any]
    ) -> None:
        self.client = client
        self.gate = gate
        self.prefix = prefix
        self.lease_prefix = prefix + LEASE
        self.channel = prefix + RELEASED
        self.pipeline = pipeline
        self.release_script = client.register_script(RELEASE)
        self.waiters: dict[bytes, set[asyncio.Event]] = {}
        """The events of the callers waiting on each key."""
        self.notified = 0
        """Releases announced to a waiter of this store."""
        self.closed = False
        self._listener: asyncio.Task[None] | None = None

    async def acquire(self, key: bytes, token: bytes, ttl: float) -> bool:
        """Take the lease on ``key`` for ``ttl`` seconds unless another holds it."""
        ms = max(1, math.ceil(ttl * 1000))
        async with self.gate:
            taken = await self.client.execute_command(
                "SET", self.lease_prefix + key, token, "NX", "PX", ms
            )
        return bool(taken)

    async def release(self, key: bytes, token: bytes) -> None:
        """Drop the lease if ``token`` still holds it, and wake whoever waits on ``key``."""
        async with self.gate:
            await self.release_script(
                keys=[self.lease_prefix + key], args=[token, self.channel, key]
            )

    async def wait_for_entry(self, key: bytes, timeout: float) -> Entry | None:  # noqa: ASYNC109
        """Wait up to ``timeout`` seconds for an entry under ``key`` to appear.

        ``None`` at the timeout, and as soon as there is neither an entry nor a lease.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        event = asyncio.Event()
        # Registered before the first look, so a release in between is not lost.
        self.waiters.setdefault(key, set()).add(event)
        self._ensure_listener()
        delay = _POLL_FIRST
        try:
            while not self.closed:
                entry, leased = await self.probe(key)
                if entry is not None:
                    return entry
                remaining = deadline - loop.time()
                if not leased or remaining <= 0:
                    return None
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(delay, remaining)):
                        await event.wait()
                event.clear()
                delay = min(delay * 2, _POLL_MAX)
            return None
        finally:
            events = self.waiters.get(key)
            if events is not None:
                events.discard(event)
                if not events:
                    del self.waiters[key]

    async def probe(self, key: bytes) -> tuple[Entry | None, bool]:
        """The live entry under ``key`` and whether its lease is held, in one round trip."""
        pipe = self.pipeline()
        pipe.execute_command("GET", self.prefix + key)
        pipe.execute_command("EXISTS", self.lease_prefix + key)
        async with self.gate:
            raw, leased = await pipe.execute()
        entry = None if raw is None else unpack(raw, time.time())
        return entry, bool(leased)

    def waiting(self) -> int:
        """How many callers wait for an entry."""
        return sum(len(events) for events in self.waiters.values())

    async def aclose(self) -> None:
        """Stop listening and wake every waiter (they return ``None``); idempotent."""
        self.closed = True
        listener, self._listener = self._listener, None
        # redis-py can swallow a cancellation that lands inside SUBSCRIBE (8.1 does,
        # when the connection is being made): cancel again until it takes.
        while listener is not None and not listener.done():
            listener.cancel()
            await asyncio.wait({listener}, timeout=0.1)
        if listener is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await listener
        for events in self.waiters.values():
            for event in events:
                event.set()

    def _ensure_listener(self) -> None:
        if self._listener is None and not self.closed:
            self._listener = asyncio.get_running_loop().create_task(
                self._listen(), name=f"asyncache-redis-leases-{self.prefix!r}"
            )

    async def _listen(self) -> None:
        """Wake the waiters of each key a released lease announces, for the store's life."""
        delay = _POLL_FIRST
        while not self.closed:
            pubsub: PubSub | None = None
            try:
                await self.gate.ensure_ready()
                pubsub = self.client.pubsub()
                await pubsub.subscribe(self.channel)
                delay = _POLL_FIRST
                await self._relay(pubsub)
            except (RedisError, OSError, StoreError):
                pass  # waiters keep polling meanwhile; subscribe again after a backoff
            finally:
                if pubsub is not None:
                    with contextlib.suppress(RedisError, OSError):
                        await pubsub.aclose()  # type: ignore[no-untyped-call]
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def _relay(self, pubsub: PubSub) -> None:
        while not self.closed:
            # A bounded wait, not timeout=None: older redis-py applies
            # socket_timeout to a blocking read and would drop the subscription.
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=30.0)
            if message is None or message.get("type") != "message":
                continue
            events = self.waiters.get(message["data"])
            if events:
                self.notified += 1
                for event in events:
                    event.set()
