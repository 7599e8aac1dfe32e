"""Shared deadlines: a timeout for every store call, without a timer for each.

``asyncio.timeout`` schedules a timer when a call starts and cancels it when
the call ends: on a hit over Redis that costs more than the rest of the
engine's work. Here the calls that start within one tick (``timeout / 16``)
share a bucket, and one timer per loop, firing once a tick while any call
waits, starts the next bucket and stops the calls of every bucket whose time
is up. A call that ends in time only leaves its bucket. So a call is stopped
no sooner than ``timeout`` after it started and at most two ticks later (a
timeout of 1 s: between 1 and 1.125 s), and a loop pays for one timer a tick,
however many calls it makes.

Stopping works as ``asyncio.timeout`` does: the timer cancels the task that is
still waiting, and the caller turns that cancellation (and only that one: a
cancellation from elsewhere stays a cancellation) into ``TimeoutError``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["Bucket", "Deadlines"]

T = TypeVar("T")
Bucket = set["asyncio.Task[object]"]

# Below this a tick would be too short to share: such timeouts get a timer per call.
SHARED_FROM = 0.016


class _Ring:
    """One loop's buckets: the one calls join now, and those waiting for their time."""

    __slots__ = ("current", "handle", "waiting")

    def __init__(self) -> None:
        self.current: Bucket | None = None
        self.waiting: deque[tuple[float, Bucket]] = deque()
        self.handle: asyncio.TimerHandle | None = None


class Deadlines:
    """Calls that share deadlines, on every loop that makes them.

    Args:
        timeout: seconds a call may take.
    """

    __slots__ = ("_expired", "_rings", "shared", "tick", "timeout")

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.tick = timeout / 16
        self.shared = timeout >= SHARED_FROM
        """Whether calls share deadlines (a shorter timeout gets ``asyncio.timeout`` per call)."""
        self._rings: dict[asyncio.AbstractEventLoop, _Ring] = {}
        self._expired: set[asyncio.Task[object]] = set()

    async def run(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable`` under a shared deadline (in a task).

        Raises:
            TimeoutError: the deadline passed first.
        """
        task: asyncio.Task[object] = asyncio.current_task()  # type: ignore[assignment]
        bucket = self.enter(task)
        cancelling = task.cancelling()
        try:
            return await awaitable
        except asyncio.CancelledError:
            if self.timed_out(task, cancelling):
                raise TimeoutError from None
            raise
        finally:
            self.leave(bucket, task)

    def enter(self, task: asyncio.Task[object]) -> Bucket:
        """Put ``task`` in the bucket of calls starting now; its caller must ``leave`` it."""
        loop = asyncio.get_running_loop()
        ring = self._rings.get(loop)
        if ring is None:
            ring = self._rings[loop] = _Ring()
        bucket = ring.current
        if bucket is None:
            bucket = ring.current = set()
            # Its last call may start a tick from now, and must then wait a full timeout.
            ring.waiting.append((loop.time() + self.tick + self.timeout, bucket))
            if ring.handle is None:
                ring.handle = loop.call_later(self.tick, self._turn, loop, ring)
        bucket.add(task)
        return bucket

    def timed_out(self, task: asyncio.Task[object], cancelling: int) -> bool:
        """Whether the cancellation ``task`` just received is this deadline's (and only it).

        ``cancelling`` is ``task.cancelling()`` before the call started.
        """
        if task not in self._expired:
            return False
        self._expired.discard(task)
        return task.uncancel() <= cancelling

    def leave(self, bucket: Bucket, task: asyncio.Task[object]) -> None:
        """Take ``task`` out of ``bucket``: its call ended."""
        bucket.discard(task)
        if task in self._expired:  # cancelled as the call ended, too late to notice
            self._expired.discard(task)
            task.uncancel()

    def _turn(self, loop: asyncio.AbstractEventLoop, ring: _Ring) -> None:
        """Once a tick: start a new bucket, stop the calls whose time is up."""
        ring.current = None
        now = loop.time()
        waiting = ring.waiting
        while waiting and waiting[0][0] <= now:
            for task in waiting.popleft()[1]:
                if not task.done():
                    self._expired.add(task)
                    task.cancel()
        # Buckets that emptied need no timer: only those with calls still waiting do.
        while waiting and not waiting[0][1]:
            waiting.popleft()
        if waiting:
            ring.handle = loop.call_later(self.tick, self._turn, loop, ring)
        else:
            ring.handle = None
            if loop.is_closed() or not ring.waiting:
                self._rings.pop(loop, None)
