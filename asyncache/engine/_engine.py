"""The engine: the one path a lookup takes, whatever door it came through.

``Engine.get_or_compute`` (one key) and ``Engine.get_or_compute_many``
(many keys) are the only ways into the store, and each takes the steps of a
lookup in one order: read, decide (fresh, stale, stale-if-error, cached
error, replay, record, shadow, audit), coalesce (flight, lease), compute,
store, answer. The doors (single calls, ``.many()``, micro-batching, streams,
the middleware) supply a ``compute`` that runs the model or the app and, for a
door that answers by reading a run as it goes (a stream's chunks, an HTTP
response), a ``Live`` door that says how each outcome is answered; none of
them orders the steps. So coalescing, leases, audits, the modes, ``admit``,
the ttl hook, renewals, the store guard and the counters behave the same
through every door.

The path of one key:

1. A hit (``hit``, the one place an entry is decoded for a caller): decode
   the stored envelope, count it, maybe renew it (off the caller's path),
   return its value. ``hit_now`` is its synchronous fast path for stores that
   can answer from memory, beside it here.
2. A miss joins the flight for its key if one is running in this event loop,
   or starts one. A flight runs as a task of its own, so a caller that is
   cancelled neither cancels the work nor the other callers. A live door's
   flight carries its ``Broadcast`` (``Flight.stream``): identical callers
   read its pieces as they come.
3. The flight computes, under a lease when leases are on, decides whether to
   keep the result (``prepare``: ttl, ``admit``, size), ``add``s it, and hands
   every caller the decision that won the ``add`` (``winner``).

The modes are decided in one place, ``Engine.mode``: ``live`` serves hits,
``shadow`` computes every call, compares it with what a hit would have served
and serves nothing from the store, ``record`` computes and replaces, ``replay``
only reads, and ``off`` (a disabled cache) computes without the store. The
many-keys path reads the same attribute.

Replay never writes, whatever it finds: a corrupt or foreign-signed entry is a
``ReplayMiss`` that says so (``refusal``), never deleted; hits are not renewed;
the guard refuses every write (``StoreGuard.read_only``) and the store's own
upkeep is paused (``DecisionCache.use_store``).
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
import math
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, Generic, Literal, Protocol, TypeVar

from .._runtime import cancelled, is_cancellation, one_turn, spawn
from ..codec import Decoded, InflatesPastCap, decode, encode
from ..errors import DecodeError, ReplayMiss, SignatureError, StoreError
from ..keys import canonical
from ..stats import CacheStats, RateLimitedLog
from ..stores.memory import MemoryStore
from ..stores.protocol import DecisionStore, Entry
from ._calls import detached
from ._flights import Flight, FlightTable, copy_for_caller, error_for_caller
from ._freshness import (
    ErrorHit,
    Freshness,
    StaleHit,
    UnlistedError,
    error_record,
    overridden,
    revive_error,
    same_error,
)
from ._guard import BUGS, StoreGuard, new_request, timed_out_before
from ._memo import RecentValues, same

__all__ = [
    "AGAIN",
    "ALONE",
    "MISS",
    "AdmitHook",
    "Engine",
    "Fingerprint",
    "FlightObserver",
    "Fresh",
    "LeaseAttempt",
    "Leasing",
    "Live",
    "Mode",
    "Sampler",
    "Source",
    "TtlHook",
    "Unshared",
    "replay_miss",
    "unwrap",
]

logger = logging.getLogger("asyncache")

T = TypeVar("T")
TtlHook = Callable[[Any, Any], float | None]
AdmitHook = Callable[[Any, Any], bool]
Fingerprint = str | Mapping[str, Any] | None
Mode = Literal["live", "shadow", "record", "replay", "off"]
# What ``hit_now`` returns when it has no answer; the caller then awaits ``get_or_compute``.
MISS: Any = object()
Source = Callable[[str], None]
"""``source(where)``: told where a caller's answer came from when it did not compute it:
``"hit"`` (the store), ``"stale"`` (the store, past its ttl, while a refresh runs),
``"shared"`` (another caller's flight) or ``"adopted"`` (another process's decision,
waited for under a lease)."""


class Unshared(Generic[T]):
    """A result for its own caller only: not stored and not handed to followers.

    A ``compute`` returns one when what it produced belongs to the request that
    asked (the middleware's response to one client that may not be stored);
    the engine returns ``value`` to that caller, counts it as not admitted, and
    the followers of its flight compute by themselves.
    """

    __slots__ = ("value",)

    def __init__(self, value: T) -> None:
        self.value = value


class Fresh(Generic[T]):
    """A result that says how long it stays fresh: stored for at most ``seconds``.

    A ``compute`` returns one when what it produced carries its own lifetime
    (the middleware's response with ``Cache-Control: max-age`` or
    ``Expires``). The entry's ttl is the smaller of the cache's and
    ``seconds``, and a hit never renews it: a renewal would serve it past the
    lifetime it gave. ``seconds <= 0`` stores nothing.
    """

    __slots__ = ("seconds", "value")

    def __init__(self, value: T, seconds: float) -> None:
        self.value = value
        self.seconds = seconds


def unwrap(result: Any) -> Any:
    """The value a compute produced, whether or not it came as ``Unshared`` or ``Fresh``."""
    kind = type(result)
    return result.value if kind is Unshared or kind is Fresh else result


def _fresh_for(result: Any) -> float | None:
    """The lifetime a computed result gave (``Fresh``), or ``None``."""
    return result.seconds if type(result) is Fresh else None


def lifetime(result: Any) -> tuple[Any, float | None]:
    """A computed result and the lifetime it gave (``Fresh``), or ``None``."""
    if type(result) is Fresh:
        return result.value, result.seconds
    return result, None


class Engine:
    """The settings, counters and moving parts of the hit/miss path.

    ``DecisionCache`` builds one and forwards its settings here; every
    attribute without an underscore may be read by the parts of the path
    (leases, audits, many keys, warming, the middleware).

    Args:
        store: where decisions live.
        guard: runs every store call (timeouts, failure counting, cool-down).
        stats: the counters.
        log: a warning log bounded in rate.
        secret: the HMAC key, normalized, or ``None``.
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
        self.stats = stats
        self.log = log
        self.guard = guard
        self.secret = secret
        self.flights: FlightTable[Any] = FlightTable()
        self.background: set[asyncio.Task[Any]] = set()
        self.max_background = 64
        self.closed = False
        # Settings; DecisionCache forwards its own to these.
        self.mode: Mode = "live"
        self.coalesce = True
        self.coalesce_timeout: float | None = 300.0
        # With leases: seconds a miss keeps trying a store that fails before computing.
        self.store_wait = 0.0
        self.ttl: float | TtlHook | None = None
        self.admit: AdmitHook | None = None
        self.renew_on_hit = False
        # Stale windows, jitter and cached errors (asyncache.engine._freshness).
        self.freshness = Freshness()
        # Error types decorated functions list beyond the cache's own (revived on a hit).
        self.more_errors: tuple[type[BaseException], ...] = ()
        self.max_entry_bytes = 1024 * 1024
        self.decode_cap: int | None = None
        # Written into every envelope ("n"), so that tools can select a cache's entries.
        self.namespace: str | None = None
        # Called with the seconds of each model call (one per batch); the Prometheus adapter
        # sets it. Kept to one attribute test so that no-one pays for it when unset.
        self.on_compute: Callable[[float], None] | None = None
        self.auditor: Sampler | None = None
        # The hit path tests this one attribute: None unless audits are sampled.
        self.sampler: Sampler | None = None
        self.leases: Leasing | None = None
        # Audit windows and the wrong-rate bound (asyncache.engine._trust); with audits only.
        self.trust: Doubting | None = None
        # Told when each flight starts and ends (the OpenTelemetry adapter's spans).
        self.observer: FlightObserver | None = None
        self._renewing: set[bytes] = set()
        self._unencodable_warned: set[str] = set()
        self.use(store)

    def use(self, store: DecisionStore) -> None:
        """Point the engine at ``store``: at construction, or before first use (CLI --store)."""
        self.store = store
        self.guard.use(store)
        self.recent = RecentValues()
        self._records = self.recent.records  # hit_now's read, one object nearer
        # The stores' synchronous fast path, when they have one (MemoryStore, TieredStore).
        self._peek: Callable[[bytes], Entry | None] | None = getattr(store, "peek", None)
        # A MemoryStore's peek is the whole answer; a tier's peek only covers its L1.
        self._peek_final = type(store) is MemoryStore

    def policy(self) -> Freshness:
        """The freshness settings of the computation at hand: its function's, or the cache's."""
        return overridden.get() or self.freshness

    @property
    def revivable(self) -> tuple[type[BaseException], ...]:
        """Every error type a cached error entry may be revived as."""
        return self.freshness.cache_errors + self.more_errors

    @property
    def enabled(self) -> bool:
        """Whether the store is used at all (``mode`` is not ``"off"``)."""
        return self.mode != "off"

    @property
    def max_decoded_bytes(self) -> int:
        """The most bytes a stored entry may inflate to: ``decode_cap``, or 64 times
        ``max_entry_bytes``. Past it an entry is corrupt (a decompression bomb)."""
        return self.decode_cap if self.decode_cap is not None else 64 * self.max_entry_bytes

    # -- the hit path --------------------------------------------------------

    def decode(self, key: bytes, value: bytes) -> Decoded:
        """Decode a stored envelope under this cache's secret and inflate cap.

        Every stored decision the engine reads is decoded here.

        Raises:
            DecodeError: the entry is corrupt, tampered with, or a decompression bomb.
        """
        return decode(value, key=key, secret=self.secret, max_size=self.max_decoded_bytes)

    def hit(
        self,
        key: bytes,
        entry: Entry,
        made: Callable[[Any], Any] | None = None,
        uses: int = 1,
        audited: bool = False,
    ) -> Any:
        """A hit on ``entry``: its decision (``made(decision)`` when ``made`` is given),
        counted ``uses`` times, its expiry maybe pushed out.

        Decisions decoded from a store that answers from memory are remembered
        by the very bytes they came from (``RecentValues``), so the next hit on
        them decodes nothing. The one place that tells fresh from stale: an
        entry past its ttl is not counted here but raised as ``StaleHit``, for
        the caller to serve and refresh, or to keep as a fallback.

        Raises:
            DecodeError: the entry is corrupt (the caller drops it).
            StaleHit: the entry is past its ttl (``asyncache.engine._freshness``).
            ErrorHit: the entry is a cached error; its ``error`` is for the caller.
            Exception: whatever ``made`` raised (the caller answers in full instead).

        ``audited``: the door audits this hit; with ``max_wrong_rate``, a hit its
        namespace has not earned trust for is raised as a ``StaleHit`` outside
        every window, which each door computes as a miss that replaces the entry
        (``asyncache.engine._trust``).
        """
        value = entry.value
        known = self.recent.get(key, value, made)
        if known is None:
            decoded = self.decode(key, value)
            if decoded.error is not None:
                raise ErrorHit(revive_error(decoded.error, self.revivable))
            result = decoded.value if made is None else made(decoded.value)
            saved, ttl = decoded.compute_seconds or 0.0, decoded.ttl
            windows, revalidate = decoded.windows, decoded.stale_while_revalidate
            if self._peek is not None:
                result = self.recent.keep(
                    key, value, result, saved, ttl, made, windows, revalidate, decoded.value
                )
        else:
            result, record = known
            saved, ttl, windows, revalidate = (
                record.saved,
                record.ttl,
                record.windows,
                record.revalidate,
            )
        if windows and entry.expires_at is not None:
            # Kept past its ttl: fresh until the windows began (asyncache.engine._freshness).
            now = time.time()
            fresh_until = entry.expires_at - windows
            if now >= fresh_until:
                raise StaleHit(result, entry, revalidate=now < fresh_until + revalidate)
        if audited and self.trust is not None and self.trust.doubts(key, entry):
            raise StaleHit(result, entry, revalidate=False)
        stats = self.stats
        stats.hits += uses
        stats.compute_seconds_saved += saved * uses
        if self.renew_on_hit:
            self.maybe_renew(key, entry, ttl, windows)
        return result

    def hit_now(self, key: bytes, made: Callable[[Any], Any] | None = None) -> Any:
        """``hit`` without a coroutine, for the decorator's wrapper and the middleware.

        Only the store's synchronous ``peek`` is read. Anything it cannot
        settle (no entry, no ``peek``, a corrupt entry, a mode other than
        ``live``, audits) is ``MISS``, and ``get_or_compute`` then handles it
        in full.
        """
        peek = self._peek
        if peek is None or self.mode != "live" or self.sampler is not None:
            return MISS
        entry = peek(key)
        if entry is None:
            return MISS
        # The hot case of ``hit``, without its call: what was handed out before from
        # these very bytes, handed out again (as it is: a scalar, or what ``made`` made;
        # or a shallow copy: a list or dict of scalars).
        known = self._records.get(key)
        if (
            known is not None
            and known.value is entry.value
            and known.made is made
            and (copy := known.copy) is not None
            # Past its ttl (it was kept for its stale windows): get_or_compute decides.
            and not (
                known.windows
                and entry.expires_at is not None
                and entry.expires_at - known.windows <= time.time()
            )
        ):
            stats = self.stats
            stats.hits += 1
            stats.compute_seconds_saved += known.saved
            if self.renew_on_hit:
                self.maybe_renew(key, entry, known.ttl, known.windows)
            return known.result if copy is same else copy(known.result)
        try:
            return self.hit(key, entry, made)
        except Exception:
            # Corrupt (get_or_compute decodes it again, counts it and deletes it), stale
            # or a cached error: get_or_compute has what it takes to answer those.
            return MISS

    async def lookup(self, key: bytes) -> Decoded | None:
        """The stored decision under ``key`` as ``Decoded``, counted as a hit, or ``None``.

        A corrupt entry is counted, dropped and ``None``; so is a cached error.
        An entry within its stale-while-revalidate window is returned (and
        counted as a stale hit) but not refreshed: there is nothing to compute with.

        Raises:
            ReplayMiss: in replay, a corrupt entry (left as it was).
        """
        new_request()
        entry = await self.store_get(key)
        if entry is None:
            return None
        try:
            value = await self.decide(key, entry, _UNKNOWN)
        except ReplayMiss:
            raise
        except Exception:
            return None  # a cached error (counted)
        if value is MISS:
            return None  # corrupt: counted and dropped
        if type(value) is StaleHit:
            if not value.revalidate:
                return None  # only a failed computation may have it now
            self.stats.hits += 1  # stale, yet served: lookup has nothing to refresh it with
            self.stats.stale_hits += 1
        # Decoded whole for the caller (its timings and windows too), as the hit read it.
        return self.decode(key, entry.value)

    async def get_or_compute(
        self,
        key: bytes,
        compute: Callable[[], Awaitable[T]],
        inputs: Any = None,
        *,
        recompute: Callable[[], Awaitable[Any]] | None = None,
        audit: bool = True,
        source: Source | None = None,
        stream: Live | None = None,
    ) -> T:
        """Return the stored decision for ``key``, or compute, store and return it: the
        one pipeline of a lookup (read, decide, coalesce, compute, store, answer).

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
            stream: a door that answers by reading a run as it goes (a stream of
                chunks, the middleware's response): it says how to answer each
                outcome (``Live``); what is returned is its answer. The steps, and
                the order they are taken in, are this method's whatever the door.
        """
        new_request()
        mode = self.mode
        if mode != "live" and mode != "replay":
            if stream is not None:
                return await stream.lead(  # type: ignore[no-any-return]
                    lambda: self._unserved(mode, key, compute, inputs), listed=False
                )
            return await self._unserved(mode, key, compute, inputs)  # type: ignore[no-any-return]
        if stream is not None:
            # A run of this key whose pieces can still be read live answers soonest.
            answer = await self._follow_live(key, compute, inputs, source, stream)
            if answer is not AGAIN:
                return answer  # type: ignore[no-any-return]
            entry = await self.read(key)
        else:
            entry = self._peek(key) if self._peek is not None else None
            if entry is None and not self._peek_final:
                # A computation of this key already running here answers sooner than a
                # store round trip would, and a stampede then costs the store one lookup.
                flight = self.flights.get(key) if self.coalesce else None
                # A refresh runs while its stale entry is served: read that rather than wait.
                if flight is not None and not flight.refresh:
                    self.stats.misses += 1
                    self.stats.coalesced += 1
                    return await self._follow(key, flight, compute, inputs, source)
                store = self.store  # store_get, inlined: one coroutine fewer on every remote hit
                entry = await self.guard.call("get", lambda: store.get(key))
        stale: StaleHit | None = None
        if entry is not None:
            told = source if stream is None else None  # a live door is told by its answer
            try:
                value = await self.decide(
                    key, entry, inputs, (recompute or compute) if audit else None, told
                )
            except ReplayMiss as refused:
                if stream is None:
                    raise
                return await stream.refuse(refused)  # type: ignore[no-any-return]
            if type(value) is StaleHit:
                if value.revalidate:
                    served = self.serve_stale(
                        key, value, compute if stream is None else stream.refresh(), inputs, told
                    )
                    if stream is None:
                        return served  # type: ignore[no-any-return]
                    answer = await stream.answer(served, "stale", value.entry)
                    if answer is not MISS:
                        return answer  # type: ignore[no-any-return]
                else:
                    stale = value  # within stale-if-error: compute, and fall back on it
            elif value is not MISS:
                if stream is None:
                    return value  # type: ignore[no-any-return]
                answer = await stream.answer(value, "hit", entry)
                if answer is not MISS:
                    return answer  # type: ignore[no-any-return]
        return await self.miss(key, compute, inputs, source=source, stale=stale, stream=stream)

    async def read(self, key: bytes) -> Entry | None:
        """The read step for one key: the store's memory when it has one, else the store."""
        entry = self._peek(key) if self._peek is not None else None
        if entry is None and not self._peek_final:
            entry = await self.store_get(key)
        return entry

    async def decide(
        self,
        key: bytes,
        entry: Entry,
        inputs: Any = None,
        recompute: Callable[[], Awaitable[Any]] | None = None,
        source: Source | None = None,
        uses: int = 1,
    ) -> Any:
        """The decide step for an entry read: the one place the outcomes of ``hit`` are
        handled, for every door and for one key or many.

        Returns the decision (a fresh hit, counted ``uses`` times, audited with
        ``recompute`` when audits sample it, ``source`` told), ``MISS`` (a
        corrupt entry, counted and dropped) or the ``StaleHit`` (not counted:
        the door serves it with ``serve_stale``, or hands it to ``miss``).

        Raises:
            ReplayMiss: in replay, a corrupt entry (left as it was), saying why.
            Exception: a cached error (``cache_errors``), raised again.
        """
        try:
            value = self.hit(key, entry, uses=uses, audited=recompute is not None)
        except DecodeError as exc:
            if self.mode == "replay":
                self.stats.corrupt += 1
                raise await self.refusal(key, inputs, exc) from None
            await self.discard_corrupt(key, exc)
            return MISS
        except StaleHit as stale:
            return stale
        except ErrorHit as cached:
            self.stats.error_hits += uses
            raise cached.error from None
        if self.sampler is not None and recompute is not None:
            self.sampler.sample(key, entry.value, recompute, inputs)
        if source is not None:
            source("hit")
        return value

    def seconds_of(self, key: bytes, entry: Entry) -> float:
        """The seconds the decision in ``entry`` took to compute (a paced replay's)."""
        known = self.recent.records.get(key)
        if known is not None and known.value is entry.value:
            return known.saved
        try:
            return self.decode(key, entry.value).compute_seconds or 0.0
        except DecodeError:
            return 0.0

    async def miss(
        self,
        key: bytes,
        compute: Callable[[], Awaitable[T]],
        inputs: Any = None,
        *,
        source: Source | None = None,
        stale: StaleHit | None = None,
        stream: Live | None = None,
    ) -> T:
        """The miss step of ``get_or_compute``: join the key's flight, or start it.

        ``stale``: the entry found within its stale-if-error window, still in the
        store: what is computed replaces it (never ``add``, which would keep it),
        and if computing fails (raises, or times out) it is the answer.
        ``stream``: the live door (see ``get_or_compute``), which leads the run.
        """
        if self.mode == "replay":
            self.stats.misses += 1
            if stale is not None and stale.usable():
                value = self.replayed(stale)
                if stream is None:
                    return value  # type: ignore[no-any-return]
                answer = await stream.answer(value, "stale", stale.entry)
                if answer is not MISS:
                    return answer  # type: ignore[no-any-return]
            refusal = await self.refusal(key, inputs)
            if stream is None:
                raise refusal
            return await stream.refuse(refusal)  # type: ignore[no-any-return]
        if stream is not None:
            # An identical run may have taken off, live, while the store answered.
            answer = await self._follow_live(key, compute, inputs, source, stream)
            if answer is not AGAIN:
                return answer  # type: ignore[no-any-return]
            self.stats.misses += 1
            alone = stream.passing or not self.coalesce
            return await stream.lead(  # type: ignore[no-any-return]
                lambda: self._launch(key, compute, inputs, source, stream, stale, alone),
                listed=not alone,
                stale=stale,
            )
        self.stats.misses += 1
        if not self.coalesce:
            return await self._alone(key, compute, inputs, source, stale)  # type: ignore[no-any-return]
        replacing = None if stale is None else stale.entry.value
        here = self.flights.here()
        flight = here.flights.get(key)
        if flight is not None:
            self.stats.coalesced += 1
            return await self._follow_then_fall_back(  # type: ignore[no-any-return]
                key, flight, compute, inputs, source, None, replacing, stale
            )
        # _take_off, inlined: the running loop's table is at hand.
        flight = self.flights.claim(key, here)
        self.flights.launch(flight, self._fly(key, flight, compute, inputs, source, replacing))
        try:
            if flight.task is not None:  # asyncio (a trio flight has no task)
                # The flight's first step runs just before this caller's next: a model
                # that answers without suspending has landed by then, a loop turn sooner
                # than a wake-up from the event would tell.
                await one_turn()
            if not flight.done.is_set():
                await flight.done.wait()
            if flight.error is None:  # outcome(), without its call
                return flight.value  # type: ignore[return-value]
            return flight.outcome()  # type: ignore[no-any-return]
        except Exception:
            return self.fall_back(stale)  # type: ignore[no-any-return]

    def _launch(
        self,
        key: bytes,
        compute: Callable[[], Awaitable[Any]],
        inputs: Any,
        source: Source | None,
        stream: Live,
        stale: StaleHit | None,
        alone: bool,
    ) -> Awaitable[Any]:
        """The computation a live door leads (``Live.lead``), as its outcome.

        Synchronous: the flight takes off (with the door's ``broadcast``) before the
        door first awaits, so an identical caller that runs next reads it live.
        """
        replacing = None if stale is None else stale.entry.value
        broadcast = stream.broadcast
        if alone:
            # A pass, a caller released from another run, or a cache that does not
            # coalesce: this caller's own run, in no flight.
            return self._alone(key, compute, inputs, source, stale)
        flight = self.flights.get(key)
        if flight is None:
            flight = self._take_off(
                key, compute, inputs, source=source, stream=broadcast, replacing=replacing
            )
            return self._landed(flight, stale, broadcast)
        # A run that cannot be read live (a refresh, one past its live part): its outcome.
        self.stats.coalesced += 1
        return self._follow_then_fall_back(
            key, flight, compute, inputs, source, broadcast, replacing, stale
        )

    async def _alone(
        self,
        key: bytes,
        compute: Callable[[], Awaitable[Any]],
        inputs: Any,
        source: Source | None,
        stale: StaleHit | None,
    ) -> Any:
        """A miss computed by its caller alone, in no flight (under a lease when leases
        are on); ``stale``'s value when it fails within stale-if-error."""
        replacing = None if stale is None else stale.entry.value
        try:
            value, _ = await self._compute_shared(key, compute, inputs, source, replacing)
        except Exception:
            return self.fall_back(stale)
        return value

    async def _follow_then_fall_back(
        self,
        key: bytes,
        flight: Flight[Any],
        compute: Callable[[], Awaitable[Any]],
        inputs: Any,
        source: Source | None,
        broadcast: Any,
        replacing: bytes | None,
        stale: StaleHit | None,
    ) -> Any:
        """A miss that joins ``flight``: its outcome; ``stale``'s value when it fails
        within stale-if-error."""
        try:
            return await self._follow(key, flight, compute, inputs, source, broadcast, replacing)
        except Exception:
            return self.fall_back(stale)

    async def _landed(self, flight: Flight[Any], stale: StaleHit | None, broadcast: Any) -> Any:
        """A live flight's decision; a failure before its first piece within
        stale-if-error is answered with the stale decision (as ``miss`` answers)."""
        await flight.done.wait()
        try:
            return flight.outcome()
        except Exception:
            if broadcast.base or broadcast.messages:
                raise  # its readers had pieces of this run already
            return self.fall_back(stale)

    async def _follow_live(
        self,
        key: bytes,
        compute: Callable[[], Awaitable[Any]],
        inputs: Any,
        source: Source | None,
        stream: Live,
    ) -> Any:
        """The live door's answer from a run of ``key`` it can read live; ``AGAIN``
        when there is none (or each one ended before its first piece)."""
        if stream.passing or not self.coalesce:
            return AGAIN  # a pass queues behind no run
        joined = False
        while True:
            flight = self.flights.get(key)
            if flight is None or flight.stream is None or not flight.stream.joinable:
                return AGAIN
            if not joined:  # a caller that reads it is a miss that coalesced
                joined = True
                self.stats.misses += 1
                self.stats.coalesced += 1
                flight.followers += 1
            answer = await stream.follow(flight)
            if answer is ALONE:
                # Released (the run's answer is its leader's alone) or it waited too long.
                if self.mode == "replay":
                    return await stream.refuse(await self.refusal(key, inputs))
                return await stream.lead(
                    lambda: self._alone(key, compute, inputs, source, None), listed=False
                )
            if answer is not AGAIN:
                return answer

    def serve_stale(
        self,
        key: bytes,
        stale: StaleHit,
        compute: Callable[[], Awaitable[Any]],
        inputs: Any,
        source: Source | None = None,
        uses: int = 1,
    ) -> Any:
        """Answer with a stale decision at once and start its key's refresh, if none runs.

        One refresh per key in this process (a flight; callers that miss meanwhile
        follow it); with leases one per fleet. ``replay`` serves without refreshing.
        """
        stats = self.stats
        stats.hits += uses
        stats.stale_hits += uses
        if self.mode == "live" and not self.closed and self.flights.get(key) is None:
            flight = self.flights.claim(key)
            flight.refresh = True
            # The refresh runs after this call returned: on the inputs as they are now.
            compute = detached(compute)
            self.flights.launch(flight, self._refresh(key, flight, stale, compute, inputs))
        if source is not None:
            source("stale")
        return stale.value

    def _take_off(
        self,
        key: bytes,
        compute: Callable[[], Awaitable[Any]],
        inputs: Any = None,
        *,
        source: Source | None = None,
        stream: Any = None,
        replacing: bytes | None = None,
    ) -> Flight[Any]:
        """Claim ``key``'s flight (no flight may be running for it) and launch its computation.

        Synchronous: a caller that runs next finds the flight (and its ``stream``, the
        ``Broadcast`` a live door reads), though the computation has not started yet.
        ``replacing``: the stale entry the store still holds under ``key`` (see ``miss``).
        """
        flight = self.flights.claim(key)
        flight.stream = stream
        self.flights.launch(flight, self._fly(key, flight, compute, inputs, source, replacing))
        return flight

    async def _unserved(
        self, mode: Mode, key: bytes, compute: Callable[[], Awaitable[Any]], inputs: Any
    ) -> Any:
        """The modes that serve nothing from the store: off, shadow and record."""
        if mode == "off":
            self.stats.bypassed += 1
            return unwrap(await compute())
        # What a hit would have served is read before computing (shadow compares it).
        entries = [await self.store_get(key)] if mode == "shadow" else []
        result, seconds = await self.timed(compute)
        if mode == "record":
            [answer] = await self.record_keys([key], [result], seconds, [inputs])
        else:
            [answer] = await self.shadow_keys([key], entries, [result], seconds, [inputs])
        return answer

    # -- the miss path -------------------------------------------------------

    async def _fly(
        self,
        key: bytes,
        flight: Flight[Any],
        compute: Callable[[], Awaitable[Any]],
        inputs: Any,
        source: Source | None,
        replacing: bytes | None = None,
    ) -> None:
        # Every way out finishes the flight: it runs without a done callback (launch()).
        observer = self.observer
        token = None if observer is None else observer.start()
        outcome = "cancelled"
        try:
            if self.leases is None:  # _compute_shared's first step, without its coroutine
                value, shared = await self._compute_alone(key, compute, inputs, replacing)
            else:
                value, shared = await self._compute_shared(key, compute, inputs, source, replacing)
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
        stream: Any = None,
        replacing: bytes | None = None,
    ) -> T:
        flight.followers += 1
        while await flight.wait(self.coalesce_timeout):
            if isinstance(flight.error, asyncio.CancelledError):
                # The leader was cancelled (or its model raised CancelledError): the
                # followers elect one new leader instead of each computing alone.
                following = self.flights.get(key)
                if following is None:
                    following = self.flights.claim(key)
                    following.stream = stream
                    self.flights.launch(
                        following, self._fly(key, following, compute, inputs, source, replacing)
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
        value, _ = await self._compute_alone(key, compute, inputs, replacing)
        return value  # type: ignore[no-any-return]

    def fall_back(self, stale: StaleHit | None) -> Any:
        """Within an ``except`` block of a failed computation: the stale-if-error answer,
        or the failure raised again when there is none (or its window ended)."""
        if stale is None or not stale.usable():
            raise  # the failure being handled
        self.stats.stale_if_error_hits += 1
        return stale.value

    async def _compute_shared(
        self,
        key: bytes,
        compute: Callable[[], Awaitable[Any]],
        inputs: Any,
        source: Source | None,
        replacing: bytes | None = None,
    ) -> tuple[Any, bool]:
        """The value for the caller, and whether the flight's followers may have it.

        ``replacing`` is the stale entry the store still holds under ``key``:
        the decision replaces it, and under a lease it is no one's decision to adopt.
        """
        if self.leases is None:
            return await self._compute_alone(key, compute, inputs, replacing)

        def adopt(entry: Entry) -> tuple[Any, bool]:
            value = self.adopt(key, entry)
            if source is not None:
                source("adopted")
            return value, True

        return await self.leases.run(
            key, lambda: self._compute_alone(key, compute, inputs, replacing), adopt, replacing
        )

    async def _compute_alone(
        self,
        key: bytes,
        compute: Callable[[], Awaitable[Any]],
        inputs: Any,
        replacing: bytes | None = None,
    ) -> tuple[Any, bool]:
        try:
            # timed(compute), without its coroutine: every miss computes here.
            started = time.perf_counter()
            result = await compute()
            seconds = time.perf_counter() - started
            if self.on_compute is not None:
                self.on_compute(seconds)
        except Exception as exc:
            # Remembered only where no stale decision is kept: that one is the better answer.
            if replacing is None and self.policy().caches(exc):
                await self.remember_error(key, exc)
            raise
        if isinstance(result, Unshared):
            self.stats.not_admitted += 1
            return result.value, False
        result, fresh_for = lifetime(result)
        stored = await self.store_result(
            key,
            result,
            inputs=inputs,
            compute_seconds=seconds,
            replacing=replacing,
            fresh_for=fresh_for,
        )
        return stored, True

    async def _refresh(
        self,
        key: bytes,
        flight: Flight[Any],
        stale: StaleHit,
        compute: Callable[[], Awaitable[Any]],
        inputs: Any,
    ) -> None:
        """The refresh of a stale entry, as its key's flight: under the lease when leases
        are on, and stored only in place of the entry it read (compare-and-set)."""
        self.stats.refreshes += 1
        expected = stale.entry.value
        leases = self.leases
        try:
            token = None
            if leases is not None:
                start = await leases.begin(key, expected)
                if start.held or start.entry is not None:
                    # Another process refreshes it, or has: its stale entry serves meanwhile.
                    flight.set_result(None, shared=False)
                    return
                token = start.token
            try:
                value, shared = await self._compute_alone(key, compute, inputs, expected)
                if not shared:
                    # The answer now may not be stored (the middleware's private or 4xx
                    # response): the stale one must not stand in for it any longer.
                    await self.end_stale(key, expected)
            finally:
                if leases is not None:
                    await leases.finish(key, token)
        except BaseException as exc:
            if is_cancellation(exc):
                flight.set_error(cancelled("the refresh was cancelled"))
                raise
            self.stats.refresh_failures += 1
            self.log.warning(
                "refresh",
                "asyncache: a refresh failed; the stale decision is served until its "
                "window ends: %r",
                exc,
            )
            flight.set_error(exc)
        else:
            flight.set_result(value, shared=shared)
        finally:
            self.flights.landed(key, flight)

    async def record_keys(
        self, keys: Sequence[bytes], results: Sequence[Any], seconds: float, inputs: Sequence[Any]
    ) -> list[Any]:
        """``mode="record"``, for one key or many: store each computed result in place of
        what its key held; the answer for each key.

        ``results`` are what the computation gave each key (a value, ``Unshared``,
        ``Fresh``, or the exception of an item that failed, answered as it is);
        ``seconds`` is each one's share of the computation. Stores keep the first
        decision (``add``), so the old entries are deleted first (``replace``); a
        writer that adds between the two wins, as it would in live mode.

        Raises:
            StoreError: a decision could not be written or encoded: the recording
                would be incomplete.
        """
        answers: list[Any] = []
        pending: list[tuple[bytes, bytes, float | None]] = []
        at: list[int] = []
        for key, result, given in zip(keys, results, inputs, strict=True):
            unshared = type(result) is Unshared
            value = self._kept_result(result)
            answers.append(value)
            if unshared or isinstance(value, BaseException):
                continue
            prepared = self.prepare(key, value, given, seconds, _fresh_for(result))
            if prepared is not None:
                pending.append((key, *prepared))
                at.append(len(answers) - 1)
        if pending:
            winners = await self.replace(pending)  # raises when the store did not take them
            for index, (key, value, _), entry in zip(at, pending, winners, strict=True):
                answers[index] = self.winner(key, value, entry, answers[index])
        return answers

    async def shadow_keys(
        self,
        keys: Sequence[bytes],
        entries: Sequence[Entry | None],
        results: Sequence[Any],
        seconds: float,
        inputs: Sequence[Any],
    ) -> list[Any]:
        """``mode="shadow"``, for one key or many: compare each computed result with the
        entry a hit would have served (``entries``, read before computing), count it,
        and fill the store where it held nothing. The answers are the computed results:
        nothing from the store reaches a caller.

        ``results`` and ``seconds`` as for ``record_keys``.
        """
        auditor = self.auditor
        assert auditor is not None  # made with mode="shadow"
        answers: list[Any] = []
        pending: list[tuple[bytes, bytes, float | None]] = []
        for key, entry, result, given in zip(keys, entries, results, inputs, strict=True):
            unshared = type(result) is Unshared
            value = self._kept_result(result)
            answers.append(value)
            if unshared or isinstance(value, BaseException):
                continue
            stored: Decoded | None = None
            if entry is not None:
                try:
                    stored = self.decode(key, entry.value)
                except DecodeError as exc:
                    await self.discard_corrupt(key, exc)
            auditor.judge_shadow(key, given, stored, value)
            if stored is None:
                prepared = self.prepare(key, value, given, seconds, _fresh_for(result))
                if prepared is not None:
                    pending.append((key, *prepared))
        if pending:
            store = self.store
            added = await self.guard.call("add_many", lambda: store.add_many(pending))
            winners: list[Entry | None] = list(added) if added else [None] * len(pending)
            for (key, value, _), entry in zip(pending, winners, strict=True):
                try:
                    self.winner(key, value, entry, None)  # counted as any store
                except Exception:
                    pass  # another process's cached error: this call answers its own result
        return answers

    def _kept_result(self, result: Any) -> Any:
        """A computed result's value (``Unshared`` counted as not admitted)."""
        if type(result) is Unshared:
            self.stats.not_admitted += 1
        return unwrap(result)

    async def replace(self, items: Sequence[tuple[bytes, bytes, float | None]]) -> list[Entry]:
        """Record mode's write: delete what each key held, then add its new decision.

        Where live mode counts a failed write and goes on, a recording is
        complete or it fails. Its calls skip the guard's timeout and cool-down:
        they wait as long as the store's own bounds allow (SQLite's
        ``busy_timeout``, Redis's socket timeouts), and one that fails raises,
        so the recording never silently keeps an old decision or lacks a new one.

        Raises:
            StoreError: a decision could not be written.
        """
        store = self.store
        delete = store.delete  # type: ignore[attr-defined]  # checked by use_store
        await self._recording(
            "delete", items, lambda: asyncio.gather(*(delete(k) for k, _, _ in items))
        )
        if len(items) == 1:
            key, value, expires_at = items[0]
            return [await self._recording("add", items, lambda: store.add(key, value, expires_at))]
        return list(await self._recording("add_many", items, lambda: store.add_many(items)))

    async def _recording(
        self,
        what: str,
        items: Sequence[tuple[bytes, bytes, float | None]],
        call: Callable[[], Awaitable[T]],
    ) -> T:
        """One store call of a recording: its result, or ``StoreError`` (counted and logged)."""
        try:
            return await call()
        except Exception as exc:
            self.guard.failed(what, exc)
            first = items[0][0].hex()
            more = f" and {len(items) - 1} more" if len(items) > 1 else ""
            raise StoreError(
                f"record: the store's {what} failed for key {first}{more} ({exc}); "
                "the recording is incomplete"
            ) from exc

    def adopt(self, key: bytes, entry: Entry) -> Any:
        """The value of an entry another process stored while we waited on its lease.

        Raises:
            DecodeError: the entry is corrupt; the caller computes instead.
        """
        try:
            decoded = self.decode(key, entry.value)
            if decoded.error is not None:
                error = revive_error(decoded.error, self.revivable)
                self.stats.error_hits += 1
                raise error
        except DecodeError as exc:
            if not isinstance(exc, UnlistedError):
                self.stats.corrupt += 1
            raise
        self.stats.compute_seconds_saved += decoded.compute_seconds
        return decoded.value

    # -- keeping a decision --------------------------------------------------

    async def timed(self, compute: Callable[[], Awaitable[T]]) -> tuple[T, float]:
        """Run one model call; return its result and its seconds (reported to ``on_compute``).

        ``_compute_alone``, every miss's, does the same inline.
        """
        started = time.perf_counter()
        result = await compute()
        seconds = time.perf_counter() - started
        if self.on_compute is not None:
            self.on_compute(seconds)
        return result, seconds

    async def store_result(
        self,
        key: bytes,
        result: T,
        *,
        inputs: Any = None,
        compute_seconds: float = 0.0,
        replacing: bytes | None = None,
        fresh_for: float | None = None,
    ) -> T:
        """Admit, encode and add ``result``; return the decision that won.

        The returned value is decoded from what the store kept, so a miss and a
        later hit give equal values of the same types. A result that is not
        kept (ttl, ``admit``, size, encoding, store failure) is returned as is.
        With ``replacing`` (the stale entry's value the caller read), the result
        replaces that entry only if it is still there (``replace_entry``).
        ``fresh_for`` caps the ttl (``Fresh``).
        """
        prepared = self.prepare(key, result, inputs, compute_seconds, fresh_for)
        if prepared is None:
            return result
        value, expires_at = prepared
        if replacing is not None and self.trust is not None:
            # A doubted hit's computation is judged first; agreeing, the entry stands.
            stands = self.trust.judge_doubted(key, replacing, result, inputs)
            if stands is not None:
                return stands.value  # type: ignore[no-any-return]
        if replacing is None:
            if self.store_wait and self.leases is not None:
                # The waiting mode: a decision made under a lease that is not stored
                # would be made again, differently, by the next process to miss.
                entry = await self.leases.store(key, value, expires_at)
            else:
                sent = self.leases is not None and self.sends("add")
                entry = await self.guard.call("add", lambda: self.store.add(key, value, expires_at))
                if entry is None and sent:
                    # Our lease may have run out (a stalled loop) and another's decision be
                    # stored: that one is every caller's, ours too (docs/leases.md).
                    entry = await self.leases.read_back(key)  # type: ignore[union-attr]
        else:
            entry = await self.guard.call(
                "replace", lambda: self.replace_entry(key, replacing, value, expires_at)
            )
        return self.winner(key, value, entry, result)  # type: ignore[no-any-return]

    def sends(self, what: str) -> bool:
        """Whether a store call ``what`` made now is sent: not skipped because the store
        cools down or this request already paid its store timeout."""
        return not (timed_out_before(what) or self.guard.cooling(what))

    async def replace_entry(
        self, key: bytes, expected: bytes, value: bytes, expires_at: float | None
    ) -> Entry:
        """Store ``value`` in place of the entry holding ``expected``; return what is stored.

        The store's ``replace`` (a compare-and-set) when it has one: if another
        writer stored something else meanwhile, that stays and is returned. A
        store without it gets a delete and an add, where a writer in between wins.
        """
        replace = getattr(self.store, "replace", None)
        if replace is not None:
            return await replace(key, expected, value, expires_at)  # type: ignore[no-any-return]
        delete = getattr(self.store, "delete", None)
        if delete is not None:
            await delete(key)
        return await self.store.add(key, value, expires_at)

    async def remember_error(self, key: bytes, error: BaseException) -> None:
        """Store ``error`` (one of ``cache_errors``) under ``key`` for ``error_ttl`` seconds,
        if it comes back as it was raised (``asyncache.engine._freshness``)."""
        now = time.time()
        policy = self.policy()
        ttl = policy.error_ttl
        try:
            value = encode(
                None,
                ttl=ttl,
                created_at=now,
                compute_seconds=0.0,
                key=key,
                secret=self.secret,
                namespace=self.namespace,
                error=error_record(error, policy.cache_errors),
            )
            stored = self.decode(key, value).error
            if stored is None or not same_error(revive_error(stored, self.revivable), error):
                return
        except Exception:  # the user's exception class, reduced and rebuilt: anything goes
            return
        await self.guard.call("add", lambda: self.store.add(key, value, now + ttl))

    def prepare(
        self,
        key: bytes,
        result: Any,
        inputs: Any,
        compute_seconds: float,
        fresh_for: float | None = None,
    ) -> tuple[bytes, float | None] | None:
        """Encode ``result`` for the store, or ``None`` when it must not be kept.

        ``fresh_for`` (the result's own lifetime, ``Fresh``) caps the ttl, and
        the envelope then carries no ttl, so that no hit renews the entry.

        Raises:
            StoreError: in record mode, a result that cannot be stored (it does
                not encode, or is over ``max_entry_bytes``): a recording
                without it would be incomplete. ``ttl`` and ``admit`` refusals
                are the user's choice, and are not errors.
        """
        try:
            ttl = self.ttl
            if callable(ttl):
                ttl = ttl(inputs, result)
            if ttl == math.inf:
                ttl = None  # the same "no expiry" on every store
            if fresh_for is not None and (ttl is None or not fresh_for >= ttl):
                ttl = fresh_for  # NaN too: refused below
            freshness = self.policy()
            if ttl is not None and ttl > 0:
                ttl = freshness.spread(ttl)
            if (ttl is not None and not ttl > 0) or (  # NaN too
                self.admit is not None and self.admit(inputs, result) is False
            ):
                self.stats.not_admitted += 1
                return None
        except Exception:
            # A hook that raises keeps the prediction and skips the write.
            self.stats.errors += 1
            logger.exception("asyncache: the ttl or admit hook raised; the result is not stored")
            return None
        now = time.time()
        # Kept until the end of its last window; the envelope says where the ttl ended.
        windows = None if ttl is None else freshness.windows
        try:
            value = encode(
                result,
                ttl=ttl if fresh_for is None else None,
                created_at=now,
                compute_seconds=compute_seconds,
                key=key,
                secret=self.secret,
                namespace=self.namespace,
                windows=windows,
                max_size=self.max_decoded_bytes,
            )
        except InflatesPastCap as exc:
            # Stored, it would be refused on every read as a decompression bomb.
            self._too_large(key, str(exc))
            return None
        except (TypeError, ValueError) as exc:
            self.stats.unencodable += 1
            kind = type(result).__qualname__
            if self.mode == "record":
                raise StoreError(
                    f"record: a result of type {kind} cannot be stored ({exc}) for key "
                    f"{key.hex()}; the recording is incomplete"
                ) from exc
            if kind not in self._unencodable_warned:
                self._unencodable_warned.add(kind)
                logger.warning(
                    "asyncache: results of type %s are returned but not stored: %s", kind, exc
                )
            return None
        if len(value) > self.max_entry_bytes:
            self._too_large(
                key, f"encodes to {len(value)} bytes, over max_entry_bytes={self.max_entry_bytes}"
            )
            return None
        if ttl is None:
            return value, None
        return value, now + ttl + (0.0 if windows is None else windows[0] + windows[1])

    def _too_large(self, key: bytes, why: str) -> None:
        """Count a decision too large to keep.

        Raises:
            StoreError: in record mode, where a recording without it is incomplete.
        """
        self.stats.too_large += 1
        if self.mode == "record":
            raise StoreError(
                f"record: the decision for key {key.hex()} {why}; the recording is incomplete"
            )

    def winner(self, key: bytes, value: bytes, entry: Entry | None, result: Any) -> Any:
        """What every caller of a flight receives once its ``add`` returned ``entry``."""
        if entry is not None and entry.value != value:
            self.stats.conflicts += 1
            chosen = entry.value  # another process's decision was stored first
        else:
            if entry is not None:
                self.stats.stores += 1
            # else the store failed: hand back our own decision
            if _decodes_as_itself(result):
                # Equal to decoding the value just encoded, and cheaper; a list of its own,
                # as decoding gives (the model may reuse the one it returned).
                return list(result) if type(result) is list else result
            chosen = value
        try:
            decoded = self.decode(key, chosen)
            if decoded.error is not None:
                error = revive_error(decoded.error, self.revivable)
        except DecodeError as exc:
            if not isinstance(exc, UnlistedError):
                self.stats.corrupt += 1
            return result
        if decoded.error is not None:
            raise error  # another process's computation failed first, and remembered it
        return decoded.value

    # -- many keys: one get_many, one compute, one add_many ----------------------

    async def get_or_compute_many(
        self,
        keys: Sequence[bytes],
        compute: BatchCompute,
        inputs: Sequence[Any] | None = None,
    ) -> list[Any]:
        """``DecisionCache.get_or_compute_many``: see there."""
        new_request()
        count = len(keys)
        item_inputs: Sequence[Any] = inputs if inputs is not None else [None] * count
        stats = self.stats
        mode = self.mode
        if mode == "off":
            stats.bypassed += count
            return _raise_item_errors(list(await compute(list(range(count)))))
        first: dict[bytes, int] = {}
        uses: dict[bytes, int] = {}
        for index, key in enumerate(keys):
            first.setdefault(key, index)
            uses[key] = uses.get(key, 0) + 1
        unique = list(first)
        indices = [first[key] for key in unique]
        unique_inputs = [item_inputs[index] for index in indices]
        if mode == "record":
            results, share = await self._run_batch(compute, indices)
            answers = await self.record_keys(unique, results, share, unique_inputs)
            return _answers(keys, dict(zip(unique, answers, strict=True)), set(), _never)
        entries = await self.guard.call("get_many", lambda: self.store.get_many(unique))
        entries = entries or [None] * len(unique)
        found_entries = dict(zip(unique, entries, strict=True))
        if mode == "shadow":
            results, share = await self._run_batch(compute, indices)
            answers = await self.shadow_keys(unique, entries, results, share, unique_inputs)
            return _answers(keys, dict(zip(unique, answers, strict=True)), set(), _never)
        found: dict[bytes, Any] = {}
        stale: dict[bytes, StaleHit] = {}
        for key in unique:
            entry = found_entries[key]
            if entry is None:
                continue
            index = first[key]
            audit = None if self.sampler is None else _single(compute, index)
            try:
                value = await self.decide(key, entry, item_inputs[index], audit, uses=uses[key])
            except ReplayMiss:
                raise
            except Exception as cached:  # a cached error: this item's answer
                found[key] = cached
                continue
            if type(value) is StaleHit:
                if value.revalidate:
                    single = _single(compute, index)
                    found[key] = self.serve_stale(
                        key, value, single, item_inputs[index], uses=uses[key]
                    )
                else:
                    stale[key] = value
            elif value is not MISS:
                found[key] = value
        if mode == "replay":
            for key, hit in list(stale.items()):
                del stale[key]  # nothing is computed in replay: the stale one or a refusal
                if hit.usable():
                    found[key] = self.replayed(hit, uses[key])
        missing = [key for key in unique if key not in found]
        if mode == "replay" and missing:
            stats.misses += sum(uses[key] for key in missing)
            raise await self.refusal(missing[0], item_inputs[first[missing[0]]])
        stats.misses += sum(uses[key] for key in missing)
        # Claim every unclaimed key before awaiting anything: never wait on our own keys.
        flights = self.flights
        own: list[bytes] = []
        own_flights: list[Flight[Any]] = []
        theirs: list[tuple[bytes, Flight[Any]]] = []
        for key in missing:
            flight = flights.get(key) if self.coalesce else None
            if flight is not None:
                stats.coalesced += 1
                theirs.append((key, flight))
                continue
            flight = flights.claim(key) if self.coalesce else Flight()
            own.append(key)
            own_flights.append(flight)
        replacing = {key: hit.entry.value for key, hit in stale.items()}
        if own:
            work = self._fly_many(
                own, own_flights, [first[k] for k in own], compute, item_inputs, replacing
            )
            if self.coalesce:
                flights.start(own, own_flights, work)
            else:
                await work
        outcomes: dict[bytes, Flight[Any]] = {}
        for key, flight in zip(own, own_flights, strict=True):
            await flight.wait(None)
            outcomes[key] = flight
        retry: list[bytes] = []
        for key, flight in theirs:
            done = await flight.wait(self.coalesce_timeout)
            if not done:
                stats.coalesce_timeouts += 1
            if done and flight.shared and not isinstance(flight.error, asyncio.CancelledError):
                outcomes[key] = flight
            else:
                retry.append(key)
        if retry:
            # Their owners were too slow or refused to share: compute these ourselves.
            alone = [Flight[Any]() for _ in retry]
            await self._fly_many(
                retry, alone, [first[k] for k in retry], compute, item_inputs, replacing
            )
            outcomes.update(zip(retry, alone, strict=True))
        for key, hit in stale.items():
            # stale_if_error: a failed item is answered with its stale decision.
            if outcomes[key].error is not None and hit.usable():
                stats.stale_if_error_hits += uses[key]
                found[key] = hit.value
        # Values other callers also hold (flights this batch followed) are copied.
        shared = {key for key, _ in theirs}
        return _answers(keys, found, shared, lambda key: _outcome(outcomes[key]))

    async def _fly_many(
        self,
        keys: list[bytes],
        flights: list[Flight[Any]],
        indices: list[int],
        compute: BatchCompute,
        inputs: Sequence[Any],
        replacing: dict[bytes, bytes],
    ) -> None:
        """Compute the items of ``keys`` and finish their flights: under leases when leases are on.

        With leases, the keys whose lease this process took (or could not ask
        for: a store failure) are computed in one call; decisions that appeared
        meanwhile are adopted; keys another process holds are waited for after
        that, each under the one-key lease rules (take over a lease that died).
        """
        leases = self.leases
        if leases is None:
            await self._compute_many(keys, flights, indices, compute, inputs, replacing)
            return
        starts = await asyncio.gather(*(leases.begin(key, replacing.get(key)) for key in keys))
        now: list[int] = []
        held: list[int] = []
        for position, (key, flight, start) in enumerate(zip(keys, flights, starts, strict=True)):
            if start.entry is not None:
                try:
                    flight.set_result(self.adopt(key, start.entry))
                    self.flights.release(key, flight)
                    continue
                except DecodeError:
                    pass
            (held if start.held else now).append(position)
        try:
            if now:
                await self._compute_many(
                    [keys[p] for p in now],
                    [flights[p] for p in now],
                    [indices[p] for p in now],
                    compute,
                    inputs,
                    replacing,
                )
        finally:
            await asyncio.gather(*(leases.finish(keys[p], starts[p].token) for p in now))
        if held:
            await asyncio.gather(
                *(
                    self._wait_held(keys[p], flights[p], indices[p], compute, inputs, replacing)
                    for p in held
                )
            )

    async def _wait_held(
        self,
        key: bytes,
        flight: Flight[Any],
        index: int,
        compute: BatchCompute,
        inputs: Sequence[Any],
        replacing: dict[bytes, bytes],
    ) -> None:
        """Finish ``flight`` with another process's decision on ``key``, or compute it alone."""
        assert self.leases is not None
        single = _single(compute, index)
        stale = replacing.get(key)

        async def work() -> Any:
            result, seconds = await self.timed(single)
            return await self.store_result(
                key, result, inputs=inputs[index], compute_seconds=seconds, replacing=stale
            )

        try:
            value = await self.leases.run(key, work, lambda entry: self.adopt(key, entry), stale)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            flight.set_error(exc)
        else:
            flight.set_result(value)
        finally:
            self.flights.release(key, flight)

    async def _compute_many(
        self,
        keys: list[bytes],
        flights: list[Flight[Any]],
        indices: list[int],
        compute: BatchCompute,
        inputs: Sequence[Any],
        replacing: dict[bytes, bytes],
    ) -> None:
        """Compute the items at ``indices`` in one call, store them in one ``add_many``
        and finish each item's flight with the decision that won.

        Items whose stale entry the store still holds (``replacing``) replace it
        one by one instead; failed items of ``cache_errors`` types are remembered.
        """
        table = self.flights
        try:
            results, share = await self._run_batch(compute, indices)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            # Remembered before the callers hear of it: their next call must find it. Only
            # an item computed alone: which of several items raised is unknown.
            if len(keys) == 1:
                await self._remember_errors([(keys[0], exc)], replacing)
            for key, flight in zip(keys, flights, strict=True):
                table.release(key, flight)
                flight.set_error(exc)
            return
        pending: list[tuple[bytes, bytes, float | None]] = []
        waiting: list[tuple[Flight[Any], Any]] = []
        await self._remember_errors(
            [(k, r) for k, r in zip(keys, results, strict=True) if isinstance(r, BaseException)],
            replacing,
        )
        for key, flight, index, result in zip(keys, flights, indices, results, strict=True):
            table.release(key, flight)
            if isinstance(result, BaseException):
                flight.set_error(result)
                continue
            stale = replacing.get(key)
            if stale is not None:
                flight.set_result(
                    await self.store_result(
                        key, result, inputs=inputs[index], compute_seconds=share, replacing=stale
                    )
                )
                continue
            prepared = self.prepare(key, result, inputs[index], share)
            if prepared is None:
                flight.set_result(result)
                continue
            pending.append((key, *prepared))
            waiting.append((flight, result))
        if not pending:
            return
        sent = self.leases is not None and self.sends("add_many")
        added = await self.guard.call("add_many", lambda: self.store.add_many(pending))
        winners: list[Entry | None] = list(added) if added else [None] * len(pending)
        if added is None and sent:  # as store_result reads back
            leases = self.leases
            assert leases is not None
            winners = list(await asyncio.gather(*(leases.read_back(k) for k, _, _ in pending)))
        for (key, value, _), (flight, result), entry in zip(pending, waiting, winners, strict=True):
            try:
                flight.set_result(self.winner(key, value, entry, result))
            except Exception as exc:  # another process's cached error won the add
                flight.set_error(exc)

    async def _remember_errors(
        self, failed: list[tuple[bytes, BaseException]], replacing: dict[bytes, bytes]
    ) -> None:
        """Store the failures of ``cache_errors`` types, except where a stale entry is kept."""
        for key, error in failed:
            if key not in replacing and self.policy().caches(error):
                await self.remember_error(key, error)

    async def _run_batch(
        self, compute: BatchCompute, indices: list[int]
    ) -> tuple[list[Any], float]:
        """One model call on the items at ``indices``: their results, and each one's share of
        the seconds it took.

        Raises:
            ValueError: the model returned another number of results.
        """
        results, seconds = await self.timed(lambda: compute(indices))
        listed = list(results)
        if len(listed) != len(indices):
            raise ValueError(f"the model returned {len(listed)} results for {len(indices)} items")
        return listed, seconds / max(len(indices), 1)

    # -- store upkeep --------------------------------------------------------

    async def store_get(self, key: bytes) -> Entry | None:
        """The store's ``get``, guarded: a failure is ``None``."""
        return await self.guard.call("get", lambda: self.store.get(key))

    async def discard_corrupt(self, key: bytes, exc: DecodeError) -> None:
        """Count a corrupt entry and delete it.

        Raises:
            ReplayMiss: in replay, which deletes nothing: the entry is left as recorded.
        """
        if isinstance(exc, UnlistedError) and self.mode != "replay":
            return  # another cache's cached error: a miss for this one, kept for that one
        self.stats.corrupt += 1
        if self.mode == "replay":
            raise await self.refusal(key, _UNKNOWN, exc) from None
        self.log.warning("corrupt", "asyncache: dropping an entry that does not decode: %s", exc)
        # Awaited, not backgrounded: the add that follows must not find it.
        await self.delete_entry(key)

    async def end_stale(self, key: bytes, expected: bytes) -> None:
        """Delete the stale entry holding ``expected``, unless another writer replaced it."""
        entry = await self.store_get(key)
        if entry is not None and entry.value == expected:
            await self.delete_entry(key)

    async def delete_entry(self, key: bytes) -> None:
        """The store's ``delete`` (optional: see ``DecisionStore``), guarded; never in replay."""
        delete = getattr(self.store, "delete", None)
        if delete is not None and self.mode != "replay":
            await self.guard.call("delete", lambda: delete(key))

    def maybe_renew(
        self, key: bytes, entry: Entry, ttl: float | None, windows: float = 0.0
    ) -> None:
        """Push a fresh hit's expiry out by its ttl, at most once every ttl/16, in the
        background; an entry kept for stale windows keeps them after its new ttl.

        Never in replay: a recording's expiries stay as they were recorded.
        """
        if ttl is None or ttl <= 0 or entry.expires_at is None or self.mode == "replay":
            return
        now = time.time()
        if ttl - (entry.expires_at - windows - now) < ttl / 16:
            return  # renewed (or stored) less than ttl/16 ago
        if key in self._renewing or len(self.background) >= self.max_background:
            return
        self._renewing.add(key)
        self.spawn(self._renew(key, now + ttl + windows))

    async def _renew(self, key: bytes, expires_at: float) -> None:
        try:
            renewed = await self.guard.call("renew", lambda: self.store.renew(key, expires_at))
            if renewed:
                self.stats.renewals += 1
        except BUGS:
            pass  # logged by the guard; no caller waits on a renewal to raise it to
        finally:
            self._renewing.discard(key)

    def replayed(self, stale: StaleHit, uses: int = 1) -> Any:
        """In replay, a recorded decision past its ttl, within its stale-if-error window:
        served as recorded (nothing is computed in replay, as if computing had failed).
        Every door asks ``stale.usable()`` first, and refuses (``refusal``) when it is not.
        """
        self.stats.stale_if_error_hits += uses
        return stale.value

    async def refusal(self, key: bytes, inputs: Any, exc: DecodeError | None = None) -> ReplayMiss:
        """The ``ReplayMiss`` for a replayed call with no usable decision, saying why.

        ``exc`` is why the entry found did not decode; without one, the store
        is asked (when it can say: ``expired_at``) whether it holds the key expired.
        """
        if isinstance(exc, SignatureError):
            return replay_miss(key, inputs, "signature does not match", str(exc))
        if exc is not None:
            return replay_miss(key, inputs, "corrupt", str(exc))
        failure = self.guard.reads.last_error
        if failure is not None:  # the read failed: "not recorded" would send the user astray
            return replay_miss(key, inputs, "store unreadable", repr(failure))
        expired_at = getattr(self.store, "expired_at", None)
        if expired_at is not None:
            when = await self.guard.call("get", lambda: expired_at(key))
            if when is not None:
                stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))
                return replay_miss(key, inputs, "expired", f"at {stamp}")
        return replay_miss(key, inputs)

    def tell(self, name: str, hook: Callable[..., Any], *args: Any) -> None:
        """Call a user's hook (``on_mismatch``, ``on_breach``), sync or async: a coroutine
        runs as an owned background task; what it raises is logged, never raised."""
        try:
            outcome = hook(*args)
        except Exception as exc:
            self.log.warning(name, f"asyncache: {name} raised: %r", exc)
            return
        if inspect.isawaitable(outcome):
            self.spawn(self._await_hook(name, outcome))

    async def _await_hook(self, name: str, outcome: Awaitable[Any]) -> None:
        try:
            await outcome
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.log.warning(name, f"asyncache: {name} raised: %r", exc)

    def spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any] | None:
        """Run ``work`` as an owned background task, awaited by ``aclose`` (asyncio)."""
        return spawn(work, self.background)

    async def aclose(self) -> None:
        """Finish background work and cancel running computations; the store stays open."""
        self.closed = True
        if self.background:
            # Only this loop's: another loop's tasks (a thread's own asyncio.run) end with it.
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # trio: background work runs as system tasks
                loop = None
            mine = [task for task in self.background if task.get_loop() is loop]
            if mine:
                await asyncio.gather(*mine, return_exceptions=True)
        await self.flights.aclose()
        if self.leases is not None:
            await self.leases.aclose()


