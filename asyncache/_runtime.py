"""Waiting and background work on whichever event loop the caller runs: asyncio or trio.

Starlette and FastAPI run on anyio, so the middleware (and any code over a
``MemoryStore``) may be awaited under trio (``TestClient(backend="trio")``,
hypercorn's trio worker). The engine needs three things from the loop: an
event to wait on, a bounded wait, and work that runs on its own (a flight that
outlives a cancelled caller, a renewal off the caller's path). Under asyncio
these are asyncio's own objects, unchanged and as cheap as before; under trio
they are trio's, and work of its own runs as a trio system task, carrying a
copy of the caller's context variables.

Where anyio serves, it is used: bounded waits on other loops
(``timeout_after``: ``anyio.fail_after``) and telling loops apart
(``current_loop``: a flight belongs to one loop, and a cache may serve several
threads' loops at once). It is imported only when a loop other than asyncio's
runs, so ``import asyncache`` stays fast. Under trio a cache uses a
``MemoryStore`` or a ``SQLiteStore`` (its threads answer any loop);
``RedisStore`` (redis-py is asyncio's alone) refuses trio at once.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import types
from collections.abc import Awaitable, Coroutine, Generator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, Protocol

__all__ = [
    "Event",
    "Signal",
    "cancel_and_wait",
    "cancelled",
    "current_loop",
    "is_cancellation",
    "new_event",
    "one_turn",
    "sleep",
    "spawn",
    "timeout_after",
    "wait_for",
]


class Event(Protocol):
    """What both asyncio's and trio's events offer."""

    def set(self) -> None:
        """Wake every waiter."""

    def is_set(self) -> bool:
        """Whether ``set`` was called."""
        ...

    def wait(self) -> Awaitable[Any]:
        """Wait until ``set`` is called (await what it returns)."""


class Signal:
    """asyncio's ``Event`` less what waiting on a flight does not use: cheaper to make and set.

    Every miss that coalesces makes one, waits on it and sets it; asyncio's
    ``Event`` binds itself to the loop on first wait and removes each waiter
    from a deque when it wakes. Here a waiter is a future in a list that
    ``set`` empties; a waiter that stopped waiting (cancelled, timed out)
    leaves a cancelled future that ``set`` skips.
    """

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[asyncio.Future[None]] = []

    def set(self) -> None:
        """Wake every waiter."""
        if not self._set:
            self._set = True
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def is_set(self) -> bool:
        """Whether ``set`` was called."""
        return self._set

    def wait(self) -> asyncio.Future[None]:
        """A future of this waiter's own, done once ``set`` is called (await it).

        A future, not a coroutine: one object fewer per wait. Cancelling it
        (its waiter was cancelled) touches no other waiter.
        """
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._set:
            waiter.set_result(None)
        else:
            self._waiters.append(waiter)
        return waiter


def _on_asyncio() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def current_loop() -> object:
    """What identifies the running event loop: asyncio's loop, or anyio's token for it.

    Raises:
        RuntimeError: no event loop is running in this thread.
    """
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    # Imported here: only a loop other than asyncio's gets this far, and anyio's
    # import would cost ``import asyncache`` milliseconds.
    import anyio.lowlevel

    try:
        token = anyio.lowlevel.current_token()
    except Exception as exc:  # sniffio's or anyio's "no async library"
        raise RuntimeError("no event loop is running in this thread") from exc
    return _native_token(token)


def _native_token(token: object) -> object:
    """The loop's own token inside what ``anyio.lowlevel.current_token`` returned.

    The one place anyio's versions differ for us: from anyio 4.11 the token is an
    ``EventLoopToken`` wrapping the loop's own (``native_token``); before, anyio
    4.0 to 4.10 (the floor pyproject.toml declares is 4.0), it is the loop's own.
    """
    return getattr(token, "native_token", token)


def _trio() -> Any:
    # Imported only when the caller runs on trio, which means it is installed.
    import trio

    return trio


def new_event() -> Event:
    """An event of the running loop's kind: a ``Signal`` unless a trio loop is running."""
    if "trio" in sys.modules and not _on_asyncio():
        trio = _trio()
        try:
            trio.lowlevel.current_trio_token()
        except RuntimeError:
            return Signal()
        event: Event = trio.Event()
        return event
    return Signal()


