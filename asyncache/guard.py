"""StoreGuard: the engine's store calls, bounded, counted, and never raised.

The cache never makes a prediction fail because of its store. Every call the
engine makes goes through ``StoreGuard.call``: one that raises or outlasts
``store_timeout`` is ``None`` to the caller (a miss, a skipped write), is
counted in ``errors`` and logged at a bounded rate; after ``failure_threshold``
failures in a row the store is left alone for ``failure_cooldown`` seconds.
"""

from __future__ import annotations

import asyncio
import time
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, TypeVar

from .stats import CacheStats, RateLimitedLog

__all__ = ["StoreGuard"]

T = TypeVar("T")


@types.coroutine
def _resume(coro: Coroutine[Any, Any, T], yielded: Any) -> Generator[Any, Any, T]:
    """Drive a coroutine that already ran to its first suspension.

    Stores like MemoryStore answer without suspending; starting their coroutine
    by hand lets those answers skip the timeout machinery entirely, and only a
    store that really waits pays for ``asyncio.timeout``.
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
        "_log",
        "_stats",
        "_timed",
        "failure_cooldown",
        "failure_threshold",
        "failures",
        "skip_until",
        "timeout",
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
        self.failures = 0
        """Failures in a row; a success sets it back to zero."""
        self.skip_until = 0.0
        """``time.monotonic()`` until which the store is skipped; 0 when it is not."""
        self.use(store)

    def use(self, store: object) -> None:
        """Guard ``store`` from now on (the CLI's ``--store`` swaps it before first use)."""
        # Read once: the hit path then tests one attribute of ours, not the store's.
        self._timed = getattr(store, "enforces_timeouts", False) is not True

    def cooling(self) -> bool:
        """Whether the store is being skipped after repeated failures."""
        return bool(self.skip_until) and time.monotonic() < self.skip_until

    async def call(self, what: str, make: Callable[[], Awaitable[T]]) -> T | None:
        """Run ``make()``'s store call; a failure or timeout is ``None``, counted and logged.

        Args:
            what: the call's name, for the log (``"get"``, ``"add_many"``...).
            make: starts the call; not called at all while the store cools down.
        """
        if self.skip_until:
            if time.monotonic() < self.skip_until:
                return None
            self.skip_until = 0.0
        try:
            awaitable = make()
            if not self._timed:
                result: T = await awaitable
            elif isinstance(awaitable, Coroutine):
                try:
                    yielded = awaitable.send(None)
                except StopIteration as stop:
                    result = stop.value
                else:
                    async with asyncio.timeout(self.timeout):
                        result = await _resume(awaitable, yielded)
            else:
                async with asyncio.timeout(self.timeout):
                    result = await awaitable
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.failed(what, exc)
            return None
        self.failures = 0
        return result

    def failed(self, what: str, exc: Exception) -> None:
        """Count and log a failed store call; start the cool-down after too many in a row."""
        self._stats.errors += 1
        self.failures += 1
        reason = "timed out" if isinstance(exc, TimeoutError) else f"failed: {exc!r}"
        self._log.warning(what, "asyncache: store %s %s; treated as a miss", what, reason)
        if self.failures >= self.failure_threshold:
            self.skip_until = time.monotonic() + self.failure_cooldown
            self._log.warning(
                "cooldown",
                "asyncache: %d store failures in a row; skipping the store for %.1fs",
                self.failures,
                self.failure_cooldown,
            )
