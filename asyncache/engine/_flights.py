"""In-process coalescing of identical misses.

A flight is one computation of one key. Its outcome sits beside an event of
the running loop's kind (asyncio's, or trio's: ``asyncache._runtime``); the
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

from .._runtime import (
    Event,
    Signal,
    cancel_and_wait,
    cancelled,
    current_loop,
    is_cancellation,
    new_event,
    spawn,
    wait_for,
)

__all__ = ["Flight", "FlightTable", "copy_for_caller", "error_for_caller"]

T = TypeVar("T")


class Flight(Generic[T]):
    """One in-progress computation and, once done, its outcome.

    ``shared`` is False when followers must not take the outcome (the
    middleware's leader got a response that was not admitted); they then
    compute by themselves. ``stream`` is set when the computation produces its
    result piece by piece (``asyncache.engine._broadcast.Broadcast``): followers
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
        "table",
        "task",
        "traceback",
        "value",
    )

    def __init__(self, done: Event | None = None) -> None:
        # ``done``: an event the caller knows to be of the running loop's kind (a miss
        # under asyncio hands in a ``Signal``), which spares ``new_event`` its check.
        self.done = new_event() if done is None else done
        self.value: T | None = None
        self.error: BaseException | None = None
        self.traceback: Any = None
        self.shared = True
        self.followers = 0
        self.refresh = False
        self.task: asyncio.Task[None] | None = None
        self.stream: Any = None
        # The loop's table that ``FlightTable.claim`` registered it in.
        self.table: _LoopFlights[T] | None = None

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


class _LoopFlights(Generic[T]):
    """One event loop's flights by key, and the tasks that compute them.

    ``asyncio_loop`` is the loop itself when it is asyncio's (``None`` under
    trio), so that the miss path asks which loop runs only once.
    """

    __slots__ = ("asyncio_loop", "flights", "loop", "tasks")

    def __init__(self, loop: object) -> None:
        self.loop = loop
        self.asyncio_loop = loop if isinstance(loop, asyncio.AbstractEventLoop) else None
        self.flights: dict[bytes, Flight[T]] = {}
        self.tasks: set[asyncio.Task[None]] = set()


class FlightTable(Generic[T]):
    """The flights running in each event loop, by key.

    One cache may serve several event loops at once (threads each running
    ``asyncio.run``): a flight's event wakes only callers of its own loop, so
    each loop has flights of its own and coalesces its own callers, and the
    store's ``add`` (first decision wins) settles what every loop keeps. A
    loop's table is touched only from that loop's thread; the table of tables
    changes only when a loop starts its first flight, and when a loop that
    closed (or, under trio, one with no flight left) is forgotten.
    """

    __slots__ = ("_loops",)

    def __init__(self) -> None:
        self._loops: dict[object, _LoopFlights[T]] = {}

    def __len__(self) -> int:
        return sum(len(here.flights) for here in list(self._loops.values()))

    def here(self) -> _LoopFlights[T]:
        """The running loop's flights, made when it has none."""
        loop = current_loop()
        here = self._loops.get(loop)
        if here is None:
            # A loop that closed (with flights left whose tasks never ran, or idle) is gone
            # for good.
            for gone in [
                other
                for other in list(self._loops.values())
                if other.asyncio_loop is not None and other.asyncio_loop.is_closed()
            ]:
                self._loops.pop(gone.loop, None)
            here = self._loops[loop] = _LoopFlights(loop)
        return here

    def _idle(self, here: _LoopFlights[T]) -> None:
        """Forget a loop that has no flight and no task left (it may never run again).

        An open asyncio loop keeps its table: making it again on each miss cost
        a third of what coalescing adds to one. ``here`` forgets it once the loop
        closed, when another loop first computes.
        """
        if here.flights or here.tasks:
            return
        loop = here.asyncio_loop
        if loop is not None and not loop.is_closed():
            return
        if self._loops.get(here.loop) is here:
            del self._loops[here.loop]

    def keys(self) -> list[bytes]:
        """The keys being computed now, in every loop."""
        return list({key: None for here in list(self._loops.values()) for key in here.flights})

    def get(self, key: bytes) -> Flight[T] | None:
        """The running loop's flight for ``key``, if one is in progress."""
        here = self._loops.get(current_loop())
        return None if here is None else here.flights.get(key)

    def claim(self, key: bytes, here: _LoopFlights[T] | None = None) -> Flight[T]:
        """Register a new flight for ``key`` in the running loop; its owner must ``finish`` it.

        ``here``: the running loop's table, when the caller already has it (``here()``).
        """
        if here is None:
            here = self.here()
        # Under asyncio the event is a Signal: new_event need not ask which loop runs.
        flight: Flight[T] = Flight(None if here.asyncio_loop is None else Signal())
        flight.table = here
        here.flights[key] = flight
        return flight

    def start(
        self, keys: list[bytes], flights: list[Flight[T]], work: Coroutine[Any, Any, None]
    ) -> None:
        """Run ``work`` as an owned task; when it ends, every flight is finished.

        ``work`` records outcomes on the flights; whatever it leaves unset (it
        was cancelled or raised) becomes an error, so no waiter hangs.
        """
        here = self.here()

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
                    if here.flights.get(key) is flight:
                        del here.flights[key]
                    if not flight.done.is_set():
                        flight.set_error(
                            error or RuntimeError("the computation ended without a result")
                        )
                if task is not None:
                    here.tasks.discard(task)
                self._idle(here)

        # Removed by run() itself, so that the loop's table is empty when its last flight ends.
        task = spawn(run(), here.tasks, forget_when_done=False)
        for flight in flights:
            flight.task = task

    def launch(self, flight: Flight[T], work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` as an owned task for one flight.

        The cheap form of ``start`` for the single-key miss: ``work`` must
        finish the flight and call ``landed`` on every way out (a ``finally``).
        A task cancelled before it first ran cannot, so ``aclose`` finishes
        whatever flight is still open.
        """
        here = flight.table or self.here()
        loop = here.asyncio_loop
        if loop is None:  # trio: a system task (runtime.spawn)
            flight.task = spawn(work, here.tasks, forget_when_done=False)
            return
        # spawn's asyncio branch, inlined: every coalesced miss comes through here.
        task = flight.task = loop.create_task(work)
        here.tasks.add(task)

    def landed(self, key: bytes, flight: Flight[T]) -> None:
        """The last thing a launched task does: forget its flight and its task."""
        here = flight.table or self._loops.get(current_loop())
        if here is not None:
            if here.flights.get(key) is flight:
                del here.flights[key]
            if flight.task is not None:
                here.tasks.discard(flight.task)
            self._idle(here)
        if not flight.done.is_set():
            flight.set_error(RuntimeError("the computation ended without a result"))

    def release(self, key: bytes, flight: Flight[T]) -> None:
        """Forget ``flight`` (for owners that compute without ``start``)."""
        here = self._loops.get(current_loop())
        if here is not None and here.flights.get(key) is flight:
            del here.flights[key]
            self._idle(here)

    async def aclose(self) -> None:
        """Cancel the running loop's computations and wait for them to end.

        Other loops' computations are theirs: each ends with its loop.
        """
        here = self._loops.get(current_loop())
        if here is None:
            return
        tasks = list(here.tasks)
        await cancel_and_wait(tasks)
        # A launched task cancelled before it first ran never finished its flight.
        for key, flight in list(here.flights.items()):
            if flight.task in tasks:
                del here.flights[key]
                if not flight.done.is_set():
                    flight.set_error(asyncio.CancelledError("the computation was cancelled"))
        here.tasks.difference_update(tasks)
        self._idle(here)


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