async def wait_for(event: Event, timeout: float | None) -> bool:  # noqa: ASYNC109
    """Wait for ``event``; ``False`` when ``timeout`` seconds passed first."""
    if event.is_set():
        return True
    if timeout is None:
        await event.wait()
        return True
    if isinstance(event, Signal | asyncio.Event):
        try:
            async with asyncio.timeout(timeout):
                await event.wait()
        except TimeoutError:
            return False
        return True
    import anyio  # here: only a loop other than asyncio's gets this far

    with anyio.move_on_after(timeout):
        await event.wait()
    return event.is_set()


def timeout_after(seconds: float | None) -> AbstractAsyncContextManager[Any]:
    """A bound on a block that raises the builtin ``TimeoutError`` when ``seconds`` pass.

    asyncio's own ``asyncio.timeout`` under asyncio; anyio's ``fail_after``
    (trio's cancel scopes) on other loops. ``None``: no bound.
    """
    if _on_asyncio():
        return asyncio.timeout(seconds)
    import anyio  # here: only a loop other than asyncio's gets this far

    return _AsyncBound(anyio.fail_after(seconds))


class _AsyncBound:
    """A synchronous context manager (anyio's cancel scope) used with ``async with``."""

    __slots__ = ("_scope",)

    def __init__(self, scope: AbstractContextManager[Any]) -> None:
        self._scope = scope

    async def __aenter__(self) -> Any:
        return self._scope.__enter__()

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return self._scope.__exit__(*exc_info)


def spawn(
    work: Coroutine[Any, Any, Any],
    owned: set[Any] | None = None,
    *,
    forget_when_done: bool = True,
) -> asyncio.Task[Any] | None:
    """Run ``work`` on its own; a caller that is cancelled does not cancel it.

    Under asyncio it is a task, added to ``owned`` (so ``aclose`` can wait for
    it or cancel it) and, unless ``forget_when_done`` is false (the owner then
    removes it itself, which saves a callback), removed when it ends. Under
    trio it is a system task, which trio cancels when the run ends; ``None``
    is returned.
    """
    if _on_asyncio():
        task = asyncio.get_running_loop().create_task(work)
        if owned is not None:
            owned.add(task)
            if forget_when_done:
                task.add_done_callback(owned.discard)
        return task
    trio = _trio()

    async def run() -> None:
        try:
            await work
        except BaseException as exc:
            # A system task that raises would crash the whole trio run.
            if not is_cancellation(exc):
                return
            raise

    trio.lowlevel.spawn_system_task(run, context=contextvars.copy_context())
    return None


async def cancel_and_wait(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel asyncio ``tasks`` and wait until every one has ended (their errors ignored)."""
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)


async def sleep(seconds: float) -> None:
    """Sleep on whichever loop runs."""
    if _on_asyncio():
        await asyncio.sleep(seconds)
        return
    import anyio  # here: only a loop other than asyncio's gets this far

    await anyio.sleep(seconds)


def is_cancellation(exc: BaseException) -> bool:
    """Whether ``exc`` is the loop cancelling a task (asyncio's or trio's)."""
    if isinstance(exc, asyncio.CancelledError):
        return True
    return type(exc).__module__.startswith("trio") and type(exc).__name__ == "Cancelled"


def cancelled(message: str) -> asyncio.CancelledError:
    """The exception a flight hands its waiters when its computation was cancelled.

    Always asyncio's kind: trio's ``Cancelled`` cannot be made, and must never
    be raised in a task that trio did not cancel.
    """
    return asyncio.CancelledError(message)


@types.coroutine
def one_turn() -> Generator[None, None, None]:
    """Let every asyncio callback ready now run before the caller goes on.

    ``asyncio.sleep(0)`` with one generator instead of two coroutines (a bare yield,
    which an asyncio task answers by stepping again on the loop's next turn); asyncio
    only: a trio task must not yield bare.
    """
    yield
