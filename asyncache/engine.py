"""The engine: the one path a lookup takes, whatever door it came through.

``Engine.get_or_compute`` (one key) and ``asyncache.many.get_or_compute_many``
(many keys) are the only ways into the store. The decorator (single calls,
``.many()``, micro-batching) and the middleware call them with a ``compute``
that runs the model or the app, so coalescing, leases, audits, shadow mode,
``admit``, the ttl hook, renewals, the store guard and the counters behave the
same through every door.

The path of one key:

1. A hit: decode the stored envelope, count it, maybe renew it (off the
   caller's path), maybe sample it for an audit, return its value.
2. A miss joins the flight for its key if one is running in this event loop,
   or starts one. A flight runs as a task of its own, so a caller that is
   cancelled neither cancels the work nor the other callers.
3. The flight computes, under a lease when leases are on, decides whether to
   keep the result (ttl, ``admit``, size), ``add``s it, and hands every caller
   the decision that won the ``add``.

Shadow mode computes every call, compares it with what a hit would have
served, and serves nothing from the store. The parts the path uses (leases,
audits, many keys, warming) receive this object and use its public members.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson

from .codec import PLAIN_HEADER, Decoded, decode, decode_envelope
from .errors import DecodeError
from .flight import Flight, FlightTable, copy_for_caller, error_for_caller
from .guard import StoreGuard
from .parts import FlightObserver, Leasing, Sampler
from .recent import RecentValues, same
from .runtime import cancelled, is_cancellation
from .stats import CacheStats, RateLimitedLog
from .stores.memory import MemoryStore
from .stores.protocol import DecisionStore, Entry
from .storing import AdmitHook, Fingerprint, StoreSide, TtlHook, replay_miss
from .unshared import Unshared, unwrap

__all__ = [
    "MISS",
    "AdmitHook",
    "Engine",
    "Fingerprint",
    "Source",
    "TtlHook",
    "Unshared",
]

T = TypeVar("T")
# What ``hit_now`` returns when it has no answer; the caller then awaits ``get_or_compute``.
MISS: Any = object()
_loads = orjson.loads
Source = Callable[[str], None]
"""``source(where)``: told where a caller's answer came from when it did not compute it:
``"hit"`` (the store), ``"shared"`` (another caller's flight) or ``"adopted"`` (another
process's decision, waited for under a lease)."""


class Engine(StoreSide):
    """The settings, counters and moving parts the hit/miss path uses.

    ``DecisionCache`` builds one and forwards its settings here; every
    attribute without an underscore may be read by the parts of the path
    (leases, audits, many keys, warming, the middleware).

    Its arguments are ``StoreSide``'s.
    """

    def __init__(
        self,
        store: DecisionStore,
        *,
        guard: StoreGuard,
        stats: CacheStats,
        log: RateLimitedLog,
        secret: bytes | None,
    ) -> None:
        super().__init__(store, guard=guard, stats=stats, log=log, secret=secret)
        self.flights: FlightTable[Any] = FlightTable()
        # Settings; DecisionCache forwards its own to these.
        self.enabled = True
        self.coalesce = True
        self.coalesce_timeout: float | None = 300.0
        # Set for mode="shadow" and mode="record": every call computes, nothing is served
        # from the store; ``record`` tells the two apart (only inside that branch).
        self.shadow = False
        self.record = False
        # mode="replay": a miss is a ReplayMiss; the model never runs.
        self.replay = False
        self.auditor: Sampler | None = None
        # The hit path tests this one attribute: None unless audits are sampled.
        self.sampler: Sampler | None = None
        self.leases: Leasing | None = None
        # Told when each flight starts and ends (the OpenTelemetry adapter's spans).
        self.observer: FlightObserver | None = None
        self.use(store)

    def use(self, store: DecisionStore) -> None:
        """Point the engine at ``store``: at construction, or before first use (CLI --store)."""
        self.store = store
        self.guard.use(store)
        self.recent = RecentValues()
        # The stores' synchronous fast path, when they have one (MemoryStore, TieredStore).
        self._peek: Callable[[bytes], Entry | None] | None = getattr(store, "peek", None)
        # A MemoryStore's peek is the whole answer; a tier's peek only covers its L1.
        self._peek_final = type(store) is MemoryStore

    # -- the hit path --------------------------------------------------------

    def hit_now(self, key: bytes, made: Callable[[Any], Any] | None = None) -> Any:
        """The decoded decision under ``key`` if the store holds it in memory, else ``MISS``.

        The hit path without a coroutine, for the decorator's wrapper and the
        middleware: only the store's synchronous ``peek`` is read. Anything it
        cannot settle (no entry, no ``peek``, a corrupt entry, a disabled
        cache, shadow mode, audits) is ``MISS``, and ``get_or_compute`` then
        handles it in full.

        ``made``: the caller gets ``made(decision)`` instead, kept for the next
        hits (recent.py); when it raises, the answer is ``MISS``.
        """
        peek = self._peek
        if peek is None or not self.enabled or self.shadow or self.sampler is not None:
            return MISS
        entry = peek(key)
        if entry is None:
            return MISS
        value = entry.value
        # RecentValues.get's hot case, without the call: what ``made`` made before
        # from these very bytes (or a scalar), handed out as it is (recent.py).
        record = self.recent.records.get(key)
        if record is not None and record[0] is value and record[5] is made and record[2] is same:
            result, saved, ttl = record[1], record[3], record[4]
        elif (known := self.recent.get(key, value, made)) is not None:
            result, saved, ttl = known
        else:
            try:
                small = value[0] == PLAIN_HEADER and len(value) <= 2048 and self.secret is None
                if small:
                    envelope = _loads(value[1:])  # decode_envelope's fast path, without the call
                else:
                    envelope = decode_envelope(
                        value, key=key, secret=self.secret, max_size=self.max_decoded_bytes
                    )
                result = envelope["v"]
                saved = envelope["d"] or 0.0
                ttl = envelope["t"]
                if made is not None:
                    result = made(result)
            except Exception:
                return MISS  # corrupt: get_or_compute decodes it again, counts it and deletes it
            if small or made is not None:
                result = self.recent.keep(key, value, result, saved, ttl, made)
        stats = self.stats
        stats.hits += 1
        stats.compute_seconds_saved += saved
        if self.renew_on_hit:
            self.maybe_renew(key, entry, ttl)
        return result

    async def get_or_compute(
        self,
        key: bytes,
        compute: Callable[[], Awaitable[T]],
        inputs: Any = None,
        *,
        recompute: Callable[[], Awaitable[Any]] | None = None,
        audit: bool = True,
        source: Source | None = None,
    ) -> T:
        """Return the stored decision for ``key``, or compute, store and return it.

        Args:
            key: from a ``KeyBuilder``.
            compute: runs the model; called at most once per flight. It may
                return ``Unshared(value)`` to keep ``value`` from the store and
                from other callers.
            inputs: handed to the ``ttl`` and ``admit`` hooks.
            recompute: what an audit of a hit runs; ``compute`` by default.
            audit: ``False`` keeps this call's hits out of audit sampling (the
                middleware audits only routes that say they may be re-run).
            source: told where the answer came from when ``compute`` did not run.
        """
        if not self.enabled:
            self.stats.bypassed += 1
            return unwrap(await compute())  # type: ignore[no-any-return]
        if self.shadow:
            if self.record:
                return await self.record_result(key, compute, inputs)  # type: ignore[no-any-return]
            assert self.auditor is not None  # made with mode="shadow"
            return await self.auditor.shadow(key, compute, inputs)  # type: ignore[no-any-return]
        # The hit path, inlined: no coroutine beyond this one when the store can peek.
        entry = self._peek(key) if self._peek is not None else None
        if entry is None and not self._peek_final:
            # A computation of this key already running here answers sooner than a store
            # round trip would, and a stampede then costs the store one lookup, not one each.
            flight = self.flights.get(key) if self.coalesce else None
            if flight is not None:
                self.stats.misses += 1
                self.stats.coalesced += 1
                return await self._follow(key, flight, compute, inputs, source)
            store = self.store  # store_get, inlined: one coroutine fewer on every remote hit
            entry = await self.guard.call("get", lambda: store.get(key))
        if entry is not None:
            try:
                envelope = decode_envelope(
                    entry.value, key=key, secret=self.secret, max_size=self.max_decoded_bytes
                )
            except DecodeError as exc:
                await self.discard_corrupt(key, exc)
            else:
                stats = self.stats
                stats.hits += 1
                stats.compute_seconds_saved += envelope.get("d") or 0.0
                if self.renew_on_hit:
                    self.maybe_renew(key, entry, envelope.get("t"))
                if self.sampler is not None and audit:
                    self.sampler.sample(key, entry.value, recompute or compute, inputs)
                if source is not None:
                    source("hit")
                return envelope["v"]  # type: ignore[no-any-return]
        self.stats.misses += 1
        if self.replay:
            raise replay_miss(key, inputs)
        if not self.coalesce:
            return await self.compute(key, compute, inputs, source)
        flight = self.flights.get(key)
        if flight is None:
            flight = self.flights.claim(key)
            self.flights.launch(flight, self._fly(key, flight, compute, inputs, source))
            if flight.task is not None:  # asyncio (a trio flight has no task)
                # The flight's first step runs just before this caller's next: a model that
                # answers without suspending has landed by then, a loop turn sooner than a
                # wake-up from the event would tell.
                await asyncio.sleep(0)
            if not flight.done.is_set():
                await flight.done.wait()
            return flight.outcome()  # type: ignore[no-any-return]
        self.stats.coalesced += 1
        return await self._follow(key, flight, compute, inputs, source)

    async def decode_hit(self, key: bytes, entry: Entry, uses: int = 1) -> Decoded | None:
        """Decode a stored entry and count ``uses`` hits on it; a corrupt one is dropped."""
        try:
            decoded = decode(
                entry.value, key=key, secret=self.secret, max_size=self.max_decoded_bytes
            )
        except DecodeError as exc:
            await self.discard_corrupt(key, exc)
            return None
        self.stats.hits += uses
        self.stats.compute_seconds_saved += decoded.compute_seconds * uses
        if self.renew_on_hit:
            self.maybe_renew(key, entry, decoded.ttl)
        return decoded

    # -- the miss path -------------------------------------------------------

    async def _fly(
        self,
        key: bytes,
        flight: Flight[Any],
        compute: Callable[[], Awaitable[Any]],
        inputs: Any,
        source: Source | None,
    ) -> None:
        # Every way out finishes the flight: it runs without a done callback (launch()).
        observer = self.observer
        token = None if observer is None else observer.start()
        outcome = "cancelled"
        try:
            if self.leases is None:  # _compute_shared's first step, without its coroutine
                value, shared = await self._compute_alone(key, compute, inputs)
            else:
                value, shared = await self._compute_shared(key, compute, inputs, source)
        except BaseException as exc:
            if is_cancellation(exc):
                flight.set_error(cancelled("the computation was cancelled"))
                raise
            outcome = "error"
            flight.set_error(exc)
        else:
            outcome = "computed" if shared else "unshared"
            flight.set_result(value, shared=shared)
        finally:
            # Later callers find the entry in the store; only current followers need the flight.
            self.flights.landed(key, flight)
            if observer is not None:
                error = None if outcome == "computed" else flight.error
                observer.end(token, outcome, flight.followers, error)

    async def _follow(
        self,
        key: bytes,
        flight: Flight[Any],
        compute: Callable[[], Awaitable[T]],
        inputs: Any,
        source: Source | None,
    ) -> T:
        flight.followers += 1
        while await flight.wait(self.coalesce_timeout):
            if isinstance(flight.error, asyncio.CancelledError):
                # The leader was cancelled (or its model raised CancelledError): the
                # followers elect one new leader instead of each computing alone.
                following = self.flights.get(key)
                if following is None:
                    following = self.flights.claim(key)
                    self.flights.launch(
                        following, self._fly(key, following, compute, inputs, source)
                    )
                    await following.done.wait()
                    return following.outcome()  # type: ignore[no-any-return]
                flight = following
                continue
            if not flight.shared:
                break  # the leader's result was for its own caller only
            if flight.error is not None:
                raise error_for_caller(flight.error, flight.traceback)
            if source is not None:
                source("shared")
            # Each follower gets its own copy: callers may mutate what they receive.
            return copy_for_caller(flight.value)  # type: ignore[return-value]
        else:
            self.stats.coalesce_timeouts += 1
        value, _ = await self._compute_alone(key, compute, inputs)
        return value  # type: ignore[no-any-return]

    async def compute(
        self,
        key: bytes,
        compute: Callable[[], Awaitable[T]],
        inputs: Any = None,
        source: Source | None = None,
    ) -> T:
        """Compute and store a miss without a flight: under a lease when leases are on."""
        value, _ = await self._compute_shared(key, compute, inputs, source)
        return value  # type: ignore[no-any-return]

    async def _compute_shared(
        self,
        key: bytes,
        compute: Callable[[], Awaitable[Any]],
        inputs: Any,
        source: Source | None,
    ) -> tuple[Any, bool]:
        """The value for the caller, and whether the flight's followers may have it."""
        if self.leases is None:
            return await self._compute_alone(key, compute, inputs)

        def adopt(entry: Entry) -> tuple[Any, bool]:
            value = self.adopt(key, entry)
            if source is not None:
                source("adopted")
            return value, True

        return await self.leases.run(key, lambda: self._compute_alone(key, compute, inputs), adopt)

    async def record_result(
        self, key: bytes, compute: Callable[[], Awaitable[Any]], inputs: Any
    ) -> Any:
        """``mode="record"``: compute, and store the result in place of what ``key`` held.

        Stores keep the first decision (``add``), so the old entry is deleted
        first; a writer that adds between the two wins, as it would in live mode.
        """
        result, seconds = await self.timed(compute)
        if isinstance(result, Unshared):
            self.stats.not_admitted += 1
            return result.value
        prepared = self.prepare(key, result, inputs, seconds)
        if prepared is None:
            return result
        value, expires_at = prepared
        await self.delete_entry(key)
        entry = await self.guard.call("add", lambda: self.store.add(key, value, expires_at))
        return self.winner(key, value, entry, result)

    def adopt(self, key: bytes, entry: Entry) -> Any:
        """The value of an entry another process stored while we waited on its lease.

        Raises:
            DecodeError: the entry is corrupt; the caller computes instead.
        """
        try:
            decoded = decode(
                entry.value, key=key, secret=self.secret, max_size=self.max_decoded_bytes
            )
        except DecodeError:
            self.stats.corrupt += 1
            raise
        self.stats.compute_seconds_saved += decoded.compute_seconds
        return decoded.value

    async def _compute_alone(
        self, key: bytes, compute: Callable[[], Awaitable[Any]], inputs: Any
    ) -> tuple[Any, bool]:
        result, seconds = await self.timed(compute)
        if isinstance(result, Unshared):
            self.stats.not_admitted += 1
            return result.value, False
        return await self.store_result(key, result, inputs=inputs, compute_seconds=seconds), True

    async def aclose(self) -> None:
        """Finish background work and cancel running computations; the store stays open."""
        self.closed = True
        if self.background:
            await asyncio.gather(*list(self.background), return_exceptions=True)
        await self.flights.aclose()
