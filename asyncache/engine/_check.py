"""The startup check: one round trip to the store, and what failed if it did not come back.

The engine's guard turns a store's faults into misses, so a store that is down
or misconfigured serves traffic as a cache that never hits. An app asks
``await cache.check()`` at startup (and a health route asks it on demand) to
learn that at once: a probe key is written, read back and deleted, each step
under the cache's ``store_timeout``, and the first step that fails is named
with its error. In replay, which never writes, the check only reads.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._runtime import timeout_after

if TYPE_CHECKING:
    from ._engine import Engine

__all__ = ["StoreCheck", "check_store"]

# A probe left behind (a failed delete, a store without one) expires on its own.
PROBE_TTL = 60.0
PROBE_VALUE = b"asyncache check"


@dataclass(frozen=True)
class StoreCheck:
    """What ``DecisionCache.check()`` found: true when the store answered every step."""

    store: str
    """The store checked (its class name)."""
    steps: tuple[str, ...]
    """The steps that succeeded, in order: ``write``, ``read``, ``delete``."""
    failed: str | None = None
    """The step that failed, or ``None``."""
    error: str | None = None
    """What that step raised (or why its answer was wrong)."""
    seconds: float = 0.0
    """How long the check took."""

    @property
    def ok(self) -> bool:
        """Whether every step succeeded."""
        return self.failed is None

    def __bool__(self) -> bool:
        return self.ok

    @property
    def message(self) -> str:
        """One line for a log or a startup error."""
        if self.ok:
            return f"{self.store}: {', '.join(self.steps)} ok in {self.seconds * 1000:.1f} ms"
        return f"{self.store}: {self.failed} failed: {self.error}"

    def as_dict(self) -> dict[str, Any]:
        """The check as JSON-ready values (the health endpoint's ``"check"``)."""
        return {
            "ok": self.ok,
            "store": self.store,
            "steps": list(self.steps),
            "failed": self.failed,
            "error": self.error,
            "seconds": self.seconds,
        }


async def check_store(engine: Engine) -> StoreCheck:
    """Write, read back and delete a probe key on ``engine``'s store (read only in replay)."""
    store: Any = engine.store
    name = type(store).__name__
    timeout = engine.guard.timeout
    key = os.urandom(16)  # never a real decision's key, and no other check's
    steps: list[str] = []
    started = time.perf_counter()

    async def step(call: Callable[[], Awaitable[Any]]) -> Any:
        async with timeout_after(timeout):
            return await call()

    def failed(what: str, error: str) -> StoreCheck:
        seconds = time.perf_counter() - started
        return StoreCheck(name, tuple(steps), what, error, seconds)

    replay = engine.mode == "replay"
    expected = None if replay else PROBE_VALUE
    try:
        if not replay:
            what = "write"
            await step(lambda: store.add(key, PROBE_VALUE, time.time() + PROBE_TTL))
            steps.append(what)
        what = "read"
        entry = await step(lambda: store.get(key))
        found = None if entry is None else entry.value
        if found != expected:
            return failed(what, f"read back {found!r}, expected {expected!r}")
        steps.append(what)
        delete = getattr(store, "delete", None)
        if not replay and delete is not None:
            what = "delete"
            await step(lambda: delete(key))
            steps.append(what)
    except Exception as exc:
        if isinstance(exc, TimeoutError):
            return failed(what, f"timed out after {timeout}s")
        return failed(what, f"{type(exc).__name__}: {exc}")
    return StoreCheck(name, tuple(steps), seconds=time.perf_counter() - started)
