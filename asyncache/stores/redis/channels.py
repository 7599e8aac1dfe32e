"""RedisStore's pub/sub: one subscription per store and event loop, and who hears it.

The subscription takes the channels under the store's prefix: ``lease:released``
(a released lease: its waiters look again) and ``invalidated`` (entries that
``clear`` or ``delete`` dropped: memory tiers in front of any store on the
prefix drop their copies), and on a single Redis the server's own
``__keyevent@<db>__:evicted``, which carries something only when the server's
``notify-keyspace-events`` includes ``Ee``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping

from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from ...errors import StoreError
from .driver import open_pubsub
from .gate import Gate
from .layout import LEASE
from .url import Client

__all__ = ["Handler", "Invalidated", "Invalidations", "Listener"]

logger = logging.getLogger("asyncache.redis")

Handler = Callable[[bytes], Awaitable[None]]
"""Handles one message's data."""

Invalidated = Callable[[bytes | None], Awaitable[object]]
"""Told that copies of the entry under a key (``None``: of every entry) must go."""

_FIRST_DELAY = 0.005
_MAX_DELAY = 2.0


class Invalidations:
    """The callbacks that hear a store's invalidations (the tiers in front of it).

    Args:
        prefix: the store's prefix, to tell its keys in eviction notices.
    """

    def __init__(self, prefix: bytes) -> None:
        self.prefix = prefix
        self.lease_prefix = prefix + LEASE
        self.callbacks: list[Invalidated] = []
        self.heard = 0
        """Invalidations relayed to the callbacks (gaps included)."""

    def subscribe(self, callback: Invalidated) -> Callable[[], None]:
        """Add ``callback``; return what removes it (idempotent)."""
        self.callbacks.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self.callbacks.remove(callback)

        return unsubscribe

    async def announce(self, key: bytes | None) -> None:
        """Tell every callback; one that fails is logged, and the others still hear it."""
        if not self.callbacks:
            return
        self.heard += 1
        for callback in list(self.callbacks):
            try:
                await callback(key)
            except Exception:
                logger.exception("an invalidation callback failed")

    async def published(self, data: bytes) -> None:
        """A message on the ``invalidated`` channel: a key, or empty for every entry."""
        await self.announce(data or None)

    async def evicted(self, name: bytes) -> None:
        """An eviction notice: one of this prefix's entries, or some other key."""
        if name.startswith(self.prefix) and not name.startswith(self.lease_prefix):
            await self.announce(name[len(self.prefix) :])

    async def gap(self) -> None:
        """Messages may have been missed (a (re)subscription, a lost one): drop every copy."""
        await self.announce(None)


class Listener:
    """One pub/sub subscription on one event loop, relayed to a handler per channel.

    Started on first need (``ensure``), it subscribes again after a backoff
    when its connection drops. Once every channel is confirmed, and when a
    subscription is lost, ``on_gap`` runs: messages may have been missed.

    Args:
        client: the client of that loop.
        gate: its gate (a cluster client is prepared before subscribing).
        name: the task's name.
        handlers: channel to handler.
        on_gap: what to do when messages may have been missed.
    """

    def __init__(
        self,
        client: Client,
        gate: Gate,
        name: str,
        handlers: Mapping[bytes, Handler],
        on_gap: Callable[[], Awaitable[None]],
    ) -> None:
        self.client = client
        self.gate = gate
        self.name = name
        self.handlers = dict(handlers)
        self.on_gap = on_gap
        self.closed = False
        self._task: asyncio.Task[None] | None = None

    def ensure(self) -> None:
        """Start listening unless it already does (from inside the loop)."""
        if self._task is None and not self.closed:
            self._task = asyncio.get_running_loop().create_task(self._listen(), name=self.name)

    async def aclose(self) -> None:
        """Stop listening; idempotent."""
        self.closed = True
        task, self._task = self._task, None
        # redis-py can swallow a cancellation that lands inside SUBSCRIBE (8.1 does,
        # when the connection is being made): cancel again until it takes.
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=0.1)
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _honour_cancellation(self) -> None:
        """Raise CancelledError for a cancellation redis-py swallowed.

        redis-py 8.1 can swallow a cancellation that lands inside SUBSCRIBE. The
        task still counts it (``cancelling()``), so honour it here: otherwise the
        single cancel that ``asyncio.run`` sends at its end is lost and the
        process never exits.
        """
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError

    def _listening(self) -> bool:
        """Whether to go on listening (raising for a swallowed cancellation)."""
        self._honour_cancellation()
        return not self.closed

    async def _listen(self) -> None:
        delay = _FIRST_DELAY
        while self._listening():
            pubsub: PubSub | None = None
            confirmed = False
            try:
                await self.gate.ensure_ready()
                pubsub = open_pubsub(self.client)
                await pubsub.subscribe(*self.handlers)
                await self._confirmed(pubsub)
                confirmed = True
                delay = _FIRST_DELAY
                await self.on_gap()
                await self._relay(pubsub)
            except (RedisError, OSError, StoreError):
                pass  # lease waiters poll meanwhile; subscribe again after a backoff
            finally:
                if pubsub is not None:
                    with contextlib.suppress(RedisError, OSError):
                        await pubsub.aclose()  # type: ignore[no-untyped-call,unused-ignore]
            if confirmed:
                self._honour_cancellation()
                await self.on_gap()
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_DELAY)

    async def _confirmed(self, pubsub: PubSub) -> None:
        """Wait until the server confirms every channel (messages after that are heard)."""
        waiting = set(self.handlers)
        while waiting and self._listening():
            message = await pubsub.get_message(timeout=30.0)
            if message is None:
                continue
            if message.get("type") == "subscribe":
                waiting.discard(message["channel"])
            else:
                await self._dispatch(message)

    async def _relay(self, pubsub: PubSub) -> None:
        while self._listening():
            # A bounded wait, not timeout=None: older redis-py applies
            # socket_timeout to a blocking read and would drop the subscription.
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=30.0)
            if message is not None:
                await self._dispatch(message)

    async def _dispatch(self, message: Mapping[str, object]) -> None:
        channel, data = message.get("channel"), message.get("data")
        if message.get("type") != "message" or not isinstance(channel, bytes):
            return
        handler = self.handlers.get(channel)
        if handler is not None and isinstance(data, bytes):
            await handler(data)
