"""Where a sync prediction runs on a miss: thread, process and device pools.

- ``ThreadOffload`` for work that releases the GIL (onnxruntime, torch, numpy);
- ``ProcessOffload`` for GIL-bound Python: the model loads once per worker
  process through ``initializer``; a worker that dies fails only the call it
  was running, with ``WorkerDiedError``, and is replaced;
- ``DeviceOffload`` runs everything for one accelerator on one dedicated
  thread, so CUDA state (current device, streams, graphs) stays on that thread.

Every pool is an ``Offload``: ``await pool.run(fn, *args, **kwargs)`` and
``await pool.aclose()``. The event loop never blocks on a pool: waiting for
workers, results and shutdown happens on threads the pool owns.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import importlib
import inspect
import os
import queue
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, Self, TypeVar, runtime_checkable

from .errors import OffloadError, WorkerDiedError

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

__all__ = [
    "DeviceOffload",
    "Offload",
    "ProcessOffload",
    "ThreadOffload",
    "aclose_default_offloads",
    "resolve_offload",
]

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


# -- helpers shared by the pools ---------------------------------------------


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    """Complete ``future`` on its loop's thread, unless its caller gave up."""
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def _post(
    loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], ok: bool, value: Any
) -> None:
    """Hand an outcome from a pool thread to the loop that waits for it."""
    try:
        loop.call_soon_threadsafe(_settle, future, ok, value)
    except RuntimeError:
        pass  # the loop is closed: nobody is waiting any more


async def _off_loop(blocking: Callable[[], object], name: str) -> None:
    """Run a blocking call (joins, shutdowns) on a short-lived thread and await it."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def target() -> None:
        try:
            blocking()
        except BaseException as exc:
            _post(loop, future, False, exc)
        else:
            _post(loop, future, True, None)

    threading.Thread(target=target, name=name, daemon=True).start()
    await future


def _describe(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


# -- threads -----------------------------------------------------------------


class _Pool:
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


class ThreadOffload(_Pool):
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
        loop = asyncio.get_running_loop()
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        self._submitted += 1
        self._running += 1
        try:
            return await loop.run_in_executor(self._pool(), call)
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
            await _off_loop(executor.shutdown, "asyncache-thread-close")


# -- devices -----------------------------------------------------------------


def _cuda_device_count() -> tuple[int | None, str]:
    """How many CUDA devices this process can use (``None``: some, count unknown), and why."""
    try:
        import torch  # only a CUDA device needs it
    except ImportError:
        pass
    else:
        count = int(torch.cuda.device_count())
        return count, f"torch {torch.__version__} sees {count} CUDA device(s)"
    try:
        import onnxruntime
    except ImportError:
        return 0, "neither torch nor onnxruntime is installed"
    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        return None, "onnxruntime has the CUDA execution provider"
    return 0, "onnxruntime has no CUDA execution provider"


def _check_device(device: str) -> str:
    """Normalize ``device`` and make sure this machine has it."""
    kind, sep, index = device.strip().lower().partition(":")
    if kind == "cpu" and not sep:
        return "cpu"
    if kind != "cuda":
        raise ValueError(f"unknown device {device!r}: use 'cpu', 'cuda' or 'cuda:N'")
    if sep and not index.isdigit():
        raise ValueError(f"bad CUDA device {device!r}: the index must be a number ('cuda:0')")
    number = int(index or 0)
    count, why = _cuda_device_count()
    if count is not None and number >= count:
        raise OffloadError(
            f"DeviceOffload({device!r}): this machine has no CUDA device {number} ({why}); "
            "use DeviceOffload('cpu') or ThreadOffload on a CPU-only machine"
        )
    return f"cuda:{number}"


def _bind_device(
    device: str, initializer: Callable[..., object] | None, initargs: tuple[Any, ...]
) -> None:
    """Runs first on a device's thread: make it the thread's current CUDA device."""
    if device.startswith("cuda") and "torch" in sys.modules:
        import torch

        torch.cuda.set_device(int(device.partition(":")[2] or 0))
    if initializer is not None:
        initializer(*initargs)


class DeviceOffload(ThreadOffload):
    """Runs every call for one accelerator on one dedicated thread.

    CUDA keeps per-thread state (the current device, the default stream,
    captured graphs); one thread per device keeps it in one place and
    serializes kernels the device would serialize anyway. Give each device
    one ``DeviceOffload`` and share it between the functions that use it.
    ``"cpu"`` is accepted, for machines without an accelerator and for tests.

    Args:
        device: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
        initializer: called once on the device's thread (load the model there).
        initargs: arguments for ``initializer``.

    Raises:
        ValueError: ``device`` is not a device name.
        OffloadError: this machine has no such CUDA device.
    """

    def __init__(
        self,
        device: str = "cpu",
        *,
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
    ) -> None:
        self.device = _check_device(device)
        super().__init__(
            1,
            initializer=_bind_device,
            initargs=(self.device, initializer, initargs),
            thread_name_prefix=f"asyncache-{self.device}",
        )

    def __repr__(self) -> str:
        return f"DeviceOffload({self.device!r})"


# -- processes ---------------------------------------------------------------


class _Ref(NamedTuple):
    """A function named by its import path; ``depth`` unwraps decorators (``__wrapped__``)."""

    module: str
    qualname: str
    depth: int


def _lookup(module: str, qualname: str) -> Any:
    target: Any = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def _reference(fn: Callable[..., Any]) -> _Ref | Callable[..., Any]:
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
        found = _lookup(module, qualname)
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
    return _Ref(module, qualname, depth)


def _resolve(target: _Ref | Callable[..., Any]) -> Callable[..., Any]:
    if not isinstance(target, _Ref):
        return target
    found = _lookup(target.module, target.qualname)
    for _ in range(target.depth):
        found = found.__wrapped__
    return found  # type: ignore[no-any-return]


class _RemoteTraceback(Exception):
    """Carries a worker's formatted traceback as the ``__cause__`` of its exception."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f'\n"""\n{self.text}"""'


