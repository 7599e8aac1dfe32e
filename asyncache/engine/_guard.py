"""StoreGuard: the engine's store calls, bounded, counted, and never raised; and the
shared deadlines that bound them.

The cache never makes a prediction fail because of its store. Every call the
engine makes goes through ``StoreGuard.call``: one that raises or outlasts
``store_timeout`` is ``None`` to the caller (a miss, a skipped write), is
counted in ``errors`` and logged at a bounded rate; after ``failure_threshold``
failures in a row the store is left alone for ``failure_cooldown`` seconds.

A bug is not a miss. A fault of the store's service (a timeout, a lost
connection, a busy or locked database, a server's error reply, a memory limit)
passes; a ``TypeError``, ``AttributeError``, ``NameError`` or ``ImportError``
(``BUGS``), raised by the store or wrapped by it (``StoreError`` from one),
does not: the same code with the same versions fails the same way on every
call, so as a miss it would be a cache that never hits, silently (a store
written for another driver or anyio release). Such a call is counted, logged
with its traceback (once per interval) and raised to the caller as it is, its
causes chained.

Reads and writes keep their own health: a store that cannot write for a while
(another process holds SQLite's write lock, a Redis replica is read-only) keeps
answering hits, and a store that cannot read does not stop the writes that
fill it.

A store made of parts that fail alone (a Redis Cluster's primaries) keeps
each part's health itself: a failure that names its part (``StoreError.shard``)
is counted and logged but never cools the whole store, and a store with
``isolates_failures`` (it times and cools its parts' reads itself) is never
cooled as a whole, reads nor writes: its writes and leases each go to one
key's node, so the failures of a dead primary's keys would otherwise stop
every other node's writes (their decisions then unstored, made again, and
answered differently) for the whole cool-down. One stalled primary then costs
only its keys.

One timeout per request: a request's path may make several store calls (a
get, a lease, an add, a release). Once one of them timed out, the writes and
lease steps after it in that request skip the store (a skipped write, a
computation without a lease), so a stalled store costs a request one
``store_timeout``, not one per call. A request is an engine entry
(``Engine.get_or_compute``, ``lookup``, a batch) and the tasks it starts (a
flight's leader copies the caller's context); each entry starts with its own.

Shared deadlines: a timeout for every store call, without a timer for each.

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
import time
import types
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator
from contextvars import ContextVar
from typing import Any, TypeVar

from .._runtime import timeout_after
from ..errors import ConfigurationError
from ..stats import CacheStats, RateLimitedLog

__all__ = ["BUGS", "READS", "Bucket", "Deadlines", "Health", "StoreGuard", "bug_in", "new_request"]

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


# What a store call raises only when code and versions disagree: a bug, never a miss.
BUGS: tuple[type[Exception], ...] = (TypeError, AttributeError, NameError, ImportError)


def bug_in(exc: BaseException) -> BaseException | None:
    """The sign of a bug in ``exc`` or in what it wraps (its ``__cause__`` chain,
    an exception group's members), or ``None`` for a fault of the store's service."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        error = pending.pop()
        if id(error) in seen:
            continue
        seen.add(id(error))
        if isinstance(error, BUGS):
            return error
        if isinstance(error, BaseExceptionGroup):
            pending.extend(error.exceptions)
        if error.__cause__ is not None:
            pending.append(error.__cause__)
    return None


# The calls that only read; every other call (add, renew, delete, leases...) writes.
READS = frozenset({"get", "get_many"})

# Whether a store call of the running request timed out (see the module's doc).
_TIMED_OUT: ContextVar[bool] = ContextVar("asyncache_store_timed_out", default=False)


def new_request() -> None:
    """Start a request's store budget: none of its calls has timed out yet."""
    if _TIMED_OUT.get():
        _TIMED_OUT.set(False)


def timed_out_before(what: str) -> bool:
    """Whether ``what`` is a write or lease step of a request whose store call timed out."""
    return _TIMED_OUT.get() and what not in READS


@types.coroutine
def _resume(coro: Coroutine[Any, Any, T], yielded: Any) -> Generator[Any, Any, T]:
    """Drive a coroutine that already ran to its first suspension.

    Stores like MemoryStore answer without suspending; starting their coroutine
    by hand lets those answers skip the timeout machinery entirely, and only a
    store that really waits joins a shared deadline (``deadlines.py``).
    """
    while True:
        try:
            sent = yield yielded
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            try:
                yielded = coro.throw(exc)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
        else:
            try:
                yielded = coro.send(sent)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]


