"""DecisionCache: key -> store -> flight -> compute -> admit -> add.

The engine behind ``@cached_prediction`` and the middleware. A hit decodes the
stored envelope and returns; a miss joins or starts the flight for its key; a
flight computes once, decides whether to keep the result (ttl, ``admit``,
size), adds it, and hands every caller the decision that won the ``add``.

The cache never makes a prediction fail: every store call goes through a
``StoreGuard`` (``asyncache.guard``), which turns a store that raises or times
out into a miss or a skipped write. The batch path lives in ``asyncache.many``.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import (
    AsyncIterable,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Mapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar

import orjson

from .codec import PLAIN_HEADER, Decoded, decode, decode_envelope, encode, normalize_secret
from .errors import DecodeError
from .flight import Flight, FlightTable
from .guard import StoreGuard
from .keys import KeyBuilder
from .many import get_or_compute_many as _get_or_compute_many
from .stats import CacheStats, RateLimitedLog
from .stores.memory import MemoryStore
from .stores.protocol import DecisionStore, Entry

if TYPE_CHECKING:
    from .audit import Auditor, Compare, MismatchHook
    from .lease import Leases
    from .warm import WarmSummary

__all__ = ["AdmitHook", "DecisionCache", "TtlHook"]

logger = logging.getLogger("asyncache")

T = TypeVar("T")
# What ``hit_now`` returns when it has no answer; the caller then awaits ``get_or_compute``.
MISS: Any = object()
_loads = orjson.loads
TtlHook = Callable[[Any, Any], float | None]
AdmitHook = Callable[[Any, Any], bool]
Fingerprint = str | Mapping[str, Any] | None


class DecisionCache:
    """Caches model decisions in a store and runs each miss once.

    Args:
        store: where decisions live; a fresh ``MemoryStore`` when omitted.
        namespace: prefix for the namespaces of everything using this cache.
        fingerprint: what identifies the model (id, revision, thresholds...):
            a string or a JSON-able mapping. Part of every key.
        ttl: seconds a decision lives, ``None`` for no expiry, or
            ``ttl(inputs, result)``. A ttl ``<= 0`` stores nothing.
        renew_on_hit: push a hit's expiry out by its ttl, at most once every
            ttl/16, off the caller's path.
        coalesce: identical concurrent misses wait for one computation.
        coalesce_timeout: a waiter that waited longer computes by itself.
        admit: ``admit(inputs, result) is False`` stores nothing (a degraded
            or fallback answer).
        max_entry_bytes: encoded decisions larger than this are not stored.
        store_timeout: seconds a store call may take before it is a miss; a
            store with ``enforces_timeouts`` (see ``DecisionStore``) is
            bounded by its own timeouts instead.
        secret: HMAC key; entries without a valid tag are misses.
        enabled: ``False`` computes every call and touches no store.
        failure_threshold: store failures in a row before the cool-down.
        failure_cooldown: seconds the store is skipped after that.
        max_background: most renewals and deletions in progress at once.
        leases: take a lease in the shared store before computing a miss, so
            that a fleet computes each key once (needs a ``LeaseStore``:
            SQLiteStore, RedisStore, or a tier over one).
        lease_ttl: seconds a lease lives; above the slowest computation. A
            waiter takes over a lease that expired without a decision.
        audit_rate: share of hits (0 to 1) recomputed in the background and
            compared with what was served.
        audit: ``audit(stored, fresh)`` is True when two decisions agree;
            equal canonical encodings by default.
        on_mismatch: ``on_mismatch(inputs, stored, fresh)`` on each audit or
            shadow disagreement; may be a coroutine function.
        audit_concurrency: most audits running at once; more are dropped.
        mode: ``"live"`` serves hits; ``"shadow"`` computes every call,
            returns the fresh result, fills the store and counts whether the
            stored decision would have been served and agreed.
    """

    def __init__(
        self,
        store: DecisionStore | None = None,
        *,
        namespace: str | None = None,
        fingerprint: Fingerprint = None,
        ttl: float | TtlHook | None = None,
        renew_on_hit: bool = False,
        coalesce: bool = True,
        coalesce_timeout: float | None = 300.0,
        admit: AdmitHook | None = None,
        max_entry_bytes: int = 1024 * 1024,
        store_timeout: float | None = 1.0,
        secret: bytes | str | None = None,
        enabled: bool = True,
        failure_threshold: int = 5,
        failure_cooldown: float = 10.0,
        max_background: int = 64,
        leases: bool = False,
        lease_ttl: float = 10.0,
        audit_rate: float = 0.0,
        audit: Compare | None = None,
        on_mismatch: MismatchHook | None = None,
        audit_concurrency: int = 4,
        mode: Literal["live", "shadow"] = "live",
    ) -> None:
        if isinstance(ttl, int | float) and not isinstance(ttl, bool):
            ttl = float(ttl)
        elif ttl is not None and not callable(ttl):
            raise TypeError(f"ttl must be seconds, None or a function, not {type(ttl).__name__}")
        if max_entry_bytes <= 0:
            raise ValueError("max_entry_bytes must be positive")
        self.store: DecisionStore = MemoryStore() if store is None else store
        self.namespace = namespace
        self.fingerprint = fingerprint
        self.ttl = ttl
        self.renew_on_hit = renew_on_hit
        self.coalesce = coalesce
        self.coalesce_timeout = coalesce_timeout
        self.admit = admit
        self.max_entry_bytes = max_entry_bytes
        self.enabled = enabled
        self.max_background = max_background
        self._secret = normalize_secret(secret)
        self._stats = CacheStats()
        self._log = RateLimitedLog(logger)
        self._guard = StoreGuard(
            self.store,
            timeout=store_timeout,
            failure_threshold=failure_threshold,
            failure_cooldown=failure_cooldown,
            stats=self._stats,
            log=self._log,
        )
        self._flights: FlightTable[Any] = FlightTable()
        self._builders: dict[tuple[str, str], KeyBuilder] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._renewing: set[bytes] = set()
        self._unencodable_warned: set[str] = set()
        self._closed = False
        if mode not in ("live", "shadow"):
            raise ValueError(f"mode must be 'live' or 'shadow', not {mode!r}")
        self.mode = mode
        self._shadow = mode == "shadow"
        if not 0.0 <= audit_rate <= 1.0:
            raise ValueError(f"audit_rate must be between 0 and 1, got {audit_rate!r}")
        self._auditor: Auditor | None = None
        if audit_rate > 0 or self._shadow:
            # Imported here: a cache that neither audits nor shadows never loads it.
            from .audit import Auditor

            self._auditor = Auditor(
                self,
                rate=audit_rate,
                compare=audit,
                on_mismatch=on_mismatch,
                concurrency=audit_concurrency,
            )
        # The hit path tests this one attribute: None unless audits are sampled.
        self._sampler = self._auditor if audit_rate > 0 else None
        self.leases = leases
        self.lease_ttl = lease_ttl
        self._use_store(self.store)
        # Called with the seconds of each model call (one per batch); the Prometheus adapter
        # sets it. Kept to one attribute test so that no-one pays for it when unset.
        self.on_compute: Callable[[float], None] | None = None

    def __repr__(self) -> str:
        return f"DecisionCache(store={self.store!r}, namespace={self.namespace!r})"

    # The guard's settings, kept as the cache's own: they may be changed on a live cache.

    @property
    def store_timeout(self) -> float | None:
        """Seconds a store call may take before it is a miss."""
        return self._guard.timeout

    @store_timeout.setter
    def store_timeout(self, seconds: float | None) -> None:
        self._guard.timeout = seconds

    @property
    def failure_threshold(self) -> int:
        """Store failures in a row before the cool-down."""
        return self._guard.failure_threshold

    @failure_threshold.setter
    def failure_threshold(self, failures: int) -> None:
        self._guard.failure_threshold = failures

    @property
    def failure_cooldown(self) -> float:
        """Seconds the store is skipped after ``failure_threshold`` failures."""
        return self._guard.failure_cooldown

    @failure_cooldown.setter
    def failure_cooldown(self, seconds: float) -> None:
        self._guard.failure_cooldown = seconds

    def _use_store(self, store: DecisionStore) -> None:
        """Point the cache at ``store``: at construction, or before first use (CLI --store)."""
        self.store = store
        self._guard.use(store)
        # The stores' synchronous fast path, when they have one (MemoryStore, TieredStore).
        self._peek: Callable[[bytes], Entry | None] | None = getattr(store, "peek", None)
        # A MemoryStore's peek is the whole answer; a tier's peek only covers its L1.
        self._peek_final = type(store) is MemoryStore
        self._leases: Leases | None = None
        if self.leases:
            from .lease import Leases, lease_store

            where = lease_store(store)
            if where is None:
                logger.warning(
                    "asyncache: leases=True but %s has no leases; misses are coalesced "
                    "in this process only",
                    type(store).__name__,
                )
            else:
                self._leases = Leases(self, where, ttl=self.lease_ttl)

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        prefix: str = "ASYNCACHE_",
        **overrides: Any,
    ) -> DecisionCache:
        """A cache configured by ``ASYNCACHE_*`` environment variables.

        ``ASYNCACHE_STORE_URL``, ``ASYNCACHE_TTL``, ``ASYNCACHE_ENABLED`` and the
        others in the configuration table; keyword arguments win over the
        environment (``from_env(admit=my_hook)``).

        Raises:
            ConfigurationError: a variable cannot be parsed or the URL is unknown.
        """
        from .config import settings_from_env
        from .store import open_store

        options = settings_from_env(environ, prefix=prefix)
        options.update(overrides)
        store = options.pop("store")
        if isinstance(store, str):
            store = open_store(store)
        return cls(store, **options)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- keys --------------------------------------------------------------

    def key_builder(self, namespace: str, fingerprint: Fingerprint | None = None) -> KeyBuilder:
        """The key builder for ``namespace`` (joined under this cache's namespace)."""
        full = f"{self.namespace}/{namespace}" if self.namespace else namespace
        chosen = self.fingerprint if fingerprint is None else fingerprint
        marker = (full, repr(chosen))
        builder = self._builders.get(marker)
        if builder is None:
            builder = self._builders[marker] = KeyBuilder(full, chosen)
        return builder

    def key(self, inputs: Any, *, namespace: str = "", scope: Any = None) -> bytes:
        """The 16-byte key of ``inputs`` in ``namespace`` under ``scope``.

        Raises:
            TypeError: an input cannot be encoded.
        """
        return self.key_builder(namespace).key(inputs, scope)

    # -- the single-key path ----------------------------------------------

    def hit_now(self, key: bytes) -> Any:
        """The decoded decision under ``key`` if the store holds it in memory, else ``MISS``.

        The hit path without a coroutine, for the decorator's wrapper: only the
        store's synchronous ``peek`` is read. Anything it cannot settle (no
        entry, no ``peek``, a corrupt entry, a disabled cache, shadow mode,
        audits) is ``MISS``, and ``get_or_compute`` then handles it in full.
        """
        peek = self._peek
        if peek is None or not self.enabled or self._shadow or self._sampler is not None:
            return MISS
        entry = peek(key)
        if entry is None:
            return MISS
        value = entry.value
        try:
            if value[0] == PLAIN_HEADER and len(value) <= 2048 and self._secret is None:
                envelope = _loads(value[1:])  # decode_envelope's fast path, without the call
            else:
                envelope = decode_envelope(value, key=key, secret=self._secret)
            result = envelope["v"]
            saved = envelope["d"] or 0.0
        except Exception:
            return MISS  # corrupt: get_or_compute decodes it again, counts it and deletes it
        stats = self._stats
        stats.hits += 1
        stats.compute_seconds_saved += saved
        if self.renew_on_hit:
            self._maybe_renew(key, entry, envelope["t"])
        return result

    async def get_or_compute(
        self, key: bytes, compute: Callable[[], Awaitable[T]], inputs: Any = None
    ) -> T:
        """Return the stored decision for ``key``, or compute, store and return it.

        Args:
            key: from ``key()`` or a ``KeyBuilder``.
            compute: runs the model; called at most once per flight.
            inputs: handed to the ``ttl`` and ``admit`` hooks.
        """
        if not self.enabled:
            self._stats.bypassed += 1
            return await compute()
        if self._shadow:
            return await self._shadow_call(key, compute, inputs)
        # The hit path, inlined: no coroutine beyond this one when the store can peek.
        entry = self._peek(key) if self._peek is not None else None
        if entry is None and not self._peek_final:
            # A computation of this key already running here answers sooner than a store
            # round trip would, and a stampede then costs the store one lookup, not one each.
            flight = self._flights.get(key) if self.coalesce else None
            if flight is not None:
                self._stats.misses += 1
                self._stats.coalesced += 1
                return await self._follow(key, flight, compute, inputs)
            entry = await self._store_get(key)
        if entry is not None:
            try:
                envelope = decode_envelope(entry.value, key=key, secret=self._secret)
            except DecodeError as exc:
                await self._discard_corrupt(key, exc)
            else:
                stats = self._stats
                stats.hits += 1
                stats.compute_seconds_saved += envelope.get("d") or 0.0
                if self.renew_on_hit:
                    self._maybe_renew(key, entry, envelope.get("t"))
                if self._sampler is not None:
                    self._sampler.sample(key, entry.value, compute, inputs)
                return envelope["v"]  # type: ignore[no-any-return]
        self._stats.misses += 1
        if not self.coalesce:
            return await self._compute(key, compute, inputs)
        flight = self._flights.get(key)
        if flight is None:
            flight = self._flights.claim(key)
            self._flights.launch(flight, self._fly(key, flight, compute, inputs))
            await flight.done.wait()
            return flight.outcome()  # type: ignore[no-any-return]
        self._stats.coalesced += 1
        return await self._follow(key, flight, compute, inputs)

    async def lookup(self, key: bytes) -> Decoded | None:
        """Return the live decoded decision under ``key`` and count the hit, or ``None``.

        A corrupt or tampered entry is counted, deleted and reported as ``None``.
        """
        entry = self._peek(key) if self._peek is not None else None
        if entry is None:
            entry = await self._store_get(key)
            if entry is None:
                return None
        return await self._decode_hit(key, entry)

    async def _decode_hit(self, key: bytes, entry: Entry, uses: int = 1) -> Decoded | None:
        """Decode a stored entry and count ``uses`` hits on it; a corrupt one is dropped."""
        try:
            decoded = decode(entry.value, key=key, secret=self._secret)
        except DecodeError as exc:
            await self._discard_corrupt(key, exc)
            return None
        self._stats.hits += uses
        self._stats.compute_seconds_saved += decoded.compute_seconds * uses
        if self.renew_on_hit:
            self._maybe_renew(key, entry, decoded.ttl)
        return decoded

    async def store_result(
        self, key: bytes, result: T, *, inputs: Any = None, compute_seconds: float = 0.0
    ) -> T:
        """Admit, encode and add ``result``; return the decision that won.

        The returned value is decoded from what the store kept, so a miss and a
        later hit give equal values of the same types. A result that is not
        kept (ttl, ``admit``, size, encoding, store failure) is returned as is.
        """
        prepared = self._prepare(key, result, inputs, compute_seconds)
        if prepared is None:
            return result
        value, expires_at = prepared
        entry = await self._guard.call("add", lambda: self.store.add(key, value, expires_at))
        return self._winner(key, value, entry, result)  # type: ignore[no-any-return]

    async def _fly(
        self, key: bytes, flight: Flight[Any], compute: Callable[[], Awaitable[Any]], inputs: Any
    ) -> None:
        # Every way out finishes the flight: it runs without a done callback (launch()).
        try:
            value = await self._compute(key, compute, inputs)
        except asyncio.CancelledError:
            flight.set_error(asyncio.CancelledError("the computation was cancelled"))
            raise
        except BaseException as exc:
            flight.set_error(exc)
        else:
            flight.set_result(value)
        finally:
            # Later callers find the entry in the store; only current followers need the flight.
            self._flights.landed(key, flight)

    async def _follow(
        self, key: bytes, flight: Flight[Any], compute: Callable[[], Awaitable[T]], inputs: Any
    ) -> T:
        if await flight.wait(self.coalesce_timeout):
            if flight.shared and not isinstance(flight.error, asyncio.CancelledError):
                # Each follower gets its own copy: callers may mutate what they receive.
                if flight.error is not None:
                    raise flight.error
                return copy.deepcopy(flight.value)  # type: ignore[return-value]
        else:
            self._stats.coalesce_timeouts += 1
        return await self._compute_alone(key, compute, inputs)

    async def _compute(self, key: bytes, compute: Callable[[], Awaitable[T]], inputs: Any) -> T:
        """Compute and store a miss: under a lease when leases are on."""
        if self._leases is None:
            return await self._compute_alone(key, compute, inputs)
        return await self._leases.run(
            key, lambda: self._compute_alone(key, compute, inputs), lambda e: self._adopt(key, e)
        )

    def _adopt(self, key: bytes, entry: Entry) -> Any:
        """The value of an entry another process stored while we waited on its lease.

        Raises:
            DecodeError: the entry is corrupt; the caller computes instead.
        """
        try:
            decoded = decode(entry.value, key=key, secret=self._secret)
        except DecodeError:
            self._stats.corrupt += 1
            raise
        self._stats.compute_seconds_saved += decoded.compute_seconds
        return decoded.value

    async def _compute_alone(
        self, key: bytes, compute: Callable[[], Awaitable[T]], inputs: Any
    ) -> T:
        started = time.perf_counter()
        result = await compute()
        seconds = time.perf_counter() - started
        if self.on_compute is not None:
            self.on_compute(seconds)
        return await self.store_result(key, result, inputs=inputs, compute_seconds=seconds)

    async def _shadow_call(self, key: bytes, compute: Callable[[], Awaitable[T]], inputs: Any) -> T:
        """Shadow mode: compute, compare with what a hit would have served, fill the store."""
        entry = await self._store_get(key)
        started = time.perf_counter()
        fresh = await compute()
        seconds = time.perf_counter() - started
        if self.on_compute is not None:
            self.on_compute(seconds)
        stored: Decoded | None = None
        if entry is not None:
            try:
                stored = decode(entry.value, key=key, secret=self._secret)
            except DecodeError as exc:
                await self._discard_corrupt(key, exc)
        if stored is None:
            self._stats.misses += 1
            await self.store_result(key, fresh, inputs=inputs, compute_seconds=seconds)
        else:
            self._stats.shadow_would_hit += 1
            assert self._auditor is not None  # made with mode="shadow"
            self._auditor.judge(key, inputs, stored.value, fresh, shadow=True)
        return fresh

    # -- the batch path ----------------------------------------------------

    async def get_or_compute_many(
        self,
        keys: Sequence[bytes],
        compute: Callable[[list[int]], Awaitable[Sequence[Any]]],
        inputs: Sequence[Any] | None = None,
    ) -> list[Any]:
        """Answer a whole batch: one ``get_many``, one compute of the misses, one ``add_many``.

        Args:
            keys: one key per item.
            compute: ``compute(indices)`` runs the model on the items at those
                indices and returns their results in order. A result that is an
                exception instance fails only that item.
            inputs: one per item, for the ``ttl`` and ``admit`` hooks.

        Raises:
            BaseException: the first failed item's exception, after every other
                item was stored.
        """
        return await _get_or_compute_many(self, keys, compute, inputs)

    # -- admission and storing --------------------------------------------

    def _ttl_for(self, inputs: Any, result: Any) -> float | None:
        ttl = self.ttl
        if callable(ttl):
            ttl = ttl(inputs, result)
        return ttl

    def _prepare(
        self, key: bytes, result: Any, inputs: Any, compute_seconds: float
    ) -> tuple[bytes, float | None] | None:
        """Encode ``result`` for the store, or ``None`` when it must not be kept."""
        try:
            ttl = self._ttl_for(inputs, result)
            if (ttl is not None and not ttl > 0) or (  # NaN too
                self.admit is not None and self.admit(inputs, result) is False
            ):
                self._stats.not_admitted += 1
                return None
        except Exception:
            # A hook that raises keeps the prediction and skips the write.
            self._stats.errors += 1
            logger.exception("asyncache: the ttl or admit hook raised; the result is not stored")
            return None
        now = time.time()
        try:
            value = encode(
                result,
                ttl=ttl,
                created_at=now,
                compute_seconds=compute_seconds,
                key=key,
                secret=self._secret,
            )
        except (TypeError, ValueError) as exc:
            self._stats.unencodable += 1
            kind = type(result).__qualname__
            if kind not in self._unencodable_warned:
                self._unencodable_warned.add(kind)
                logger.warning(
                    "asyncache: results of type %s are returned but not stored: %s", kind, exc
                )
            return None
        if len(value) > self.max_entry_bytes:
            self._stats.too_large += 1
            return None
        return value, (None if ttl is None else now + ttl)

    def _winner(self, key: bytes, value: bytes, entry: Entry | None, result: Any) -> Any:
        """What every caller of a flight receives once its ``add`` returned ``entry``."""
        if entry is None:
            chosen = value  # the store failed: hand back our own decision
        elif entry.value == value:
            self._stats.stores += 1
            chosen = value
        else:
            self._stats.conflicts += 1
            chosen = entry.value
        try:
            return decode(chosen, key=key, secret=self._secret).value
        except DecodeError:
            self._stats.corrupt += 1
            return result

    # -- talking to the store ---------------------------------------------

    async def _store_get(self, key: bytes) -> Entry | None:
        return await self._guard.call("get", lambda: self.store.get(key))

    async def _discard_corrupt(self, key: bytes, exc: DecodeError) -> None:
        self._stats.corrupt += 1
        self._log.warning("corrupt", "asyncache: dropping an entry that does not decode: %s", exc)
        delete = getattr(self.store, "delete", None)
        if delete is not None:
            # Awaited, not backgrounded: the add that follows must not find it.
            await self._guard.call("delete", lambda: delete(key))

    def _maybe_renew(self, key: bytes, entry: Entry, ttl: float | None) -> None:
        if ttl is None or ttl <= 0 or entry.expires_at is None:
            return
        now = time.time()
        if ttl - (entry.expires_at - now) < ttl / 16:
            return  # renewed (or stored) less than ttl/16 ago
        if key in self._renewing or len(self._background) >= self.max_background:
            return
        self._renewing.add(key)
        self._spawn(self._renew(key, now + ttl))

    async def _renew(self, key: bytes, expires_at: float) -> None:
        try:
            renewed = await self._guard.call("renew", lambda: self.store.renew(key, expires_at))
            if renewed:
                self._stats.renewals += 1
        finally:
            self._renewing.discard(key)

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``work`` as an owned background task, awaited by ``aclose``."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # -- pre-warming ---------------------------------------------------------

    async def warm(
        self,
        function: Any,
        inputs: Iterable[Any] | AsyncIterable[Any],
        *,
        concurrency: int = 8,
        progress: Callable[[WarmSummary], Any] | None = None,
    ) -> WarmSummary:
        """Compute ``function`` ahead of traffic for every input not yet stored.

        Args:
            function: a ``@cached_prediction`` function of this cache.
            inputs: one item per call: a mapping is keyword arguments, a tuple
                or list is positional arguments, anything else is the single
                argument. Read lazily, so it may be a generator or async iterable.
            concurrency: most calls running at once.
            progress: ``progress(summary)`` after each input (counts so far).

        Returns:
            How many inputs were computed, already cached and failed; a failed
            input is counted and the warm goes on.

        Raises:
            TypeError: ``function`` is not a ``@cached_prediction`` function.
            ValueError: it belongs to another cache, or ``concurrency < 1``.
        """
        from .warm import warm

        return await warm(self, function, inputs, concurrency=concurrency, progress=progress)

    # -- lifecycle and stats ----------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Every counter, the in-flight gauge and the store's own stats when it has them."""
        counters = self._stats.as_dict()
        counters["in_flight"] = len(self._flights)
        store_stats = getattr(self.store, "stats", None)
        if callable(store_stats):
            counters["store"] = store_stats()
        return counters

    def reset_stats(self) -> None:
        """Set every counter back to zero."""
        self._stats.reset()

    async def aclose(self) -> None:
        """Finish background work, cancel running computations and close the store."""
        if self._closed:
            return
        self._closed = True
        if self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
        await self._flights.aclose()
        await self.store.aclose()