# The inputs of a call the caller cannot name (a corrupt entry found by key alone).
_UNKNOWN: Any = object()
AGAIN: Any = object()
"""``Live.follow``: the run ended before its first piece; look for another."""
ALONE: Any = object()
"""``Live.follow``: this caller may not share that run's answer; it runs on its own."""


def replay_miss(
    key: bytes, inputs: Any, reason: str = "not recorded", detail: str | None = None
) -> ReplayMiss:
    """The error of ``mode="replay"`` for a key it holds no usable decision for."""
    try:
        if inputs is _UNKNOWN:
            raise TypeError
        digest = hashlib.blake2b(canonical(inputs), digest_size=6).hexdigest()
    except TypeError:
        digest = key[:6].hex()
    return ReplayMiss(None, digest, key, reason, detail)


# -- what the engine needs of its optional parts -------------------------------
# The engine holds a ``Leasing`` (``_leases.Leases``) when leases are on and a
# ``Sampler`` (``_audit.Auditor``) when audits or shadow mode are, and a ``Doubting``
# (``_trust.Trust``) with audits; it knows them
# only by these protocols, so it never imports their modules and they can import it.


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
    """What the path needs of an auditor (``_audit.Auditor``)."""

    def sample(
        self, key: bytes, value: bytes, compute: Callable[[], Awaitable[Any]], inputs: Any
    ) -> None:
        """Maybe audit a hit in the background; never waits."""

    def judge_shadow(self, key: bytes, inputs: Any, stored: Decoded | None, fresh: Any) -> None:
        """Count one shadow call: a miss, or a hit that would have agreed or not."""
        ...


