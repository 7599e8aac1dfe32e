"""The parent's side of one worker process: a thread that feeds it calls and replaces it.

Each ``ProcessOffload`` worker is a process plus a thread in the parent that
owns it. The thread takes one call at a time from the pool's queue, sends it
down the process's pipe and waits for the reply or the process's death, so a
dead process fails only the call it held. A call that never reached a process
(its replacement died while starting, or died before reading it) goes back to
the queue, for another worker or the next replacement.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import OffloadError, WorkerDiedError
from .base import post_outcome
from .worker import FunctionRef, worker_main

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

__all__ = ["START_DEATHS", "Job", "WorkerSupervisor"]

logger = logging.getLogger("asyncache.offload")

START_DEATHS = 8
"""Replacements that may die while starting for one call before that call fails.

A call that never ran is safe to hand on; the bound keeps a worker that can
never start (it crashes while loading the model) from holding calls forever.
"""


class Job:
    """One call waiting for, or running in, a worker process.

    Args:
        target: the function, by name or as it is (see ``ProcessOffload.run``).
        args: positional arguments for the call.
        kwargs: keyword arguments for the call.
        name: names the function in error messages.
        loop: the loop of the caller that awaits ``future``.
        future: completed with the call's outcome.
    """

    __slots__ = (
        "args",
        "cancelled",
        "future",
        "kwargs",
        "loop",
        "name",
        "start_deaths",
        "target",
    )

    def __init__(
        self,
        target: FunctionRef | Callable[..., Any],
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
        self.start_deaths = 0
        """Processes that died while starting to run this call."""

    def give_up(self, _future: asyncio.Future[Any]) -> None:
        """Done callback of ``future``: a cancelled call is skipped, not sent."""
        # A plain attribute store: read by the worker thread before it sends the call.
        if _future.cancelled():
            self.cancelled = True

    def finish(self, ok: bool, value: Any) -> None:
        """Hand the call's result (``ok``) or exception to its caller's loop."""
        post_outcome(self.loop, self.future, ok, value)


class _RemoteTraceback(Exception):
    """Carries a worker's formatted traceback as the ``__cause__`` of its exception."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f'\n"""\n{self.text}"""'


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


# multiprocessing's Process is not safe to use from several threads (CPython #94661,
# #104536): Process.start() polls every child of this process and prunes the set they
# are kept in, so it can collect the exit status of a process that another supervisor
# thread is joining, which then takes it for running (close() raises), or change that
# set under a join. Every call here that collects a status or changes the set (start,
# join, close) holds this lock; waiting for an exit does not (it reads the sentinel).
_CHILDREN = threading.Lock()


def _exited(process: BaseProcess, timeout: float | None) -> bool:
    """Whether ``process`` has exited, waiting up to ``timeout`` seconds (``None``: until
    it does); once it has, its exit status is collected (``process.exitcode``)."""
    from multiprocessing.connection import wait

    if not wait([process.sentinel], timeout):
        return False
    with _CHILDREN:
        process.join()  # it has exited: this only collects its status
    return True


def _join(process: BaseProcess, timeout: float) -> None:
    """Join ``process``: politely, then with SIGTERM, then with SIGKILL."""
    if not _exited(process, timeout):
        process.terminate()
        if not _exited(process, 1.0):
            process.kill()
            _exited(process, None)
    with _CHILDREN:
        try:
            process.close()
        except ValueError:
            # It has exited (its sentinel says so), but its status went to another
            # reaper of this process's children (os.wait, a SIGCHLD handler, or
            # multiprocessing polled from a thread that is not a supervisor's), so
            # multiprocessing takes it for running and keeps it, with its sentinel's
            # pipe, among this process's children: one pipe per such rare exit, not a
            # failed call.
            logger.debug("worker %s exited; its status was collected elsewhere", process.pid)


class WorkerSupervisor:
    """One worker process and the parent thread that feeds it calls.

    The thread takes a call from the pool's queue only when its process is
    idle, so at any moment it knows exactly which call its process runs: when
    the process dies, that call, and no other, fails. ``deaths`` counts every
    process of this worker found dead (running a call, idle, or starting), and
    ``restarts`` every process started in place of another.

    Args:
        jobs: the pool's queue; ``None`` in it tells one worker to stop.
        index: names the thread and the process.
        context: the multiprocessing start method, ``"spawn"`` or ``"forkserver"``.
        initializer: what each new process runs once, or ``None``.
        initargs: arguments for ``initializer``.
        stop_timeout: seconds a process may take to exit before it is terminated.
    """

    def __init__(
        self,
        jobs: queue.SimpleQueue[Job | None],
        index: int,
        *,
        context: str,
        initializer: FunctionRef | Callable[..., Any] | None,
        initargs: tuple[Any, ...],
        stop_timeout: float,
    ) -> None:
        self.jobs = jobs
        self.index = index
        self.context = context
        self.initializer = initializer
        self.initargs = initargs
        self.stop_timeout = stop_timeout
        self.process: BaseProcess | None = None
        self.conn: Connection | None = None
        self.pid: int | None = None
        self.spawned = False
        self.deaths = 0
        self.restarts = 0
        self.start_error: BaseException | None = None
        self.started = threading.Event()
        self.thread = threading.Thread(
            target=self._serve, name=f"asyncache-process-{index}", daemon=True
        )

    def _serve(self) -> None:
        try:
            self.start_error = self._spawn()  # load the model before the first call arrives
            self.started.set()
            while True:
                job = self.jobs.get()
                if job is None:
                    return
                if job.cancelled:
                    continue
                try:
                    if not self._alive():
                        error = self._spawn()
                        if error is not None:
                            if (
                                isinstance(error, WorkerDiedError)
                                and job.start_deaths < START_DEATHS
                            ):
                                # It never ran: back to the queue, for a worker that is up.
                                job.start_deaths += 1
                                self.jobs.put(job)
                            else:
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
        if self.process is None:
            return False
        if not _exited(self.process, 0):
            return True
        self.deaths += 1  # died while idle: killed, or the OOM killer's pick
        self._reap()
        return False

    def _spawn(self) -> BaseException | None:
        """Start a process and wait until its initializer ran; the error when it failed."""
        self._reap()
        if self.spawned:
            self.restarts += 1
        self.spawned = True
        import multiprocessing  # only process pools need it

        context: Any = multiprocessing.get_context(self.context)
        parent, child = context.Pipe(duplex=True)
        process = context.Process(
            target=worker_main,
            args=(child, self.initializer, self.initargs),
            name=f"asyncache-worker-{self.index}",
            daemon=True,
        )
        try:
            with _CHILDREN:
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
        if kind == "died":
            self.deaths += 1
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
        code = process.exitcode if _exited(process, 1.0) else None
        return "died", _exit_reason(code), None

    def _execute(self, job: Job) -> None:
        conn = self.conn
        assert conn is not None
        try:
            conn.send((job.target, job.args, job.kwargs))
        except OSError:
            # The process died before it read the call, so the call never ran.
            self.deaths += 1
            self.jobs.put(job)
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
            self.deaths += 1
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
            _join(process, self.stop_timeout)

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
            _join(process, self.stop_timeout)
