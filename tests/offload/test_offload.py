"""asyncache.offload: thread, process and device pools, and the decorator's offload=."""

from __future__ import annotations

import asyncio
import contextvars
import os
import signal
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from asyncache import DecisionCache, cached_prediction
from asyncache.errors import OffloadError, WorkerDiedError
from asyncache.offload import (
    DeviceOffload,
    Offload,
    ProcessOffload,
    ThreadOffload,
    aclose_default_offloads,
    resolve_offload,
)

from . import offload_workers as workers

REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _dead(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie its parent has not reaped yet counts)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


async def _taken(offload: ProcessOffload) -> None:
    """Wait until a worker took every queued call (so the next call goes to another)."""
    await asyncio.sleep(0)  # let tasks just created submit their calls
    for _ in range(1000):
        if not offload.stats()["queued"]:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no worker took the queued calls")


@pytest.fixture
async def pool() -> AsyncIterator[ProcessOffload]:
    """Two workers that each 'loaded' model m1 through the initializer."""
    offload = ProcessOffload(2, initializer=workers.load_model, initargs=("m1",))
    try:
        yield await offload.start()
    finally:
        await offload.aclose()


# -- threads -----------------------------------------------------------------


async def test_thread_offload_runs_off_the_loop_with_the_callers_context() -> None:
    async with ThreadOffload(2) as offload:
        REQUEST_ID.set("r-17")
        name = await offload.run(workers.thread_name)
        seen = await offload.run(REQUEST_ID.get)
        assert name.startswith("asyncache-thread")
        assert name != threading.current_thread().name
        assert seen == "r-17"
        assert await offload.run(workers.square, 7) == 49
        with pytest.raises(ValueError, match="no good"):
            await offload.run(workers.fail, "no good")


async def test_thread_offload_aclose_joins_its_threads_and_refuses_new_calls() -> None:
    offload = ThreadOffload(3, thread_name_prefix="asyncache-closing")
    await asyncio.gather(*(offload.run(workers.pid_after, 0.01) for _ in range(6)))
    assert any(t.name.startswith("asyncache-closing") for t in threading.enumerate())
    await offload.aclose()
    assert not any(t.name.startswith("asyncache-closing") for t in threading.enumerate())
    with pytest.raises(OffloadError, match="closed"):
        await offload.run(workers.square, 2)
    await offload.aclose()  # twice is fine


# -- devices -----------------------------------------------------------------


async def test_device_offload_runs_every_call_on_one_dedicated_thread() -> None:
    async with DeviceOffload("cpu", initializer=workers.load_model, initargs=("on-cpu",)) as device:
        names = await asyncio.gather(*(device.run(workers.thread_name) for _ in range(8)))
        assert device.device == "cpu"
        assert device.max_workers == 1
        assert len(set(names)) == 1
        assert names[0].startswith("asyncache-cpu")
        assert names[0] != threading.current_thread().name
        assert workers.MODEL["name"] == "on-cpu"  # the initializer ran, in this process


@pytest.mark.skipif(_cuda_available(), reason="this machine has a CUDA device")
def test_device_offload_without_cuda_fails_at_construction_with_a_clear_error() -> None:
    with pytest.raises(OffloadError, match=r"no CUDA device 0"):
        DeviceOffload("cuda:0")
    with pytest.raises(OffloadError, match=r"no CUDA device 3"):
        DeviceOffload("cuda:3")


def test_device_offload_rejects_names_that_are_not_devices() -> None:
    with pytest.raises(ValueError, match="unknown device"):
        DeviceOffload("tpu")
    with pytest.raises(ValueError, match="index must be a number"):
        DeviceOffload("cuda:x")


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_available(), reason="needs a CUDA device")
async def test_device_offload_keeps_cuda_work_on_its_thread() -> None:
    import torch

    async with DeviceOffload("cuda:0") as device:

        def on_device() -> tuple[str, float]:
            x = torch.ones(256, 256, device="cuda")
            return threading.current_thread().name, float((x @ x).sum().item())

        first, second = await asyncio.gather(device.run(on_device), device.run(on_device))
        assert first[0] == second[0] and first[0].startswith("asyncache-cuda:0")
        assert first[1] == second[1] == 256.0**3


# -- processes ---------------------------------------------------------------


async def test_process_workers_load_the_model_once_each(pool: ProcessOffload) -> None:
    pids = set(pool.pids)
    assert len(pids) == 2 and os.getpid() not in pids
    answers = await asyncio.gather(*(pool.run(workers.model_info) for _ in range(12)))
    for name, loaded_in, ran_in, loads in answers:
        assert name == "m1"
        assert loaded_in == ran_in
        assert ran_in in pids
        assert loads == 1  # the initializer ran once in that worker, not once per call
    assert pool.stats()["submitted"] == 12