class Doubting(Protocol):
    """What the path needs of the trust windows (``_trust.Trust``)."""

    def doubts(self, key: bytes, entry: Entry) -> bool:
        """Whether a fresh hit on ``entry`` must be computed instead of served."""
        ...

    def judge_doubted(
        self, key: bytes, replacing: bytes, fresh: Any, inputs: Any
    ) -> Decoded | None:
        """Judge a doubted key's computation; the stored decision when they agree."""
        ...


class LeaseAttempt(Protocol):
    """One try at a lease (``_leases.LeaseStart``)."""

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


class Live(Protocol):
    """A door that answers by reading a run as it goes: a stream of chunks (the
    decorator's async generators), an HTTP response (the middleware's exchange).

    ``Engine.get_or_compute(..., stream=door)`` takes the steps; the door says
    how each outcome is answered. Its ``compute`` (the model's run) writes the
    pieces to ``broadcast``, which the door makes in ``lead``.
    """

    @property
    def passing(self) -> bool:
        """A pass: this caller reads no other run live, and its own run is not listed."""
        ...

    @property
    def broadcast(self) -> Any:
        """The ``Broadcast`` this caller's run writes to (set by ``lead`` before it starts it)."""
        ...

    def refresh(self) -> Callable[[], Awaitable[Any]]:
        """What a refresh of a stale decision computes (after this call returned)."""
        ...

    async def answer(self, value: Any, how: str, entry: Entry) -> Any:
        """Answer with a decision the store held (``how``: ``"hit"``, ``"stale"``); ``MISS``
        when it cannot be (dropped as corrupt): the lookup goes on as a miss."""
        ...

    async def follow(self, flight: Flight[Any]) -> Any:
        """Answer by reading ``flight.stream`` live; ``AGAIN`` when that run ended before
        its first piece (look again), ``ALONE`` when this caller must run on its own."""
        ...

    async def lead(
        self,
        start: Callable[[], Awaitable[Any]],
        *,
        listed: bool,
        stale: StaleHit | None = None,
    ) -> Any:
        """Make ``broadcast`` (found by identical callers when ``listed``), call ``start``
        before first awaiting (it takes off), and answer from the run: its pieces, and
        the decision ``start``'s outcome gives (``stale``'s value when the run failed
        within stale-if-error)."""
        ...

    async def refuse(self, error: ReplayMiss) -> Any:
        """Answer a lookup replay cannot serve."""
        ...