def _send_reply(conn: Connection, reply: tuple[str, Any, str | None]) -> bool:
    """Send a reply from a worker; ``False`` when the parent is gone."""
    try:
        conn.send(reply)
    except OSError:
        return False
    except Exception as exc:
        # The result or the exception could not be serialized; say so instead.
        what = "result" if reply[0] == "ok" else "exception"
        error = OffloadError(f"the call's {what} could not be sent back to the parent: {exc!r}")
        try:
            conn.send(("error", error, reply[2]))
        except OSError:
            return False
    return True


def _worker_main(
    conn: Connection,
    initializer: _Ref | Callable[..., Any] | None,
    initargs: tuple[Any, ...],
) -> None:
    """The loop of one worker process: initializer once, then one call at a time."""
    import traceback  # in the worker only: keeps `import asyncache` fast

    try:
        if initializer is not None:
            _resolve(initializer)(*initargs)
    except BaseException as exc:
        _send_reply(conn, ("init_error", exc, traceback.format_exc()))
        return
    if not _send_reply(conn, ("ready", os.getpid(), None)):
        return
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return  # the parent went away
        except Exception as exc:
            # The bytes were read, so the pipe is still in step; the arguments did not load.
            error = OffloadError(f"a worker could not load the call's arguments: {exc!r}")
            if not _send_reply(conn, ("error", error, traceback.format_exc())):
                return
            continue
        if message is None:
            return
        target, args, kwargs = message
        try:
            reply: tuple[str, Any, str | None] = ("ok", _resolve(target)(*args, **kwargs), None)
        except BaseException as exc:
            reply = ("error", exc, traceback.format_exc())
        if not _send_reply(conn, reply):
            return


class _Job:
    """One call waiting for, or running in, a worker process."""

    __slots__ = ("args", "cancelled", "future", "kwargs", "loop", "name", "target")

    def __init__(
        self,
        target: _Ref | Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        name: str,
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[Any],
    ) -> None:
        self.target = target
        self.args = args
        self.kwargs = kwargs
        self.name = name
        self.loop = loop
        self.future = future
        self.cancelled = False

    def give_up(self, _future: asyncio.Future[Any]) -> None:
        # A plain attribute store: read by the worker thread before it sends the call.
        if _future.cancelled():
            self.cancelled = True

    def finish(self, ok: bool, value: Any) -> None:
        _post(self.loop, self.future, ok, value)


