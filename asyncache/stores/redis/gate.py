"""How many commands a RedisStore has in flight, and its Redis errors as ``StoreError``."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from types import TracebackType

from redis.exceptions import RedisClusterException, RedisError

from ...errors import ConfigurationError, StoreError

__all__ = ["DRIVER_ERRORS", "Gate", "cause_of", "check_limit", "store_error"]


class Gate:
    """At most ``limit`` commands in flight; the others wait up to ``timeout`` seconds.

    A semaphore whose free path is a counter (no lock, no await), so a hit
    pays nothing while a connection is free; a freed slot passes straight to
    the longest waiter. ``prepare`` runs once, alone, before the first command
    (a cluster client must learn the topology before concurrent use: redis-py
    8.1 breaks connections when many commands race its lazy initialization).
    As a context manager the gate also turns Redis errors into ``StoreError``.
    """

    __slots__ = ("_lock", "_prepare", "_waiters", "busy", "limit", "ready", "timeout")

    def __init__(
        self,
        limit: int | None,
        timeout: float | None,
        prepare: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        check_limit(limit)
        self.limit = limit
        self.timeout = timeout
        self.busy = 0
        self.ready = prepare is None
        self._prepare = prepare
        self._lock: asyncio.Lock | None = None
        self._waiters: deque[asyncio.Future[None]] = deque()

    def enter_now(self) -> bool:
        """Take a slot if one is free, without waiting."""
        if self.ready and (self.limit is None or self.busy < self.limit):
            self.busy += 1
            return True
        return False

    async def wait(self) -> None:
        """Wait for a slot (preparing the client first if it is not ready).

        Raises:
            StoreError: none came free within ``timeout``, or preparing failed.
        """
        if not self.ready:
            await self.ensure_ready()
            if self.enter_now():
                return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(self.timeout):
                await waiter
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled():
                self.leave()  # a slot was handed over that will not be used
            else:
                waiter.cancel()
            if isinstance(exc, TimeoutError):
                raise StoreError(
                    f"redis: no connection came free within {self.timeout}s "
                    f"({self.limit} commands in flight)"
                ) from None
            raise

    async def ensure_ready(self) -> None:
        """Run ``prepare`` unless it ran; concurrent callers wait for the one running it."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.ready or self._prepare is None:
                return
            try:
                await self._prepare()
            except DRIVER_ERRORS as exc:
                raise store_error(exc) from cause_of(exc)
            self.ready = True

    def leave(self) -> None:
        """Give the slot back, to the longest waiter if there is one."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.busy -= 1

    async def __aenter__(self) -> None:
        if not self.enter_now():
            await self.wait()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.leave()
        if isinstance(exc, DRIVER_ERRORS):
            raise store_error(exc) from cause_of(exc)


# What a driver call can raise when Redis fails. redis-py's own errors and socket
# errors, and two it raises from inside itself when a connection is torn down
# under a command in flight (a cluster client refreshing its topology after a
# timeout disconnects the connections other commands hold: "'NoneType' object
# has no attribute 'writelines'"): a failed call all the same, never a crash.
# redis-py's cluster errors that are no ``RedisError`` (a slot no node covers mid-failover,
# a cluster that no node answers for) are failed calls too.
DRIVER_ERRORS = (RedisError, RedisClusterException, OSError, AttributeError, TypeError)


def check_limit(limit: int | None) -> None:
    """Raise ``ConfigurationError`` unless ``limit`` is positive or ``None``."""
    if limit is not None and limit <= 0:
        raise ConfigurationError(f"max_in_flight must be positive or None, got {limit!r}")


def store_error(exc: BaseException, *, shard: str | None = None) -> StoreError:
    """The ``StoreError`` a Redis (or socket) error is raised as, from ``cause_of(exc)``.

    ``shard`` names the cluster node that failed, when only that one did.
    """
    error = StoreError(f"redis: {type(exc).__name__}: {exc}", shard=shard)
    error.__cause__ = cause_of(exc)
    return error


def cause_of(exc: BaseException) -> BaseException:
    """What a driver error's ``StoreError`` is raised from: the error itself, but for
    a connection torn down under the command a ``ConnectionError``.

    A ``TypeError`` or ``AttributeError`` on a connection torn down mid-command
    (``'NoneType' object has no attribute 'writelines'``) is a lost connection, a
    fault the engine treats as a miss. Any other is a bug or a version mismatch (a
    redis-py whose signatures differ from what the store was written for), and
    the engine raises it to the caller (``asyncache.engine._guard.BUGS``).
    """
    if isinstance(exc, AttributeError | TypeError) and "'NoneType' object" in str(exc):
        lost = ConnectionError(f"the connection was torn down under the command ({exc})")
        lost.__context__ = exc
        return lost
    return exc