class Leasing(Protocol):
    """What the path needs of the leases (``_leases.Leases``)."""

    async def run(
        self,
        key: bytes,
        work: Callable[[], Awaitable[T]],
        adopt: Callable[[Entry], T],
        stale: bytes | None = None,
    ) -> T:
        """Run ``work`` under the lease on ``key``, or adopt another process's entry
        (never the ``stale`` one ``work`` replaces)."""
        ...

    async def begin(self, key: bytes, stale: bytes | None = None) -> LeaseAttempt:
        """Try once to take the lease on ``key`` (an entry holding ``stale`` is no decision)."""
        ...

    async def finish(self, key: bytes, token: bytes | None) -> None:
        """Release a lease ``begin`` took."""
        ...

    async def store(self, key: bytes, value: bytes, expires_at: float | None) -> Entry | None:
        """Add a decision made under a lease, waiting out a failing store (``store_wait``)."""
        ...

    async def read_back(self, key: bytes) -> Entry | None:
        """The entry under ``key`` after our ``add`` failed (the first one stored wins)."""
        ...

    async def aclose(self) -> None:
        """Stop renewing the leases still held."""
        ...


# -- the many-keys path's helpers ----------------------------------------------

BatchCompute = Callable[[list[int]], Awaitable[Sequence[Any]]]