def _exit_reason(code: int | None) -> str:
    import signal

    if code is None:
        return "unknown exit status"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class _Worker:
    """One worker process and the parent thread that feeds it calls.

    The thread takes a call from the pool's queue only when its process is
    idle, so at any moment it knows exactly which call its process runs: when
    the process dies, that call, and no other, fails.
    """

    def __init__(self, pool: ProcessOffload, index: int) -> None:
        self.pool = pool
        self.index = index
        self.process: BaseProcess | None = None
        self.conn: Connection | None = None
        self.pid: int | None = None
        self.spawned = False
        self.start_error: BaseException | None = None
        self.started = threading.Event()
        self.thread = threading.Thread(
            target=self._serve, name=f"asyncache-process-{index}", daemon=True
        )

    def _serve(self) -> None:
        pool = self.pool
        try:
            self.start_error = self._spawn()  # load the model before the first call arrives
            self.started.set()
            while True:
                job = pool._jobs.get()
                if job is None:
                    return
                if job.cancelled:
                    continue
                try:
                    if not self._alive():
                        error = self._spawn()
                        if error is not None:
                            job.finish(False, error)
                            continue
                    self._execute(job)
                except Exception as exc:
                    # Whatever went wrong here, the caller gets an answer and the worker serves on.
                    job.finish(False, OffloadError(f"the process pool failed a call: {exc!r}"))
                    self._reap()
        finally:
            self.started.set()
            self._stop()

    def _alive(self) -> bool:
        return self.process is not None and self.process.is_alive()

    def _spawn(self) -> BaseException | None:
        """Start a process and wait until its initializer ran; the error when it failed."""
        self._reap()
        pool = self.pool
        if self.spawned:
            pool._restarts += 1
        self.spawned = True
        import multiprocessing  # only process pools need it

        context: Any = multiprocessing.get_context(pool.context)
        parent, child = context.Pipe(duplex=True)
        process = context.Process(
            target=_worker_main,
            args=(child, pool._initializer, pool._initargs),
            name=f"asyncache-worker-{self.index}",
            daemon=True,
        )
        try:
            process.start()
        except Exception as exc:
            parent.close()
            child.close()
            return OffloadError(f"could not start a worker process: {exc!r}")
        finally:
            child.close()
        self.process, self.conn, self.pid = process, parent, process.pid
        try:
            kind, payload, remote = self._receive()
        except Exception as exc:
            # The initializer's exception could not be rebuilt in this process.
            kind, payload, remote = "init_error", OffloadError(repr(exc)), None
        if kind == "ready":
            return None
        self._reap()
        if kind == "init_error":
            error = OffloadError(f"the worker initializer raised {payload!r}")
            error.__cause__ = _RemoteTraceback(remote or "")
            return error
        return WorkerDiedError(f"a worker process died while starting ({payload})")

    def _receive(self) -> tuple[str, Any, str | None]:
        """Wait for the process's next message, or its death (``("died", reason, None)``)."""
        from multiprocessing.connection import wait

        process, conn = self.process, self.conn
        assert process is not None and conn is not None
        wait([conn, process.sentinel])
        if conn.poll():
            try:
                message: tuple[str, Any, str | None] = conn.recv()
            except (EOFError, OSError):
                pass
            else:
                return message
        process.join(1.0)
        return "died", _exit_reason(process.exitcode), None

    def _execute(self, job: _Job) -> None:
        conn = self.conn
        assert conn is not None
        try:
            conn.send((job.target, job.args, job.kwargs))
        except OSError:
            # The process died before it read the call, so the call never ran.
            self.pool._jobs.put(job)
            self._reap()
            return
        except Exception as exc:
            job.finish(
                False,
                TypeError(
                    f"ProcessOffload could not send the arguments of {job.name} to a worker "
                    f"process (they must be picklable): {exc!r}"
                ),
            )
            return
        try:
            kind, payload, remote = self._receive()
        except Exception as exc:
            # The reply arrived but could not be rebuilt here (an exception class
            # whose __init__ takes other arguments, say); the pipe is still in step.
            job.finish(False, OffloadError(f"the reply to {job.name} could not be read: {exc!r}"))
            return
        if kind == "ok":
            job.finish(True, payload)
        elif kind == "error":
            if remote and isinstance(payload, BaseException) and payload.__cause__ is None:
                payload.__cause__ = _RemoteTraceback(remote)
            job.finish(False, payload)
        else:
            pid = self.pid
            self._reap()
            self.pool._deaths += 1
            job.finish(
                False,
                WorkerDiedError(
                    f"the worker process (pid {pid}) running {job.name} died ({payload}); "
                    "the pool replaced it"
                ),
            )
            # Replace it now, so the next call does not wait for the model to load.
            self._spawn()

    def _reap(self) -> None:
        """Forget a dead (or never ready) process, collecting its exit status."""
        process, conn = self.process, self.conn
        self.process = self.conn = None
        self.pid = None
        if conn is not None:
            conn.close()
        if process is not None:
            _join(process, self.pool.stop_timeout)

    def _stop(self) -> None:
        """Ask the process to exit after its current call; terminate it when it does not."""
        if self.conn is not None:
            try:
                self.conn.send(None)
            except OSError:
                pass
        process, conn = self.process, self.conn
        self.process = self.conn = None
        self.pid = None
        if conn is not None:
            conn.close()
        if process is not None:
            _join(process, self.pool.stop_timeout)


