"""Choosing a pool: ``offload="thread"`` and ``"process"`` name pools shared process-wide."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from .base import Offload
from .process import ProcessOffload
from .thread import ThreadOffload

__all__ = ["aclose_default_offloads", "resolve_offload"]

R = TypeVar("R")


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
