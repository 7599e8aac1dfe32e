"""What runs inside a ``ProcessOffload`` worker process: find the function, run calls, reply.

The parent starts each process with ``worker_main`` as its target, so under
spawn the child imports this module by name; it needs nothing from the
parent's side of the pool.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import OffloadError

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

__all__ = ["FunctionRef", "lookup", "resolve", "worker_main"]


class FunctionRef(NamedTuple):
    """A function named by its import path; ``depth`` unwraps decorators (``__wrapped__``)."""

    module: str
    qualname: str
    depth: int


def lookup(module: str, qualname: str) -> Any:
    """Import ``module`` and follow the dotted ``qualname`` inside it.

    Raises:
        ImportError: ``module`` cannot be imported.
        AttributeError: ``qualname`` does not lead anywhere in it.
    """
    target: Any = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def resolve(target: FunctionRef | Callable[..., Any]) -> Callable[..., Any]:
    """The function ``target`` names; a callable that travelled as it is comes back as it is."""
    if not isinstance(target, FunctionRef):
        return target
    found = lookup(target.module, target.qualname)
    for _ in range(target.depth):
        found = found.__wrapped__
    return found  # type: ignore[no-any-return]


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


def worker_main(
    conn: Connection,
    initializer: FunctionRef | Callable[..., Any] | None,
    initargs: tuple[Any, ...],
) -> None:
    """The loop of one worker process: initializer once, then one call at a time.

    Args:
        conn: the worker's end of the pipe to its parent.
        initializer: what to run once before the first call, or ``None``.
        initargs: arguments for ``initializer``.
    """
    import traceback  # in the worker only: keeps `import asyncache` fast

    try:
        if initializer is not None:
            resolve(initializer)(*initargs)
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
            reply: tuple[str, Any, str | None] = ("ok", resolve(target)(*args, **kwargs), None)
        except BaseException as exc:
            reply = ("error", exc, traceback.format_exc())
        if not _send_reply(conn, reply):
            return
