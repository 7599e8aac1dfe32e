"""Leases: one computation of a key across processes and machines.

In-process coalescing runs a miss once per event loop; a fleet of replicas
would still run it once per replica. With ``DecisionCache(leases=True)`` the
task that computes a flight first takes a short lease on the key in the shared
store (a ``LeaseStore``: Redis ``SET NX PX``, an SQLite row):

- it got the lease: compute, ``add`` the decision, release the lease;
- another process holds it: wait for the decision (the store is notified or
  polls) for up to the lease's time, and use it when it appears;
- the lease went away without a decision (its owner died, or its result was
  not stored): take the lease over. The store's atomic acquire lets exactly
  one waiter win; the others go back to waiting.

The lease is short (``lease_ttl``, 1 s by default) and its owner renews it
every third of that while the model runs (the holder's own acquire extends
it, as etcd and memcache leases are kept alive): a live owner keeps its lease
however long the model takes, and a dead one's (``kill -9``, a lost host)
ends within ``lease_ttl``, after which a waiter takes over.

A store failure at any step is counted and logged like every store failure,
and the prediction is computed without a lease: leases may cost a duplicate
computation, never a failed one.

With ``store_wait`` (the waiting mode) no step takes a failure for an answer:
taking the lease, waiting for another's decision, the look after taking it,
and the owner's ``add`` of its decision are each tried again (with backoff,
through the store's failure cool-down) until the store answers or
``store_wait`` seconds passed. A failed look is not "no decision" (the entry
may well be there, on a node being failed over), and an owner's decision that
was not stored would be computed again, differently, by the next one: either
would give two answers. A fleet then waits out a failover and gives one
answer, at the price of that wait; after it, it computes as above.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from .._runtime import cancel_and_wait, spawn, timeout_after
from ..errors import DecodeError
from ..stores.protocol import Entry, LeaseStore
from ._guard import new_request, timed_out_before

if TYPE_CHECKING:
    from ._engine import Engine

__all__ = ["LeaseLost", "LeaseStart", "Leases", "lease_lost", "lease_store"]

T = TypeVar("T")

# A store call that failed: distinct from ``None`` (no entry) and ``False`` (not acquired).
_FAILED: Any = object()
STALE_POLL = 0.02
"""Seconds between looks while another process replaces a stale entry under its lease."""
# The backoff between tries of a store that fails, under ``store_wait``.
_REACH_FIRST = 0.05
_REACH_MAX = 0.5


class LeaseLost(BaseException):
    """Raised by a computation that finds, before it hands out anything, that its
    lease ran out and another process stored the key's decision: ``Leases.run``
    answers with that decision instead (``adopt``).

    A ``BaseException``: it is no failure of the model's, to be cached or logged.
    """

    def __init__(self, entry: Entry) -> None:
        super().__init__("the lease ran out and another process stored first")
        self.entry = entry


class _Held:
    """The lease the running flight holds: renewed last at ``renewed`` (monotonic)."""

    __slots__ = ("key", "leases", "renewed", "stale", "token")

    def __init__(self, leases: Leases, key: bytes, token: bytes, stale: bytes | None) -> None:
        self.leases = leases
        self.key = key
        self.token = token
        self.stale = stale
        self.renewed = time.monotonic()


# The lease of the flight running in this task, while its ``work`` runs.
_HOLDING: ContextVar[_Held | None] = ContextVar("asyncache_lease_held", default=None)


async def lease_lost() -> Entry | None:
    """Whether the running flight's lease ran out and another process stored first.

    For a computation about to hand out its first piece (a stream's first
    chunk): the entry stored meanwhile, which every caller is to get instead,
    or ``None`` to go on. Free while the lease was renewed within half its ttl
    (the renewal runs every third): only an owner whose loop stalled, or whose
    store stopped answering, asks the store.
    """
    held = _HOLDING.get()
    if held is None:
        return None
    return await held.leases._lost(held)


class LeaseStart(NamedTuple):
    """What one attempt to take a lease found, without waiting.

    ``token`` is set when the lease is ours; ``entry`` when a decision was
    stored meanwhile; ``held`` when another process computes the key. All
    empty means: compute without a lease (the store failed).
    """

    token: bytes | None
    entry: Entry | None
    held: bool


class Leases:
    """Takes, waits on and releases the leases of one cache's flights.

    Args:
        engine: the engine whose counters, timeouts and failure accounting are used.
        store: where the leases live: the cache's store, or a tier's shared L2.
        ttl: seconds a lease lives unless its owner renews it, which it does
            every ``ttl / 3`` while it computes: how long waiters wait for an
            owner that died.
    """

    __slots__ = ("_engine", "_held", "_renewals", "_store", "ttl")

    def __init__(self, engine: Engine, store: LeaseStore, *, ttl: float) -> None:
        if not ttl > 0:
            raise ValueError(f"lease_ttl must be positive, got {ttl!r}")
        self._engine = engine
        self._store = store
        self.ttl = float(ttl)
        self._renewals: dict[tuple[bytes, bytes], asyncio.Task[None]] = {}
        # The leases whose work runs, by (key, token): their last renewal's time.
        self._held: dict[tuple[bytes, bytes], _Held] = {}

    async def run(
        self,
        key: bytes,
        work: Callable[[], Awaitable[T]],
        adopt: Callable[[Entry], T],
        stale: bytes | None = None,
    ) -> T:
        """Run ``work`` (compute and add) under the lease on ``key``, or adopt another's entry.

        ``adopt`` turns an entry another process stored into the caller's value;
        it raises ``DecodeError`` when the entry cannot be used, and then
        ``work`` runs after all. An entry whose value is ``stale`` (the one the
        caller found past its ttl) is no decision to adopt: it is what is replaced.
        """
        token, entry = await self._claim(key, stale)
        if entry is not None:
            try:
                return adopt(entry)
            except DecodeError:
                pass
        if token is None:
            return await work()
        held = _Held(self, key, token, stale)
        self._held[(key, token)] = held
        holding = _HOLDING.set(held)
        try:
            return await work()
        except LeaseLost as lost:
            return adopt(lost.entry)  # the first decision stored, not ours
        finally:
            _HOLDING.reset(holding)
            self._held.pop((key, held.token), None)
            await self._release(key, held.token)

    async def _lost(self, held: _Held) -> Entry | None:
        """``lease_lost`` for ``held``: renew it if it may have run out; if another
        process holds it now, wait for that one's decision (taking the lease over
        anew if it dies too)."""
        if time.monotonic() - held.renewed < self.ttl / 2:
            return None
        key, token = held.key, held.token
        renew = getattr(self._store, "renew_lease", None) or self._store.acquire_lease
        sent = time.monotonic()
        kept = await self._call(
            "acquire_lease", self._engine.guard.timeout, lambda: renew(key, token, self.ttl)
        )
        if kept is _FAILED or kept:
            if kept is not _FAILED:
                held.renewed = sent
            # A store that renews with ``acquire_lease`` gives it back once the one that
            # took it over released it: what it stored meanwhile is the decision.
            entry = await self._look(key)
            if entry is _FAILED or entry is None or entry.value == held.stale:
                return None  # ours still, or no telling: go on
            return entry  # type: ignore[no-any-return]
        new_token, entry = await self.wait(key, held.stale)
        if entry is not None:
            return entry
        if new_token is not None:
            # Taken over anew: the old token is released, the new one by ``run``.
            self._held.pop((key, token), None)
            await self._release(key, token)
            held.token, held.renewed = new_token, time.monotonic()
            self._held[(key, new_token)] = held
        return None

    async def read_back(self, key: bytes) -> Entry | None:
        """The entry stored under ``key``, after our ``add`` of it failed: a decision made
        under a lease that ran out may have lost to another's, which is every caller's.

        Asked even while the store cools down (one call, within the store timeout).
        """
        entry = await self._call(
            "get", self._engine.guard.timeout, lambda: self._engine.store.get(key), probe=True
        )
        return None if entry is _FAILED else entry

    async def _claim(
        self, key: bytes, stale: bytes | None = None
    ) -> tuple[bytes | None, Entry | None]:
        """Take the lease (``token``), or wait for another's entry (``entry``).

        ``(None, None)`` means: compute without a lease (a store failure, or a
        wait longer than the cache's ``coalesce_timeout``).
        """
        start = await self.begin(key, stale)
        if not start.held:
            return start.token, start.entry
        return await self.wait(key, stale)

    async def begin(self, key: bytes, stale: bytes | None = None) -> LeaseStart:
        """Try once to take the lease on ``key``; never waits for another process.

        An entry whose value is ``stale`` does not count as a decision stored meanwhile.
        """
        token = os.urandom(16)
        acquired = await self._reach(key, token)
        if acquired is _FAILED:
            return LeaseStart(None, None, held=False)
        if acquired:
            token_or_none, entry = await self._recheck(key, token, stale)
            return LeaseStart(token_or_none, entry, held=False)
        return LeaseStart(None, None, held=True)

    async def finish(self, key: bytes, token: bytes | None) -> None:
        """Release a lease ``begin`` took (nothing when ``token`` is ``None``)."""
        if token is not None:
            await self._release(key, token)

    async def wait(
        self, key: bytes, stale: bytes | None = None
    ) -> tuple[bytes | None, Entry | None]:
        """Wait for another process's decision on ``key``, taking the lease over if it dies.

        Returns ``(token, None)`` when the lease became ours, ``(None, entry)``
        when the decision appeared, ``(None, None)`` to compute without a lease.
        While the store still holds the ``stale`` entry, which a store's wait
        returns at once, the wait polls every ``STALE_POLL`` seconds instead.
        """
        token = os.urandom(16)
        stats = self._engine.stats
        stats.lease_waits += 1
        started = time.monotonic()
        limit = self._engine.coalesce_timeout
        deadline = None if limit is None else started + limit
        try:
            while True:
                wait = self.ttl
                if deadline is not None:
                    wait = min(wait, deadline - time.monotonic())
                    if wait <= 0:
                        stats.coalesce_timeouts += 1
                        return None, None
                entry = await self._persist(functools.partial(self._wait, key, wait))
                if entry is _FAILED:
                    return None, None
                if entry is not None and stale is not None and entry.value == stale:
                    await asyncio.sleep(min(wait, STALE_POLL))
                    entry = None  # still the stale one: its refresher is at work, or died
                if entry is not None:
                    return None, entry
                # No entry and (the store says) no lease: its owner is gone. The
                # acquire is atomic, so exactly one waiter takes over.
                acquired = await self._reach(key, token)
                if acquired is _FAILED:
                    return None, None
                if acquired:
                    token_or_none, entry = await self._recheck(key, token, stale)
                    if token_or_none is not None:
                        stats.lease_takeovers += 1
                    return token_or_none, entry
        finally:
            stats.lease_wait_seconds += time.monotonic() - started

    async def _recheck(
        self, key: bytes, token: bytes, stale: bytes | None = None
    ) -> tuple[bytes | None, Entry | None]:
        """Look once more after acquiring: the last owner may have stored and released
        between our miss and our acquire, and its decision must not be computed again."""
        entry = await self._look(key)
        if entry is _FAILED:
            entry = None  # compute under our lease: what we add meets any decision there
        if entry is not None and (stale is None or entry.value != stale):
            await self._release(key, token)
            return None, entry
        self._keep(key, token)
        return token, None

    def _keep(self, key: bytes, token: bytes) -> None:
        """Renew our lease on ``key`` every third of its ttl until it is released."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # trio: the lease lives its ttl, unrenewed
            return
        task = spawn(self._renew(key, token))
        if task is not None:
            self._renewals[(key, token)] = task

    async def _renew(self, key: bytes, token: bytes) -> None:
        """Renew the lease every third of its ttl while ``(key, token)`` is in ``_renewals``.

        Whether to go on is looked up after every await, not left to the
        task's cancellation alone: on Python 3.11 ``asyncio.wait_for`` (which
        redis-py wraps a command in when ``socket_timeout`` is set) returns the
        reply and drops a cancellation that lands as the reply arrives, and a
        renewal that kept looping would renew a released lease for as long as
        the process lives, its key waited on by every other process.
        """
        held = (key, token)
        store, ttl = self._store, self.ttl
        # A store that can extend only a lease the token still holds renews with that; with
        # ``acquire_lease`` a renewal that crossed the release would take the lease anew.
        renew = getattr(store, "renew_lease", None) or store.acquire_lease
        while True:
            await asyncio.sleep(ttl / 3)
            if held not in self._renewals:
                return
            sent = time.monotonic()
            kept = await self._call(
                "acquire_lease", self._engine.guard.timeout, lambda: renew(key, token, ttl)
            )
            if held not in self._renewals:
                return  # released meanwhile: what the renewal found is no news
            if kept and kept is not _FAILED and (working := self._held.get(held)) is not None:
                working.renewed = sent
            if kept is False:
                # Another process took it: ours ran out (this loop stalled past the
                # ttl, or the store was unreachable), or the store does not let a
                # holder renew. It computes too; nothing is lost but a duplicate
                # computation, and the first decision stored wins.
                self._engine.log.warning(
                    "lease-renewal",
                    "asyncache: a lease could not be renewed while its model ran (another "
                    "process took it, or %s does not renew a holder's lease); raise "
                    "lease_ttl if this repeats",
                    type(store).__name__,
                )
                return
            # A failed renewal (_FAILED) is tried again a third of a ttl later.

    async def aclose(self) -> None:
        """Stop renewing the leases still held (their computations were cancelled)."""
        renewals = list(self._renewals.values())
        self._renewals.clear()  # first: a renewal that lost its cancellation stops on this
        await cancel_and_wait(renewals)

    async def _reach(self, key: bytes, token: bytes) -> Any:
        """``_acquire``, tried again while the store fails, for up to ``store_wait`` seconds."""
        return await self._persist(lambda probe: self._acquire(key, token, probe=probe))

    async def _look(self, key: bytes) -> Any:
        """The entry under ``key`` (``None``: there is none), or ``_FAILED`` once
        ``store_wait`` passed without an answer. A failed read is no answer."""
        store = self._engine.store
        return await self._persist(
            lambda probe: self._call(
                "get", self._engine.guard.timeout, lambda: store.get(key), probe=probe
            )
        )

    async def store(self, key: bytes, value: bytes, expires_at: float | None) -> Entry | None:
        """Add the decision computed under our lease, waiting out a store that fails for up
        to ``store_wait``; the entry that won, or ``None`` (it could not be stored)."""
        store = self._engine.store
        entry = await self._persist(
            lambda probe: self._call(
                "add",
                self._engine.guard.timeout,
                lambda: store.add(key, value, expires_at),
                probe=probe,
            )
        )
        return None if entry is _FAILED else entry

    async def _persist(self, attempt: Callable[[bool], Awaitable[Any]]) -> Any:
        """``attempt(probe)`` until it is not ``_FAILED``, for up to ``store_wait`` seconds.

        The first try is an ordinary call; the others probe (the store may be
        cooling down: the wait is for it to come back), each with a store
        timeout of its own.
        """
        result = await attempt(False)
        wait = self._engine.store_wait
        if result is not _FAILED or not wait:
            return result
        deadline = time.monotonic() + wait
        delay = _REACH_FIRST
        while result is _FAILED:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return _FAILED
            await asyncio.sleep(min(delay, remaining))
            delay = min(delay * 2, _REACH_MAX)
            new_request()  # each try may pay one store timeout
            result = await attempt(True)
        return result

    async def _acquire(self, key: bytes, token: bytes, *, probe: bool = False) -> Any:
        store, ttl = self._store, self.ttl
        return await self._call(
            "acquire_lease",
            self._engine.guard.timeout,
            lambda: store.acquire_lease(key, token, ttl),
            probe=probe,
        )

    async def _release(self, key: bytes, token: bytes) -> None:
        """Stop the lease's renewal, then drop the lease; releasing twice is harmless.

        The renewal has ended before the release is sent, so no renewal of ours
        reaches the store after it. If the release fails the lease expires after its ttl.
        """
        renewal = self._renewals.pop((key, token), None)
        if renewal is not None:
            renewal.cancel()
            # Not awaited directly: a renewal that lost the cancellation (see ``_renew``)
            # ends at its next look at ``_renewals``, and its failure is its own.
            await asyncio.wait([renewal])
        store = self._store
        await self._call(
            "release_lease", self._engine.guard.timeout, lambda: store.release_lease(key, token)
        )

    async def _wait(self, key: bytes, wait: float, probe: bool = False) -> Any:
        store, slack = self._store, self._engine.guard.timeout
        return await self._call(
            "wait_for_entry",
            None if slack is None else wait + slack,
            lambda: store.wait_for_entry(key, wait),
            probe=probe,
        )

    async def _call(
        self,
        what: str,
        timeout: float | None,  # noqa: ASYNC109 - each lease step has its own bound
        call: Callable[[], Awaitable[Any]],
        *,
        probe: bool = False,
    ) -> Any:
        """One lease call; a failure or timeout is ``_FAILED``, counted and logged.

        ``probe`` tries the store even while it cools down (``store_wait``
        waits for it to come back); its success ends the cool-down.
        """
        guard = self._engine.guard
        if not probe and (guard.cooling(what) or timed_out_before(what)):
            return _FAILED  # the store is cooling down, or this request paid its timeout
        try:
            async with timeout_after(timeout):
                result = await call()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            guard.failed(what, exc)
            return _FAILED
        if probe:
            guard.recovered(what)
        return result


def lease_store(store: object) -> LeaseStore | None:
    """Where ``store``'s leases live: the store itself, a tier's shared L2, or ``None``."""
    if isinstance(store, LeaseStore):
        return store
    # A TieredStore's L1 is private to this process; the fleet meets in its L2.
    l2 = getattr(store, "l2", None)
    if isinstance(l2, LeaseStore):
        return l2
    return None
