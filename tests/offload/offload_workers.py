"""Module-level functions that worker processes import by name (tests of asyncache.offload).

Kept apart from the test modules so that a spawned worker imports only this
small module, not pytest and the tests.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from asyncache import DecisionCache, cached_prediction

# Set by the initializer in each worker process: proves it ran there, once.
MODEL: dict[str, object] = {}
_loads = 0


def load_model(name: str) -> None:
    """A worker initializer: 'loads a model' into this module."""
    global _loads
    _loads += 1
    MODEL["name"] = name
    MODEL["pid"] = os.getpid()


def broken_initializer() -> None:
    raise RuntimeError("the weights file is missing")


def model_info(_: object = None) -> tuple[object, object, int, int]:
    """What the worker's model is, where it runs and how often it was loaded."""
    return MODEL.get("name"), MODEL.get("pid"), os.getpid(), _loads


def square(x: int) -> int:
    return x * x


def pid_after(seconds: float) -> int:
    """Sleep (a stand-in for a slow forward pass), then say which process answered."""
    time.sleep(seconds)
    return os.getpid()


def exit_hard(code: int = 3) -> None:
    """Die the way a crashing native extension does: no exception, no cleanup."""
    os._exit(code)


def kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def fail(message: str) -> None:
    raise ValueError(message)


def thread_name(_: object = None) -> str:
    return threading.current_thread().name


def count_primes(limit: int) -> int:
    """Pure-Python work that holds the GIL the whole time."""
    found = 0
    for n in range(2, limit):
        for d in range(2, int(n**0.5) + 1):
            if n % d == 0:
                break
        else:
            found += 1
    return found


def batch_lengths(items: list[str]) -> list[int]:
    """A 'batched model' that processes can run: one answer per item."""
    return [len(item) for item in items]


class Unpicklable:
    """An object that cannot travel to a worker process."""

    def __reduce__(self) -> str | tuple[object, ...]:
        raise TypeError("Unpicklable objects stay in their process")


def returns_unpicklable() -> Unpicklable:
    return Unpicklable()


# A decorated module-level function: the module attribute is the wrapper, and
# worker processes must find the plain function underneath it.
CUBE_CACHE = DecisionCache()


@cached_prediction(CUBE_CACHE, offload="process", namespace="tests.cube")
def cube(x: int) -> int:
    return x**3


def start_when_told(directory: str) -> None:
    """A worker initializer that says it is starting, then waits to be let go.

    It writes its pid to ``directory/<pid>`` and loads nothing until
    ``directory/<pid>.go`` exists: a test decides, without racing the
    initializer, whether this process is killed while starting or finishes.
    """
    from pathlib import Path

    here = Path(directory)
    (here / str(os.getpid())).write_text("starting")
    while not (here / f"{os.getpid()}.go").exists():
        time.sleep(0.005)
