"""RedisStore's leases: one key per key being computed, and a channel announcing releases.

A lease is ``<prefix>lease:<key>`` holding ``<ms>:<token>`` for ``ms``
milliseconds, taken (or renewed by its holder) by a script (``ACQUIRE``) unless
another token's live lease holds the key; releasing it is a compare-and-delete
script that also publishes the key on ``<prefix>lease:released``. A lease is
live only while its time left is within the ttl written in it
(``layout.lease_is_live``), whatever wrote the key: one without an expiry would
otherwise keep every waiter until ``coalesce_timeout``.

Waiters are woken by the release message through the store's subscription on
their event loop (``channels.Listener``), and poll with backoff too, for a lost
message or a listener that is down.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.asyncio.cluster import RedisCluster

from ..protocol import Entry
from .gate import Gate
from .layout import RELEASED, lease_is_live, lease_name, lease_value, unpack
from .nodes import NodeHealth, on_node
from .scripts import ACQUIRE, RELEASE, RENEW_LEASE
from .url import Client

__all__ = ["LeaseKeys"]

T = TypeVar("T")

_POLL_FIRST = 0.005
_POLL_MAX = 0.25


class LeaseKeys:
    """The ``LeaseStore`` capability of one RedisStore on one event loop.

    Args:
        client: the client of that loop.
        gate: its gate; every command goes through it.
        prefix: the store's prefix.
        pipeline: makes a non-transactional pipeline on ``client``.
        listen: starts the loop's subscription (which calls ``wake``).
        counters: the store's counters; ``lease_notifications`` counts here.
        health: a cluster's health per node: a lease step on a cooling node's key
            fails at once (``nodes.on_node``), a failed one counts against its node.
        node_timeout: a cluster node's own bound (the client's ``socket_timeout``).
        node_gate: a cluster node's own gate: on a cluster a lease step takes a slot
            of its node's gate instead of ``gate``.
    """

    def __init__(
        self,
        client: Client,
        gate: Gate,
        prefix: bytes,
        pipeline: Callable[[], Any],
        listen: Callable[[], None],
        counters: dict[str, int],
        health: NodeHealth | None = None,
        node_timeout: float | None = None,
        node_gate: Callable[[str], Gate] | None = None,
    ) -> None:
        self.node_gate = node_gate
        self.client = client
        self.health = health
        self.node_timeout = node_timeout
        self.gate = gate
        self.prefix = prefix
        self.cluster = isinstance(client, RedisCluster)
        self.channel = prefix + RELEASED
        self.pipeline = pipeline
        self.listen = listen
        self.counters = counters
        self.acquire_script = client.register_script(ACQUIRE)
        self.release_script = client.register_script(RELEASE)
        self.renew_script = client.register_script(RENEW_LEASE)
        self.waiters: dict[bytes, set[asyncio.Event]] = {}
        """The events of the callers waiting on each key."""
        self.closed = False

    def lease_name(self, key: bytes) -> bytes:
        """The lease key of ``key`` (on a cluster, in the slot of ``key``'s decision)."""
        return lease_name(self.prefix, key, cluster=self.cluster)

    async def acquire(self, key: bytes, token: bytes, ttl: float) -> bool:
        """Take the lease on ``key`` for ``ttl`` seconds unless another token holds it.

        The holder's own token renews it for ``ttl`` from now.
        """
        ms = max(1, math.ceil(ttl * 1000))
        name = self.lease_name(key)
        taken = await self.step(
            name, lambda: self.acquire_script(keys=[name], args=[lease_value(token, ms), ms, token])
        )
        return bool(taken)

    async def renew(self, key: bytes, token: bytes, ttl: float) -> bool:
        """Extend the lease on ``key`` to ``ttl`` seconds from now if ``token`` still holds it."""
        ms = max(1, math.ceil(ttl * 1000))
        name = self.lease_name(key)
        kept = await self.step(
            name, lambda: self.renew_script(keys=[name], args=[lease_value(token, ms), ms, token])
        )
        return bool(kept)

    async def release(self, key: bytes, token: bytes) -> None:
        """Drop the lease if ``token`` still holds it, and wake whoever waits on ``key``."""
        name = self.lease_name(key)
        await self.step(
            name, lambda: self.release_script(keys=[name], args=[token, self.channel, key])
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
        self.listen()
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
        """The live entry under ``key`` and whether a live lease holds it, in one round trip."""
        pipe = self.pipeline()
        pipe.execute_command("GET", self.prefix + key)
        lease = self.lease_name(key)
        pipe.execute_command("GET", lease)
        pipe.execute_command("PTTL", lease)
        raw, lease, left = await self.step(lease, pipe.execute)
        entry = None if raw is None else unpack(raw, time.time())
        return entry, lease_is_live(lease, int(left))

    async def step(self, name: bytes, send: Callable[[], Awaitable[T]]) -> T:
        """``send()`` through the gate; on a cluster, per node (``nodes.on_node``)."""
        client, health, node_gate = self.client, self.health, self.node_gate
        if health is None or node_gate is None or not isinstance(client, RedisCluster):
            async with self.gate:
                return await send()
        await self.gate.ensure_ready()
        return await on_node(client, name, health, self.node_timeout, node_gate, send)

    def waiting(self) -> int:
        """How many callers wait for an entry."""
        return sum(len(events) for events in self.waiters.values())

    async def wake(self, key: bytes) -> None:
        """A release of ``key`` was announced: its waiters look again."""
        events = self.waiters.get(key)
        if events:
            self.counters["lease_notifications"] += 1
            for event in events:
                event.set()

    def close(self) -> None:
        """Wake every waiter (they return ``None``); idempotent."""
        self.closed = True
        for events in self.waiters.values():
            for event in events:
                event.set()
