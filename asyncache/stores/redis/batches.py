"""Auto-pipelining: the commands a RedisStore's callers issue in one loop turn, sent together.

A lone call goes straight out (no hop, no task). While a call of the same
kind is in flight, the calls that arrive are gathered, and once the loop has
run every caller that was ready in that turn, one task sends them all: the
gets as one ``MGET`` (one per hash slot on a cluster), the adds as one
pipeline. Under concurrency this turns N round trips (and N of the client's
per-command Python costs) into one, which is how a hit through the cache
outpaces the raw driver it wraps.

Each caller awaits a future of its own, so the engine's per-call timeout
(``store_timeout``), cancellation and failure accounting keep their meaning
per call: a caller that times out stops waiting without touching the others,
and a batch that fails fails every caller in it with its own ``StoreError``.
A batch may also fail some of its calls only (a Redis Cluster node that
stalled fails the calls for its keys: ``nodes``): ``send`` then returns the
``StoreError`` in those calls' places.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from redis.exceptions import RedisError

from ...engine import cancel_and_wait
from ...errors import StoreError
from .gate import Gate, store_error

__all__ = ["Batcher"]

A = TypeVar("A")
R = TypeVar("R")


class Batcher(Generic[A, R]):
    """Gathers one kind of call while another is in flight, and sends them as one.

    Args:
        gate: the loop's bound on commands in flight; a batch takes one slot.
        send: sends a batch's arguments as one command (or pipeline) and
            returns one reply per argument, in order; a ``StoreError`` in a
            reply's place fails that call alone.
    """

    __slots__ = ("_gate", "_pending", "_send", "_tasks", "busy", "sent")

    def __init__(
        self, gate: Gate, send: Callable[[list[A]], Awaitable[Sequence[R | StoreError]]]
    ) -> None:
        self._gate = gate
        self._send = send
        self._pending: list[tuple[A, asyncio.Future[R]]] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.busy = 0
        """Calls of this kind in flight (lone ones and batches)."""
        self.sent = 0
        """Batches sent: each one command (or pipeline) for several calls."""

    def lone(self) -> bool:
        """Whether a call now should go straight out: nothing of its kind in flight or gathered.

        A caller that goes straight out counts itself in ``busy`` while it runs.
        """
        return not self.busy and self._pending is None

    async def join(self, argument: A) -> R:
        """Add ``argument`` to the batch this loop turn is gathering; its reply.

        Raises:
            StoreError: the batch failed (each caller gets an error of its own).
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        pending = self._pending
        if pending is None:
            pending = self._pending = []
            # The task's first step runs after every caller already ready in this turn.
            task = loop.create_task(self._flush())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        pending.append((argument, future))
        return await future

    async def _flush(self) -> None:
        batch, self._pending = self._pending or [], None
        # Callers that stopped waiting (timed out, cancelled) before the batch left.
        batch = [(argument, future) for argument, future in batch if not future.done()]
        if not batch:
            return
        self.busy += 1
        try:
            gate = self._gate
            if not gate.enter_now():
                await gate.wait()
            try:
                replies = await self._send([argument for argument, _ in batch])
            finally:
                gate.leave()
        except BaseException as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(_error_for(exc))
            if not isinstance(exc, Exception):
                raise
        else:
            self.sent += 1
            for (_, future), reply in zip(batch, replies, strict=True):
                if future.done():
                    continue
                if isinstance(reply, StoreError):
                    future.set_exception(_error_for(reply))
                else:
                    future.set_result(reply)
        finally:
            self.busy -= 1

    async def aclose(self) -> None:
        """Cancel the batches not yet answered; their callers get a ``StoreError``."""
        await cancel_and_wait(list(self._tasks))


def _error_for(exc: BaseException) -> Exception:
    """A caller's own error for a batch that failed with ``exc``."""
    if isinstance(exc, StoreError):
        error = StoreError(str(exc), shard=exc.shard)
        error.__cause__ = exc.__cause__  # a bug in the driver stays one (store_error)
        return error
    if isinstance(exc, RedisError | OSError):
        return store_error(exc)
    if isinstance(exc, asyncio.CancelledError):
        return StoreError("redis: the batch was cancelled (the store is closing)")
    if isinstance(exc, Exception):
        return store_error(exc)
    return StoreError(f"redis: the batch ended with {type(exc).__name__}")
