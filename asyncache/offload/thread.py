"""``ThreadOffload``: a pool of threads, for work that releases the GIL."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import OffloadError
from .base import PoolBase, off_loop

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

__all__ = ["ThreadOffload"]

R = TypeVar("R")


class ThreadOffload(PoolBase):
    """Runs calls on a pool of threads: for work that releases the GIL.

    onnxruntime, torch and numpy release the GIL while they compute, so their
    calls run in parallel here and the event loop keeps answering hits. Pure
    Python holds the GIL: use ``ProcessOffload`` for it. Threads start on the
    first call; contextvars are copied into each call.

    Args:
        max_workers: threads at most; ``min(32, cpu_count + 4)`` when omitted.
        initializer: called once on each new thread (load a thread-local model).
        initargs: arguments for ``initializer``.
        thread_name_prefix: names the threads in tracebacks and profilers.
    """

    def __init__(
        self,
        max_workers: int | None = None,
        *,
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
        thread_name_prefix: str = "asyncache-thread",
    ) -> None:
        if max_workers is None:
            max_workers = min(32, (os.cpu_count() or 1) + 4)
        if max_workers <= 0:
            raise ValueError("max_workers must be positive")
        self.max_workers = max_workers
        self._initializer = initializer
        self._initargs = initargs
        self._prefix = thread_name_prefix
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._submitted = 0
        self._running = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_workers={self.max_workers})"

    def _pool(self) -> ThreadPoolExecutor:
        executor = self._executor
        if executor is None:
            from concurrent.futures import ThreadPoolExecutor  # on first use: import stays fast

            with self._lock:
                if self._closed:
                    raise OffloadError(f"{self!r} is closed")
                executor = self._executor
                if executor is None:
                    executor = self._executor = ThreadPoolExecutor(
                        self.max_workers,
                        thread_name_prefix=self._prefix,
                        initializer=self._initializer,
                        initargs=self._initargs,
                    )
        return executor

    async def run(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
        """Run ``fn(*args, **kwargs)`` on a pool thread and return its result.

        Raises:
            OffloadError: the pool is closed.
        """
        self._check_open()
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        self._submitted += 1
        self._running += 1
        try:
            return await _on_pool(self._pool(), call)
        finally:
            self._running -= 1

    def stats(self) -> dict[str, int]:
        """Calls submitted so far, calls not finished, and the thread bound."""
        return {
            "submitted": self._submitted,
            "running": self._running,
            "max_workers": self.max_workers,
        }

    async def aclose(self) -> None:
        """Let running and queued calls finish, then join the threads off the loop."""
        with self._lock:
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            await off_loop(executor.shutdown, "asyncache-thread-close")


async def _on_pool(pool: ThreadPoolExecutor, call: Callable[[], R]) -> R:
    """``call()`` on a thread of ``pool``, awaited on whichever loop runs: asyncio's
    ``run_in_executor``, or (trio) the pool's future awaited through anyio."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        import anyio.to_thread  # here: only a loop other than asyncio's gets this far

        return await anyio.to_thread.run_sync(pool.submit(call).result)
    return await loop.run_in_executor(pool, call)