class Health:
    """Failures in a row of one kind of call, and the cool-down they started."""

    __slots__ = ("failures", "last_error", "skip_until")

    def __init__(self) -> None:
        self.failures = 0
        """Failures in a row; a success sets it back to zero."""
        self.last_error: Exception | None = None
        """The latest call's failure; ``None`` once a call succeeds (replay says why it missed)."""
        self.skip_until = 0.0
        """``time.monotonic()`` until which these calls are skipped; 0 when they are not."""

    def cooling(self) -> bool:
        """Whether these calls are being skipped after repeated failures."""
        return bool(self.skip_until) and time.monotonic() < self.skip_until


class StoreGuard:
    """Runs one cache's store calls under its timeout and failure accounting.

    Args:
        store: the store guarded; only its ``enforces_timeouts`` is read here
            (see ``DecisionStore``): a store that bounds every call itself is
            not timed again.
        timeout: seconds a call may take before it is a failure; ``None``
            waits as long as the store takes.
        failure_threshold: failures in a row before the cool-down.
        failure_cooldown: seconds the store is skipped after that.
        stats: the cache's counters (``errors`` is counted here).
        log: the cache's rate-limited log.
    """

    __slots__ = (
        "_deadlines",
        "_isolated",
        "_log",
        "_stats",
        "_suspends",
        "_timed",
        "failure_cooldown",
        "failure_threshold",
        "read_only",
        "reads",
        "writes",
    )

    def __init__(
        self,
        store: object,
        *,
        timeout: float | None,
        failure_threshold: int,
        failure_cooldown: float,
        stats: CacheStats,
        log: RateLimitedLog,
    ) -> None:
        self.timeout = timeout
        self.failure_threshold = failure_threshold
        self.failure_cooldown = failure_cooldown
        self._stats = stats
        self._log = log
        self.reads = Health()
        """The health of ``get`` and ``get_many``."""
        self.writes = Health()
        """The health of every other call."""
        self.read_only = False
        """Set in replay: every call but a read is refused (``None``) without reaching the store."""
        self.use(store)

    @property
    def timeout(self) -> float | None:
        """Seconds a call may take before it is a failure; ``None`` waits as long as it takes."""
        return None if self._deadlines is None else self._deadlines.timeout

    @timeout.setter
    def timeout(self, timeout: float | None) -> None:
        self._deadlines = None if timeout is None else Deadlines(timeout)

    def use(self, store: object) -> None:
        """Guard ``store`` from now on (the CLI's ``--store`` swaps it before first use)."""
        # Read once: the hit path then tests one attribute of ours, not the store's.
        self._timed = getattr(store, "enforces_timeouts", False) is not True
        # Set once a call suspended: later calls skip starting by hand (``_resume``).
        self._suspends = False
        self._isolated = getattr(store, "isolates_failures", False) is True

    def health(self, what: str) -> Health:
        """The health that call ``what`` counts toward."""
        return self.reads if what in READS else self.writes

    def cooling(self, what: str) -> bool:
        """Whether calls like ``what`` are being skipped after repeated failures."""
        return self.health(what).cooling()

    async def call(self, what: str, make: Callable[[], Awaitable[T]]) -> T | None:
        """Run ``make()``'s store call; a failure or timeout is ``None``, counted and logged.

        A bug (``BUGS``, raised or wrapped by the store) is raised, counted and logged.

        Args:
            what: the call's name, for the log (``"get"``, ``"add_many"``...).
            make: starts the call; not called at all while the store cools down.
        """
        if what in READS:
            health = self.reads
        elif self.read_only:
            return None
        else:
            health = self.writes
        if health.skip_until:
            if time.monotonic() < health.skip_until:
                return None
            health.skip_until = 0.0
        if what not in READS and _TIMED_OUT.get():
            return None  # this request already paid a store timeout
        try:
            awaitable = make()
            if not self._timed:
                result: T = await awaitable
            elif self._suspends and self._task() is not None:
                # This store waits on I/O: no point starting its call by hand first.
                result = await self._deadlines.run(awaitable)  # type: ignore[union-attr]
            elif isinstance(awaitable, Coroutine):
                try:
                    yielded = awaitable.send(None)
                except StopIteration as stop:
                    result = stop.value
                else:
                    self._suspends = True
                    result = await self._bounded(_resume(awaitable, yielded))
            else:
                result = await self._bounded(awaitable)
        except (asyncio.CancelledError, ConfigurationError):
            # A store that cannot work here at all (RedisStore under trio) says so at
            # once, rather than failing every call as a miss.
            raise
        except Exception as exc:
            self.failed(what, exc)
            return None
        health.failures = 0
        health.last_error = None
        return result

    def _task(self) -> asyncio.Task[Any] | None:
        """The task a call can share deadlines in (asyncio, a timeout long enough), or None."""
        deadlines = self._deadlines
        if deadlines is None or not deadlines.shared:
            return None
        try:
            return asyncio.current_task()
        except RuntimeError:  # no asyncio loop: trio
            return None

    async def _bounded(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable`` under the timeout: a shared deadline when it can."""
        if self._task() is not None:
            return await self._deadlines.run(awaitable)  # type: ignore[union-attr]
        async with timeout_after(self.timeout):  # asyncio's, or anyio's under trio
            return await awaitable

    def recovered(self, what: str) -> None:
        """A call like ``what`` succeeded: its kind's failures and cool-down are over."""
        health = self.health(what)
        health.failures = 0
        health.skip_until = 0.0

    def failed(self, what: str, exc: Exception) -> None:
        """Count and log a failed store call; start its kind's cool-down after too many in a row.

        Raises:
            Exception: ``exc`` itself when it is (or wraps) a sign of a bug (``BUGS``).
        """
        self._stats.errors += 1
        self.health(what).last_error = exc
        bug = bug_in(exc)
        if bug is not None:
            self._log.error(
                f"bug-{what}",
                "asyncache: store %s raised %s, a bug or a version mismatch: "
                "raised to the caller, not treated as a miss",
                what,
                type(bug).__name__,
                exc_info=exc,
            )
            note = (
                f"asyncache: raised by the store's {what}; a {type(bug).__name__} is a bug "
                "or a version mismatch, never a miss"
            )
            if note not in getattr(exc, "__notes__", ()):
                exc.add_note(note)  # once: a batch may hand one error to several calls
            raise exc
        if isinstance(exc, TimeoutError):
            _TIMED_OUT.set(True)
        reason = "timed out" if isinstance(exc, TimeoutError) else f"failed: {exc!r}"
        self._log.warning(what, "asyncache: store %s %s; treated as a miss", what, reason)
        if self._isolated or getattr(exc, "shard", None) is not None:
            return  # one part failed: the store keeps that part's health, the rest serves
        health = self.health(what)
        health.failures += 1
        if health.failures >= self.failure_threshold:
            health.skip_until = time.monotonic() + self.failure_cooldown
            kind = "reads" if health is self.reads else "writes"
            self._log.warning(
                f"cooldown-{kind}",
                "asyncache: %d store %s failed in a row; skipping them for %.1fs",
                health.failures,
                kind,
                self.failure_cooldown,
            )
