"""``ProcessOffload``: worker processes for GIL-bound Python, seen from the parent.

The code that runs inside a worker is in ``asyncache.offload.worker``; the
thread that owns each worker process is in ``asyncache.offload.supervisor``.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, Self, TypeVar

from ..errors import OffloadError
from .base import PoolBase, off_loop
from .supervisor import Job, WorkerSupervisor
from .worker import FunctionRef, lookup

__all__ = ["ProcessOffload"]

R = TypeVar("R")


def _reference(fn: Callable[..., Any]) -> FunctionRef | Callable[..., Any]:
    """How a worker process will find ``fn``.

    Plain functions travel by import path. The module attribute is often the
    ``@cached_prediction`` wrapper rather than the function itself, so the path
    records how many ``__wrapped__`` steps lead from one to the other.

    Raises:
        TypeError: ``fn`` is a lambda or a nested function.
    """
    if not inspect.isfunction(fn):
        return fn  # bound methods, partials, builtins, callable objects: sent as they are
    module, qualname = fn.__module__, fn.__qualname__
    if "<" in qualname:
        raise TypeError(
            f"ProcessOffload cannot run {module}.{qualname}: worker processes import functions "
            "by name, and lambdas and functions defined inside functions have none. "
            "Define it at module level."
        )
    try:
        found = lookup(module, qualname)
    except (ImportError, AttributeError):
        found = None
    depth = 0
    while found is not None and found is not fn and depth < 16:
        found = getattr(found, "__wrapped__", None)
        depth += 1
    if found is not fn:
        raise TypeError(
            f"ProcessOffload cannot run {module}.{qualname}: the name {qualname!r} in module "
            f"{module!r} does not lead to this function. Define it at module level under its "
            "own name."
        )
    return FunctionRef(module, qualname, depth)


def _describe(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


class ProcessOffload(PoolBase):
    """Runs calls in worker processes: for GIL-bound Python.

    Each worker runs ``initializer(*initargs)`` once when it starts (load the
    model into a module global there), then one call at a time. Functions and
    the initializer must be importable by name (module level); arguments and
    results travel over a private pipe with multiprocessing's serialization.

    A worker that dies (``os._exit``, a segfault, the OOM killer) fails only
    the call it was running, with ``WorkerDiedError``, and is replaced at once;
    calls waiting in the queue run on the other workers or on the replacement.
    ``aclose()`` lets running calls finish, fails the queued ones and joins
    every worker process, so none is left behind.

    Workers start on the first call; ``await pool.start()`` starts them (and
    loads the model) ahead of traffic.

    Args:
        max_workers: worker processes; ``os.cpu_count()`` when omitted.
        initializer: a module-level function each worker runs once.
        initargs: arguments for ``initializer``.
        context: ``"spawn"`` (default) or ``"forkserver"``. ``fork`` is refused:
            forking a process that runs threads and an event loop can deadlock.
        stop_timeout: seconds a worker may take to exit on ``aclose()`` before
            it is terminated.

    Raises:
        ValueError: a bad ``max_workers`` or ``context``.
        TypeError: ``initializer`` is a lambda or a nested function.
    """

    def __init__(
        self,
        max_workers: int | None = None,
        *,
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
        context: str = "spawn",
        stop_timeout: float = 10.0,
    ) -> None:
        if max_workers is None:
            max_workers = os.cpu_count() or 1
        if max_workers <= 0:
            raise ValueError("max_workers must be positive")
        if context not in ("spawn", "forkserver"):
            raise ValueError(
                f"context must be 'spawn' or 'forkserver', not {context!r}: forking a process "
                "that runs threads and an event loop can deadlock the child"
            )
        self.max_workers = max_workers
        self.context = context
        self.stop_timeout = stop_timeout
        self._initializer = _reference(initializer) if initializer is not None else None
        self._initargs = initargs
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._workers: list[WorkerSupervisor] = []
        self._refs: dict[Callable[..., Any], FunctionRef | Callable[..., Any]] = {}  # plain fns
        self._lock = threading.Lock()
        self._closed = False
        self._submitted = 0
        # Deaths and restarts of workers already joined; running workers count their own.
        self._restarts = 0
        self._deaths = 0

    def __repr__(self) -> str:
        return f"ProcessOffload(max_workers={self.max_workers}, context={self.context!r})"

    @property
    def pids(self) -> list[int]:
        """The process ids of the workers running now."""
        return [worker.pid for worker in self._workers if worker.pid is not None]

    def _ensure_started(self) -> None:
        if self._workers:
            return
        with self._lock:
            if self._closed:
                raise OffloadError(f"{self!r} is closed")
            if not self._workers:
                workers = [
                    WorkerSupervisor(
                        self._jobs,
                        index,
                        context=self.context,
                        initializer=self._initializer,
                        initargs=self._initargs,
                        stop_timeout=self.stop_timeout,
                    )
                    for index in range(self.max_workers)
                ]
                for worker in workers:
                    worker.thread.start()
                self._workers = workers

    async def start(self) -> Self:
        """Start every worker and wait until each ran its initializer.

        Raises:
            OffloadError: the pool is closed, or a worker's initializer failed
                (a later call tries to start that worker again).
        """
        self._ensure_started()
        workers = list(self._workers)

        def wait_started() -> None:
            for worker in workers:
                worker.started.wait()

        await off_loop(wait_started, "asyncache-process-start")
        for worker in workers:
            if worker.start_error is not None:
                raise worker.start_error
        return self

    async def run(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
        """Run ``fn(*args, **kwargs)`` in a worker process and return its result.

        Raises:
            TypeError: ``fn`` is not importable by name, or an argument cannot
                be sent to a worker.
            WorkerDiedError: the worker running this call died.
            OffloadError: the pool is closed, or a worker failed to start.
        """
        self._check_open()
        target: FunctionRef | Callable[..., Any]
        if inspect.isfunction(fn):
            # Plain functions travel by name; resolving it once per function is enough.
            ref = self._refs.get(fn)
            target = ref if ref is not None else self._refs.setdefault(fn, _reference(fn))
        else:
            target = fn  # bound methods, partials, callable objects: sent as they are
        self._ensure_started()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        job = Job(target, args, kwargs, _describe(fn), loop, future)
        future.add_done_callback(job.give_up)
        self._submitted += 1
        self._jobs.put(job)
        return await future

    def stats(self) -> dict[str, int]:
        """Calls submitted, calls queued, workers, worker deaths and restarts so far."""
        workers = self._workers
        return {
            "submitted": self._submitted,
            "queued": self._jobs.qsize(),
            "max_workers": self.max_workers,
            "workers": len(self.pids),
            "deaths": self._deaths + sum(worker.deaths for worker in workers),
            "restarts": self._restarts + sum(worker.restarts for worker in workers),
        }

    async def aclose(self) -> None:
        """Let running calls finish, fail queued ones, and join every worker process."""
        with self._lock:
            already = self._closed
            self._closed = True
            workers = self._workers
        if already and not workers:
            return
        self._fail_queued()
        for _ in workers:
            self._jobs.put(None)

        def join_threads() -> None:
            for worker in workers:
                worker.thread.join()

        await off_loop(join_threads, "asyncache-process-close")
        if self._workers is workers:
            # Keep their counts: stats() after aclose() still reports them.
            self._deaths += sum(worker.deaths for worker in workers)
            self._restarts += sum(worker.restarts for worker in workers)
            self._workers = []
        # A call a dying worker put back after the stop signals would otherwise wait forever.
        self._fail_queued()

    def _fail_queued(self) -> None:
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return
            if job is not None:
                job.finish(False, OffloadError(f"{self!r} was closed before the call started"))