def _single(compute: BatchCompute, index: int) -> _Single:
    """A one-key compute for the item at ``index`` (audits, refreshes, lease takeovers)."""
    return _Single(compute, index)


class _Single:
    """The item at ``index`` of a batch's computation, computed alone."""

    __slots__ = ("compute", "index")

    def __init__(self, compute: BatchCompute, index: int) -> None:
        self.compute = compute
        self.index = index

    async def __call__(self) -> Any:
        results = list(await self.compute([self.index]))
        if len(results) != 1:
            raise ValueError(f"the model returned {len(results)} results for 1 item")
        if isinstance(results[0], BaseException):
            raise results[0]
        return results[0]

    def detached(self) -> _Single:
        """The same item, on a snapshot of the batch's inputs (a refresh's)."""
        return _Single(detached(self.compute), self.index)


_SELF_DECODING = frozenset((str, bool, type(None)))
_FLAT_LIST_MAX = 64  # past this many items a check costs about what decoding does


def _decodes_as_itself(result: Any) -> bool:
    """Whether decoding ``result``'s envelope gives back an equal value of the same
    types (a miss's answer may then be ``result``, undecoded): a string, a bool,
    ``None``, a finite float, a 64-bit int, or a short list of strings."""
    cls = type(result)
    if cls in _SELF_DECODING:
        return True
    if cls is list:
        return len(result) <= _FLAT_LIST_MAX and all(type(item) is str for item in result)
    if cls is int:
        return -(2**63) <= result < 2**64  # type: ignore[no-any-return]
    if cls is float:
        return math.isfinite(result)
    return False


def _never(key: bytes) -> Any:
    raise AssertionError("every key was answered")


def _outcome(flight: Flight[Any]) -> Any:
    return flight.error if flight.error is not None else flight.value


def _answers(
    keys: Sequence[bytes],
    found: dict[bytes, Any],
    shared: set[bytes],
    outcome: Callable[[bytes], Any],
) -> list[Any]:
    """One answer per key, in order; the first failed item is raised.

    Values other callers also hold (``shared``) or that an earlier item of this
    batch received are copied: a caller may mutate what it gets.
    """
    results: list[Any] = []
    handed = set(shared)
    for key in keys:
        value = found[key] if key in found else outcome(key)
        if key in handed and not isinstance(value, BaseException):
            value = copy_for_caller(value)
        results.append(value)
        handed.add(key)
    return _raise_item_errors(results)


def _raise_item_errors(results: list[Any]) -> list[Any]:
    """``results``, unless an item failed: then the first failure is raised."""
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results
