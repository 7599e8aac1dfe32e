"""What every pool shares: the ``Offload`` protocol, ``async with``, and thread hand-offs.

The pools wait for their workers on threads they own; the helpers here carry
an outcome from such a thread back to the event loop that waits for it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, Protocol, Self, TypeVar, runtime_checkable

from ..errors import OffloadError

__all__ = ["Offload", "PoolBase", "off_loop", "post_outcome"]

R = TypeVar("R")


@runtime_checkable
class Offload(Protocol):
    """A pool that runs sync functions away from the event loop."""

    async def run(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
        """Run ``fn(*args, **kwargs)`` in the pool and return what it returned."""
        ...

    async def aclose(self) -> None:
        """Let running calls finish, then stop every worker; safe to call twice."""
        ...


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    """Complete ``future`` on its loop's thread, unless its caller gave up."""
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def post_outcome(
    loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], ok: bool, value: Any
) -> None:
    """Hand an outcome from a pool thread to the loop that waits for it.

    Args:
        loop: the loop ``future`` belongs to.
        future: completed with ``value`` on that loop, unless it is done already.
        ok: ``value`` is a result (``True``) or an exception to raise (``False``).
        value: the result or the exception.
    """
    try:
        loop.call_soon_threadsafe(_settle, future, ok, value)
    except RuntimeError:
        pass  # the loop is closed: nobody is waiting any more


async def off_loop(blocking: Callable[[], object], name: str) -> None:
    """Run a blocking call (joins, shutdowns) on a short-lived thread and await it.

    Args:
        blocking: called with no arguments on the new thread.
        name: the thread's name, for tracebacks and profilers.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def target() -> None:
        try:
            blocking()
        except BaseException as exc:
            post_outcome(loop, future, False, exc)
        else:
            post_outcome(loop, future, True, None)

    threading.Thread(target=target, name=name, daemon=True).start()
    await future


class PoolBase:
    """What the thread and process pools share: ``async with`` and the closed check."""

    _closed: bool

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        raise NotImplementedError  # each pool closes its own way

    def _check_open(self) -> None:
        if self._closed:
            raise OffloadError(f"{self!r} is closed")