def _join(process: BaseProcess, timeout: float) -> None:
    """Join ``process``: politely, then with SIGTERM, then with SIGKILL."""
    process.join(timeout)
    if process.exitcode is None:
        process.terminate()
        process.join(1.0)
    if process.exitcode is None:
        process.kill()
        process.join()
    process.close()


class ProcessOffload(_Pool):
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
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._workers: list[_Worker] = []
        self._refs: dict[Callable[..., Any], _Ref | Callable[..., Any]] = {}  # plain functions
        self._lock = threading.Lock()
        self._closed = False
        self._submitted = 0
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
                workers = [_Worker(self, index) for index in range(self.max_workers)]
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

        await _off_loop(wait_started, "asyncache-process-start")
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
        target: _Ref | Callable[..., Any]
        if inspect.isfunction(fn):
            # Plain functions travel by name; resolving it once per function is enough.
            ref = self._refs.get(fn)
            target = ref if ref is not None else self._refs.setdefault(fn, _reference(fn))
        else:
            target = fn  # bound methods, partials, callable objects: sent as they are
        self._ensure_started()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        job = _Job(target, args, kwargs, _describe(fn), loop, future)
        future.add_done_callback(job.give_up)
        self._submitted += 1
        self._jobs.put(job)
        return await future

    def stats(self) -> dict[str, int]:
        """Calls submitted, calls queued, workers, worker deaths and restarts so far."""
        return {
            "submitted": self._submitted,
            "queued": self._jobs.qsize(),
            "max_workers": self.max_workers,
            "workers": len(self.pids),
            "deaths": self._deaths,
            "restarts": self._restarts,
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

        await _off_loop(join_threads, "asyncache-process-close")
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


# -- choosing a pool ---------------------------------------------------------


class _SharedOffload:
    """``offload="thread"`` or ``"process"``: the process-wide pool of that kind.

    The pool itself starts on first use and is replaced after
    ``aclose_default_offloads()``, so functions decorated at import time keep
    working across event loops and shutdowns.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._pool: ThreadOffload | ProcessOffload | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<shared {self.kind} offload {self._pool!r}>"

    def pool(self) -> ThreadOffload | ProcessOffload:
        """The pool in use now (created on first call)."""
        pool = self._pool
        if pool is None:
            with self._lock:
                pool = self._pool
                if pool is None:
                    pool = self._pool = (
                        ThreadOffload() if self.kind == "thread" else ProcessOffload()
                    )
        return pool

    @property
    def max_workers(self) -> int:
        return self.pool().max_workers

    def stats(self) -> dict[str, int]:
        return self.pool().stats()

    async def run(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
        return await self.pool().run(fn, *args, **kwargs)

    async def aclose(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            await pool.aclose()


_shared = {"thread": _SharedOffload("thread"), "process": _SharedOffload("process")}


def resolve_offload(offload: str | Offload | None) -> Offload:
    """The pool an ``offload=`` option names.

    ``"thread"`` and ``"process"`` name pools shared by everything in this
    process (started on first use; ``aclose_default_offloads()`` stops them);
    an ``Offload`` is used as it is.

    Raises:
        ValueError: an unknown pool name.
        TypeError: neither a name nor an ``Offload`` (``None`` included).
    """
    if offload is None:
        raise TypeError("offload is required here: 'thread', 'process' or an Offload")
    if isinstance(offload, str):
        shared = _shared.get(offload.lower())
        if shared is None:
            raise ValueError(
                f"offload must be 'thread', 'process' or an Offload instance, not {offload!r}"
            )
        return shared
    if callable(getattr(offload, "run", None)) and callable(getattr(offload, "aclose", None)):
        return offload
    raise TypeError(
        f"offload must be 'thread', 'process' or an Offload (an object with async run() and "
        f"aclose()), not {type(offload).__name__}"
    )


async def aclose_default_offloads() -> None:
    """Stop the shared ``"thread"`` and ``"process"`` pools; they start again on next use."""
    for shared in _shared.values():
        await shared.aclose()