async def test_process_errors_keep_their_type_and_the_workers_traceback(
    pool: ProcessOffload,
) -> None:
    with pytest.raises(ValueError, match="bad input") as caught:
        await pool.run(workers.fail, "bad input")
    assert "offload_workers.py" in str(caught.value.__cause__)
    assert await pool.run(workers.square, 5) == 25


@pytest.mark.parametrize("death", [workers.exit_hard, workers.kill_self], ids=["_exit", "SIGKILL"])
async def test_a_dying_worker_fails_only_its_own_call(pool: ProcessOffload, death: object) -> None:
    assert callable(death)
    before = set(pool.pids)
    slow = asyncio.ensure_future(pool.run(workers.pid_after, 0.5))
    # Let the slow call reach a worker so the fatal one takes the other.
    await _taken(pool)
    with pytest.raises(WorkerDiedError, match=r"died \((exit code 3|killed by SIGKILL)\)"):
        await pool.run(death)
    assert await slow in before  # the other worker's call was not touched
    # The pool recovered: a replacement worker, with the model loaded, answers.
    answers = await asyncio.gather(*(pool.run(workers.model_info) for _ in range(6)))
    assert all(name == "m1" and loads == 1 for name, _, _, loads in answers)
    after = set(pool.pids)
    assert len(after) == 2 and len(after - before) == 1
    assert pool.stats()["deaths"] == 1
    assert pool.stats()["restarts"] == 1


async def test_calls_queued_behind_a_dying_call_still_run() -> None:
    async with ProcessOffload(1) as single:
        outcomes = await asyncio.gather(
            single.run(workers.exit_hard),
            single.run(workers.square, 3),
            single.run(workers.square, 4),
            return_exceptions=True,
        )
    assert isinstance(outcomes[0], WorkerDiedError)
    assert list(outcomes[1:]) == [9, 16]


def _started(directory: Path) -> set[int]:
    """The pids of the worker processes that said they were starting (``start_when_told``)."""
    return {int(path.name) for path in directory.iterdir() if path.suffix != ".go"}


async def _until_dead(pid: int) -> None:
    for _ in range(6000):
        if _dead(pid):
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"process {pid} did not die")


async def test_replacements_killed_while_starting_fail_no_call_and_every_death_counts(
    tmp_path: Path,
) -> None:
    # Every worker says when it starts and waits for a go-ahead, so each kill below
    # lands while a process is starting or idle, never while it runs a call.
    pool = ProcessOffload(2, initializer=workers.start_when_told, initargs=(str(tmp_path),))
    seen: set[int] = set()

    async def next_starting() -> int:
        for _ in range(6000):
            new = _started(tmp_path) - seen
            if new:
                pid = min(new)
                seen.add(pid)
                return pid
            await asyncio.sleep(0.005)
        raise AssertionError("no worker process started")

    def let_go(pid: int) -> None:
        (tmp_path / f"{pid}.go").write_text("go")

    try:
        started = asyncio.ensure_future(pool.start())
        first = [await next_starting(), await next_starting()]
        for pid in first:
            let_go(pid)
        await started
        for pid in first:  # killed while idle
            os.kill(pid, signal.SIGKILL)
        for pid in first:  # dead before any call is sent, so none is sent to them
            await _until_dead(pid)
        calls = asyncio.gather(
            *(pool.run(workers.square, n) for n in range(6)), return_exceptions=True
        )
        killed_while_starting = 4
        for _ in range(killed_while_starting):
            os.kill(await next_starting(), signal.SIGKILL)
        while not calls.done():  # the next replacements may start
            try:
                let_go(await asyncio.wait_for(next_starting(), 0.05))
            except TimeoutError:
                pass
        assert await calls == [n * n for n in range(6)]  # no call failed: none ever ran
        assert pool.stats()["deaths"] == len(first) + killed_while_starting
    finally:
        for pid in _started(tmp_path):
            let_go(pid)
        await pool.aclose()


async def test_a_worker_whose_exit_another_reaper_collected_fails_no_call() -> None:
    # Something else in the process (os.wait, a SIGCHLD handler) may collect a worker's
    # exit status before the pool does; multiprocessing then takes the worker for
    # running, and closing it raises (CPython #94661). The pool replaces it all the same.
    async with ProcessOffload(1) as single:
        await single.start()
        [pid] = single.pids
        os.kill(pid, signal.SIGKILL)
        await asyncio.to_thread(os.waitpid, pid, 0)  # collected here, before the pool looks
        assert await single.run(workers.square, 7) == 49
        assert single.stats()["deaths"] == 1
        assert single.pids != [pid]


