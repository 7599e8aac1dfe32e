"""Gathering the calls of one event-loop iteration into one statement, for SQLiteStore.

Every call to SQLite is a hop to the database thread and back. Gets made while
a read is in flight, and adds, are gathered, all those of one loop iteration,
into one ``Gathering``; its leader runs them as one statement and hands each
follower its result. (Not micro-batching: that word belongs to
``asyncache.decorator._batching``, which gathers model calls, not statements.)

Gathering is asyncio's: a gathering belongs to the loop that opened it, and
only callers of that loop follow it. A caller of another loop (another
thread's, or trio's) sends its statement alone, which is always correct and
costs only the statement it did not share.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, Generic, TypeVar

__all__ = ["Gatherer", "Gathering", "asyncio_loop", "next_iteration"]

ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")


class Gathering(Generic[ItemT, ResultT]):
    """The calls gathered in one loop iteration: the leader's item, then followers'."""

    __slots__ = ("futures", "items", "loop")

    def __init__(self, item: ItemT, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.items: list[ItemT] = [item]
        self.futures: list[asyncio.Future[ResultT]] = []


class Gatherer(Generic[ItemT, ResultT]):
    """Gathers the calls made in one event-loop iteration into one call of ``run``.

    The first caller leads: it opens a gathering, yields once so that every task
    already scheduled in this iteration can follow, closes it, runs it
    and settles the followers. A leader that fails or is cancelled first hands
    the followers its error or, when cancelled, a task that runs their part
    again, so that a follower never hangs on a caller that went away.

    The leader's side is written out in ``SQLiteStore.get`` and ``add``: a
    coroutine layer less on a path that costs a few microseconds in all.
    """

    __slots__ = ("_run", "_spawn", "open")

    def __init__(
        self,
        run: Callable[[list[ItemT]], Awaitable[list[ResultT]]],
        spawn: Callable[[Coroutine[Any, Any, None]], object],
    ) -> None:
        self._run = run
        self._spawn = spawn
        self.open: Gathering[ItemT, ResultT] | None = None

    def follow(self, gathering: Gathering[ItemT, ResultT], item: ItemT) -> asyncio.Future[ResultT]:
        """Add ``item`` to the open gathering; the future gets its result."""
        future: asyncio.Future[ResultT] = gathering.loop.create_future()
        gathering.items.append(item)
        gathering.futures.append(future)
        return future

    def settle(self, gathering: Gathering[ItemT, ResultT], results: list[ResultT]) -> ResultT:
        """Hand each follower its result; return the leader's."""
        for future, result in zip(gathering.futures, results[1:], strict=True):
            if not future.done():
                future.set_result(result)
        return results[0]

    def abandon(self, gathering: Gathering[ItemT, ResultT], exc: BaseException) -> None:
        """The leader raised ``exc`` before settling: answer the followers anyway."""
        if self.open is gathering:
            self.open = None
        waiting = [(i + 1, f) for i, f in enumerate(gathering.futures) if not f.done()]
        if not waiting:
            return
        if isinstance(exc, Exception):
            for _, future in waiting:
                future.set_exception(exc)
            return
        # The leader was cancelled, not the work: run the rest again for the followers.
        items = [gathering.items[i] for i, _ in waiting]
        self._spawn(self._finish(items, [f for _, f in waiting]))

    async def _finish(self, items: list[ItemT], futures: list[asyncio.Future[ResultT]]) -> None:
        try:
            results = await self._run(items)
        except Exception as exc:
            for future in futures:
                if not future.done():
                    future.set_exception(exc)
            return
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        for future, result in zip(futures, results, strict=True):
            if not future.done():
                future.set_result(result)


def asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop; ``None`` on another loop (trio), where nothing gathers."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


@types.coroutine
def next_iteration() -> Generator[None, None, None]:
    """``asyncio.sleep(0)`` without its two coroutine layers: this runs per get."""
    yield
