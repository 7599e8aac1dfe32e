"""In-process coalescing of identical misses.

A flight is one computation of one key. Its outcome sits beside an event of
the running loop's kind (asyncio's, or trio's: ``asyncache.engine._runtime``); the
computation runs as a task of its own, so a caller that is cancelled (a client
that disconnected) stops waiting without cancelling the work or the other
callers.

Deadlock freedom: a flight's task only computes and stores, it never waits on
another flight. A batch claims every unclaimed key it needs before it awaits
anything, then waits only on flights that other callers own. So no flight ever
waits on a flight, and two batches cannot wait on each other. A caller that
waited longer than ``coalesce_timeout`` computes by itself, which bounds a
stuck owner.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Coroutine
from typing import Any, Generic, TypeVar

from ._runtime import cancel_and_wait, cancelled, is_cancellation, new_event, spawn, wait_for

__all__ = ["Flight", "FlightTable", "copy_for_caller", "error_for_caller"]

T = TypeVar("T")


class Flight(Generic[T]):
    """One in-progress computation and, once done, its outcome.

    ``shared`` is False when followers must not take the outcome (the
    middleware's leader got a response that was not admitted); they then
    compute by themselves. ``stream`` is set when the computation produces its
    result piece by piece (``asyncache.engine._stream.Broadcast``): followers
    may then read the pieces live instead of waiting for the outcome.
    ``refresh`` marks the refresh of a stale entry, which callers that can read
    that entry do not wait for.
    """

    __slots__ = (
        "done",
        "error",
        "followers",
        "refresh",
        "shared",
        "stream",
        "task",
        "traceback",
        "value",
    )

    def __init__(self) -> None:
        self.done = new_event()
        self.value: T | None = None
        self.error: BaseException | None = None
        self.traceback: Any = None
        self.shared = True
        self.followers = 0
        self.refresh = False
        self.task: asyncio.Task[None] | None = None
        self.stream: Any = None

    def set_result(self, value: T, *, shared: bool = True) -> None:
        self.value = value
        self.shared = shared
        self.done.set()

    def set_error(self, error: BaseException) -> None:
        self.error = error
        # Kept apart: every raise of a shared exception would otherwise grow this one.
        self.traceback = error.__traceback__
        self.done.set()

    def outcome(self) -> T:
        """The result, or raise the flight's exception (a copy of it for this caller)."""
        if self.error is not None:
            raise error_for_caller(self.error, self.traceback)
        return self.value  # type: ignore[return-value]

    async def wait(self, timeout: float | None) -> bool:  # noqa: ASYNC109 - per-waiter bound
        """Wait for the outcome; ``False`` when ``timeout`` passed first."""
        return await wait_for(self.done, timeout)


class FlightTable(Generic[T]):
    """The flights running in one event loop, by key."""

    __slots__ = ("_flights", "_tasks")

    def __init__(self) -> None:
        self._flights: dict[bytes, Flight[T]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._flights)

    def keys(self) -> list[bytes]:
        """The keys being computed now."""
        return list(self._flights)

    def get(self, key: bytes) -> Flight[T] | None:
        return self._flights.get(key)

    def claim(self, key: bytes) -> Flight[T]:
        """Register a new flight for ``key``; its owner must ``finish`` it."""
        flight: Flight[T] = Flight()
        self._flights[key] = flight
        return flight

    def start(
        self, keys: list[bytes], flights: list[Flight[T]], work: Coroutine[Any, Any, None]
    ) -> None:
        """Run ``work`` as an owned task; when it ends, every flight is finished.

        ``work`` records outcomes on the flights; whatever it leaves unset (it
        was cancelled or raised) becomes an error, so no waiter hangs.
        """

        async def run() -> None:
            error: BaseException | None = None
            try:
                await work
            except BaseException as exc:
                error = cancelled("the computation was cancelled") if is_cancellation(exc) else exc
                if is_cancellation(exc):
                    raise
            finally:
                for key, flight in zip(keys, flights, strict=True):
                    if self._flights.get(key) is flight:
                        del self._flights[key]
                    if not flight.done.is_set():
                        flight.set_error(
                            error or RuntimeError("the computation ended without a result")
                        )

        task = spawn(run(), self._tasks)
        for flight in flights:
            flight.task = task

    def launch(self, flight: Flight[T], work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` as an owned task for one flight.

        The cheap form of ``start`` for the single-key miss: ``work`` must
        finish the flight and call ``landed`` on every way out (a ``finally``).
        A task cancelled before it first ran cannot, so ``aclose`` finishes
        whatever flight is still open.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # trio: a system task (runtime.spawn)
            flight.task = spawn(work, self._tasks, forget_when_done=False)
            return
        # spawn's asyncio branch, inlined: every coalesced miss comes through here.
        task = flight.task = loop.create_task(work)
        self._tasks.add(task)

    def landed(self, key: bytes, flight: Flight[T]) -> None:
        """The last thing a launched task does: forget its flight and its task."""
        if self._flights.get(key) is flight:
            del self._flights[key]
        if flight.task is not None:
            self._tasks.discard(flight.task)
        if not flight.done.is_set():
            flight.set_error(RuntimeError("the computation ended without a result"))

    def release(self, key: bytes, flight: Flight[T]) -> None:
        """Forget ``flight`` (for owners that compute without ``start``)."""
        if self._flights.get(key) is flight:
            del self._flights[key]

    async def aclose(self) -> None:
        """Cancel running computations and wait for them to end."""
        tasks = list(self._tasks)
        await cancel_and_wait(tasks)
        # A launched task cancelled before it first ran never finished its flight.
        for key, flight in list(self._flights.items()):
            if flight.task in tasks:
                del self._flights[key]
                if not flight.done.is_set():
                    flight.set_error(asyncio.CancelledError("the computation was cancelled"))


def error_for_caller(error: BaseException, traceback: Any) -> BaseException:
    """A caller's own copy of a flight's exception, carrying only the computation's traceback.

    Raising one exception object in many waiters chains each waiter's frames
    onto its traceback (a thousand waiters: thousands of frames, each keeping
    its frame alive). A copy per waiter keeps every traceback short. An
    exception that cannot be copied is raised as it is, its traceback reset.
    """
    try:
        mine = copy.copy(error)
    except Exception:
        mine = error
    else:
        if type(mine) is not type(error):
            mine = error
        else:
            mine.__cause__ = error.__cause__
            mine.__context__ = error.__context__
            mine.__suppress_context__ = error.__suppress_context__
    return mine.with_traceback(traceback)


def copy_for_caller(value: T) -> T:
    """A caller's own copy of a value other callers hold too: callers may mutate theirs.

    A value that cannot be copied (it holds a lock, a generator, a socket) is
    handed over as it is: the caller gets its result, never an error from the
    cache.
    """
    try:
        return copy.deepcopy(value)
    except Exception:
        return value