async def test_process_offload_refuses_what_a_worker_cannot_import(pool: ProcessOffload) -> None:
    def nested(x: int) -> int:
        return x

    with pytest.raises(TypeError, match="Define it at module level"):
        await pool.run(nested, 1)
    with pytest.raises(TypeError, match="Define it at module level"):
        await pool.run(lambda: 1)
    with pytest.raises(TypeError, match="must be picklable"):
        await pool.run(workers.square, workers.Unpicklable())
    with pytest.raises(OffloadError, match="could not be sent back"):
        await pool.run(workers.returns_unpicklable)
    assert pool.stats()["deaths"] == 0
    assert await pool.run(workers.square, 6) == 36


def test_process_offload_refuses_fork_and_nested_initializers() -> None:
    with pytest.raises(ValueError, match="forkserver"):
        ProcessOffload(1, context="fork")

    def local_init() -> None:
        pass

    with pytest.raises(TypeError, match="module level"):
        ProcessOffload(1, initializer=local_init)


async def test_a_failing_initializer_is_a_clear_error_not_a_hang() -> None:
    async with ProcessOffload(1, initializer=workers.broken_initializer) as broken:
        with pytest.raises(OffloadError, match="initializer raised"):
            await broken.start()
        with pytest.raises(OffloadError, match="initializer raised") as caught:
            await broken.run(workers.square, 2)
        assert "the weights file is missing" in str(caught.value.__cause__)


async def test_aclose_finishes_running_calls_and_leaves_no_child_processes() -> None:
    offload = ProcessOffload(2, initializer=workers.load_model, initargs=("m1",))
    await offload.start()
    pids = offload.pids
    assert len(pids) == 2
    running = asyncio.ensure_future(offload.run(workers.pid_after, 0.3))
    await _taken(offload)
    await offload.aclose()
    assert await running in pids
    assert all(_gone(pid) for pid in pids)
    assert offload.pids == []
    with pytest.raises(OffloadError, match="closed"):
        await offload.run(workers.square, 2)


async def test_aclose_fails_calls_that_never_started() -> None:
    offload = ProcessOffload(1)
    await offload.start()
    first = asyncio.ensure_future(offload.run(workers.pid_after, 0.3))
    await _taken(offload)
    queued = asyncio.ensure_future(offload.run(workers.square, 2))
    await asyncio.sleep(0)
    await offload.aclose()
    assert isinstance(await first, int)
    with pytest.raises(OffloadError, match="closed before the call started"):
        await queued


async def test_the_loop_keeps_running_while_a_process_computes(pool: ProcessOffload) -> None:
    call = asyncio.ensure_future(pool.run(workers.pid_after, 0.5))
    ticks = 0
    while not call.done():
        ticks += 1
        await asyncio.sleep(0.01)
    await call
    assert ticks > 1  # the loop ran other work while the worker slept


# -- choosing a pool and the decorator ---------------------------------------


async def test_resolve_offload() -> None:
    try:
        thread = resolve_offload("thread")
        assert resolve_offload("thread") is thread
        assert await thread.run(workers.thread_name) != threading.current_thread().name
        assert isinstance(thread, Offload)
        process = resolve_offload("process")
        assert await process.run(workers.square, 5) == 25
        assert process is not thread
        mine = ThreadOffload(1)
        assert resolve_offload(mine) is mine
        assert isinstance(mine, Offload)
        with pytest.raises(ValueError, match="'thread', 'process'"):
            resolve_offload("gpu")
        with pytest.raises(TypeError, match="async run"):
            resolve_offload(object())  # type: ignore[arg-type]
    finally:
        await aclose_default_offloads()


async def test_hits_never_touch_the_pool() -> None:
    cache = DecisionCache()
    async with ThreadOffload(2) as offload:
        square = cached_prediction(cache, offload=offload)(workers.square)
        assert await square(9) == 81
        assert offload.stats()["submitted"] == 1
        for _ in range(5):
            assert await square(9) == 81
        assert offload.stats()["submitted"] == 1  # five hits, no work submitted
        assert cache.stats()["hits"] == 5


async def test_decorated_module_function_runs_in_the_shared_process_pool() -> None:
    # workers.cube is the @cached_prediction wrapper; the workers find the function under it.
    try:
        assert await workers.cube(3) == 27
        assert await workers.cube(3) == 27
        shared = resolve_offload("process")
        assert shared.stats()["submitted"] == 1  # type: ignore[attr-defined]
        assert workers.cube.cache.stats()["hits"] == 1
    finally:
        await aclose_default_offloads()
        await workers.CUBE_CACHE.aclose()
