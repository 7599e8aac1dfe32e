"""What the engine needs of its optional parts, as protocols.

The engine holds a ``Leasing`` (``asyncache.lease.Leases``) when leases are on
and a ``Sampler`` (``asyncache.audit.Auditor``) when audits or shadow mode are;
it knows them only by these protocols, so it never imports their modules and
they can import the engine.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from .codec import Decoded
from .stores.protocol import Entry

__all__ = ["FlightObserver", "LeaseAttempt", "Leasing", "Sampler"]

T = TypeVar("T")


class FlightObserver(Protocol):
    """Told when a flight (the one computation of a missed key) starts and ends.

    ``asyncache.adapters.otel`` opens a span in ``start`` and ends it in
    ``end``. Both run in the flight's own task, around the model call, so
    what ``start`` makes current (a span) is current while the model runs.
    """

    def start(self) -> Any:
        """The flight starts; returns what ``end`` is handed back."""
        ...

    def end(self, token: Any, outcome: str, waiters: int, error: BaseException | None) -> None:
        """The flight ended: ``outcome`` is ``"computed"``, ``"unshared"`` (the result
        was for its caller only), ``"error"`` or ``"cancelled"``; ``waiters`` callers
        coalesced onto it."""


class Sampler(Protocol):
    """What the path needs of an auditor (``asyncache.audit.Auditor``)."""

    def sample(
        self, key: bytes, value: bytes, compute: Callable[[], Awaitable[Any]], inputs: Any
    ) -> None:
        """Maybe audit a hit in the background; never waits."""

    def judge_shadow(self, key: bytes, inputs: Any, stored: Decoded | None, fresh: Any) -> None:
        """Count one shadow call: a miss, or a hit that would have agreed or not."""
        ...

    async def shadow(self, key: bytes, compute: Callable[[], Awaitable[Any]], inputs: Any) -> Any:
        """One call in shadow mode: compute, compare with the stored decision, fill the store."""
        ...


class LeaseAttempt(Protocol):
    """One try at a lease (``asyncache.lease.LeaseStart``)."""

    @property
    def token(self) -> bytes | None:
        """Set when the lease is ours."""
        ...

    @property
    def entry(self) -> Entry | None:
        """Set when a decision was stored meanwhile."""
        ...

    @property
    def held(self) -> bool:
        """Whether another process holds the lease."""
        ...


class Leasing(Protocol):
    """What the path needs of the leases (``asyncache.lease.Leases``)."""

    async def run(
        self, key: bytes, work: Callable[[], Awaitable[T]], adopt: Callable[[Entry], T]
    ) -> T:
        """Run ``work`` under the lease on ``key``, or adopt another process's entry."""
        ...

    async def begin(self, key: bytes) -> LeaseAttempt:
        """Try once to take the lease on ``key``."""
        ...

    async def finish(self, key: bytes, token: bytes | None) -> None:
        """Release a lease ``begin`` took."""
        ...
