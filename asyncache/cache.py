"""DecisionCache: the settings, the lifecycle and the public face of the engine.

A ``DecisionCache`` validates its options, builds the ``Engine`` that every door
goes through (``asyncache.engine._engine``), the optional parts that engine uses
(``Leases``, ``Auditor``), and forwards its settings to it so they can be
changed on a live cache. The one-key path is ``Engine.get_or_compute``; the
many-keys path is ``asyncache.engine._many``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Literal, Self, TypeVar, overload

from .codec import Decoded, normalize_secret
from .engine import (
    MISS,
    AdmitHook,
    Engine,
    Fingerprint,
    Freshness,
    StoreCheck,
    StoreGuard,
    TtlHook,
    check_store,
    forget,
)
from .errors import ConfigurationError
from .keys import KeyBuilder
from .stats import CacheStats, RateLimitedLog
from .stores.memory import MemoryStore
from .stores.protocol import DecisionStore

if TYPE_CHECKING:
    from .engine import BreachHook, Compare, MismatchHook, Trust, TrustReport, WarmSummary

__all__ = ["MISS", "MODES", "AdmitHook", "DecisionCache", "Mode", "TtlHook"]

logger = logging.getLogger("asyncache")

T = TypeVar("T")
V = TypeVar("V")
Mode = Literal["live", "shadow", "record", "replay"]
MODES: tuple[Mode, ...] = ("live", "shadow", "record", "replay")


class _Forwarded(Generic[V]):
    """A setting kept on the engine (or its guard), readable and writable on the cache."""

    def __init__(self, where: str = "engine") -> None:
        self.where = where

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> Self: ...
    @overload
    def __get__(self, obj: DecisionCache, owner: type) -> V: ...
    def __get__(self, obj: DecisionCache | None, owner: type) -> V | Self:
        if obj is None:
            return self
        target = obj.engine if self.where == "engine" else obj.engine.guard
        return getattr(target, self.name)  # type: ignore[no-any-return]

    def __set__(self, obj: DecisionCache, value: V) -> None:
        target = obj.engine if self.where == "engine" else obj.engine.guard
        setattr(target, self.name, value)


class DecisionCache:
    """Caches model decisions in a store and runs each miss once.

    Args:
        store: where decisions live; a fresh ``MemoryStore`` when omitted.
        namespace: prefix for the namespaces of everything using this cache, and
            recorded in each entry it stores (``asyncache copy --namespace`` selects by it).
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
        max_decoded_bytes: the most bytes a stored entry may inflate to; more
            is a corrupt entry (a decompression bomb planted in a shared
            store): a miss, deleted and counted. ``None``: 64 times
            ``max_entry_bytes``. A decision that would inflate past it is
            not stored (``too_large``).
        store_timeout: seconds a store call may take before it is a miss; a
            store with ``enforces_timeouts`` (see ``DecisionStore``) is
            bounded by its own timeouts instead. Calls share one timer per
            sixteenth of it, so a call is stopped between ``store_timeout``
            and an eighth more (``asyncache.engine._guard``).
        secret: HMAC key; entries without a valid tag are misses.
        enabled: ``False`` computes every call and touches no store.
        failure_threshold: store failures in a row before the cool-down.
        failure_cooldown: seconds the store is skipped after that.
        max_background: most renewals and deletions in progress at once.
        leases: take a lease in the shared store before computing a miss, so
            that a fleet computes each key once (needs a ``LeaseStore``:
            SQLiteStore, RedisStore, or a tier over one).
        lease_ttl: seconds a lease lives unless renewed. Its owner renews it
            every third of that while the model runs, however long that is;
            a dead owner's lease ends within it and a waiter takes over.
        store_wait: with leases, seconds a miss keeps trying to reach a
            store that fails before it computes without a lease. ``0`` (the
            default) fails open: compute at once, so an answer is always
            there, and replicas may each compute (and answer differently)
            while the store is down. A bound above a failover's length
            (several seconds for a Redis Cluster primary) makes the fleet
            wait for the store and give one answer through it.
        audit_rate: share of hits (0 to 1) recomputed in the background and
            compared with what was served.
        audit: ``audit(stored, fresh)`` is True when two decisions agree;
            equal canonical encodings by default.
        on_mismatch: ``on_mismatch(inputs, stored, fresh)`` on each audit or
            shadow disagreement; may be a coroutine function.
        audit_concurrency: most audits running at once; more are dropped.
        audit_replace: an audit that disagrees stores the fresh decision in
            place of the one it read (compare-and-set: a decision stored since
            stays). ``False`` only counts and reports the disagreement.
        max_wrong_rate: with ``audit_rate``, a namespace's (a function's, a
            route's) hits are served only while the upper confidence bound of
            the share of its audited hits that disagreed is at most this;
            otherwise each hit is computed, compared (an audit) and repaired.
            ``None`` (the default) measures without acting (``trust()``).
        confidence: of that one-sided (Clopper-Pearson) bound.
        trust_window: audit outcomes kept per namespace for the bound.
        on_breach: ``on_breach(namespace, report)`` when a namespace's hits
            stop being served (a ``TrustReport``); may be a coroutine function.
        mode: ``"live"`` serves hits; ``"shadow"`` computes every call,
            returns the fresh result, fills the store and counts whether the
            stored decision would have been served and agreed; ``"record"``
            computes every call and stores it in place of what the key held,
            raising ``StoreError`` for a decision it could not store (the
            store failed, or the result does not encode or is too large: a
            recording is complete or it fails); ``"replay"`` answers from the
            store only, never runs the model, writes, deletes, renews or
            prunes nothing, and raises ``ReplayMiss`` (its ``reason`` says
            why: not recorded, signature does not match, corrupt, expired) for
            a call it holds no usable decision for. Every door (single calls,
            ``.many()``, micro-batching, the middleware) obeys it.
        stale_while_revalidate: seconds after an entry's ttl during which a
            lookup returns it at once and starts one refresh (one per process;
            one per fleet with ``leases``). See the Freshness page.
        stale_if_error: seconds after that during which a computation that
            raises (``TimeoutError`` included) returns the stored decision.
        jitter: a fraction in ``[0, 1)``: each stored ttl is drawn uniformly
            from ``[ttl * (1 - jitter), ttl]``, so entries stored together
            do not all expire together.
        cache_errors: exception types a computation may raise that are
            remembered for ``error_ttl`` seconds: within it, callers get the
            same type and message again without running the model.
        error_ttl: seconds a cached error lives.

    Attributes:
        engine: the one hit/miss path every door takes (``asyncache.engine._engine``).
    """

    namespace: _Forwarded[str | None] = _Forwarded()
    """Prefix of every key's namespace, also written into each entry (``copy --namespace``)."""
    ttl: _Forwarded[float | TtlHook | None] = _Forwarded()
    admit: _Forwarded[AdmitHook | None] = _Forwarded()
    renew_on_hit: _Forwarded[bool] = _Forwarded()
    coalesce: _Forwarded[bool] = _Forwarded()
    coalesce_timeout: _Forwarded[float | None] = _Forwarded()
    max_entry_bytes: _Forwarded[int] = _Forwarded()
    max_background: _Forwarded[int] = _Forwarded()
    on_compute: _Forwarded[Callable[[float], None] | None] = _Forwarded()
    """Called with the seconds of each model call (one per batch), for metrics."""
    store_timeout: _Forwarded[float | None] = _Forwarded("guard")
    failure_threshold: _Forwarded[int] = _Forwarded("guard")
    failure_cooldown: _Forwarded[float] = _Forwarded("guard")
    store_wait: _Forwarded[float] = _Forwarded()
    """Seconds a miss keeps trying an unreachable store before computing (with leases)."""

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
        max_decoded_bytes: int | None = None,
        store_timeout: float | None = 1.0,
        secret: bytes | str | None = None,
        enabled: bool = True,
        failure_threshold: int = 5,
        failure_cooldown: float = 10.0,
        max_background: int = 64,
        leases: bool = False,
        lease_ttl: float = 1.0,
        store_wait: float | None = 0.0,
        audit_rate: float = 0.0,
        audit: Compare | None = None,
        on_mismatch: MismatchHook | None = None,
        audit_concurrency: int = 4,
        audit_replace: bool = True,
        max_wrong_rate: float | None = None,
        confidence: float = 0.95,
        trust_window: int = 1000,
        on_breach: BreachHook | None = None,
        mode: Mode = "live",
        stale_while_revalidate: float = 0.0,
        stale_if_error: float = 0.0,
        jitter: float = 0.0,
        cache_errors: tuple[type[BaseException], ...] = (),
        error_ttl: float = 5.0,
    ) -> None:
        if isinstance(ttl, int | float) and not isinstance(ttl, bool):
            ttl = float(ttl)
        elif ttl is not None and not callable(ttl):
            raise TypeError(f"ttl must be seconds, None or a function, not {type(ttl).__name__}")
        if max_entry_bytes <= 0:
            raise ValueError("max_entry_bytes must be positive")
        if max_decoded_bytes is not None and max_decoded_bytes <= 0:
            raise ValueError("max_decoded_bytes must be positive or None")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        store_wait = 0.0 if store_wait is None else float(store_wait)
        if not 0.0 <= store_wait < float("inf"):
            raise ValueError(f"store_wait must be zero or a positive number, got {store_wait!r}")
        if not 0.0 <= audit_rate <= 1.0:
            raise ValueError(f"audit_rate must be between 0 and 1, got {audit_rate!r}")
        if max_wrong_rate is not None and audit_rate == 0:
            # Without audits a namespace would never earn trust (or never lose it).
            raise ValueError("max_wrong_rate needs audits: set audit_rate above 0")
        freshness = Freshness.checked(
            stale_while_revalidate=stale_while_revalidate,
            stale_if_error=stale_if_error,
            jitter=jitter,
            cache_errors=cache_errors,
            error_ttl=error_ttl,
        )
        chosen: DecisionStore = MemoryStore() if store is None else store
        stats = CacheStats()
        log = RateLimitedLog(logger)
        guard = StoreGuard(
            chosen,
            timeout=store_timeout,
            failure_threshold=failure_threshold,
            failure_cooldown=failure_cooldown,
            stats=stats,
            log=log,
        )
        # Replay reads only: the guard refuses every other store call, whatever asks.
        guard.read_only = mode == "replay"
        self.engine = Engine(
            chosen, guard=guard, stats=stats, log=log, secret=normalize_secret(secret)
        )
        self.namespace = namespace
        self.fingerprint = fingerprint
        self.ttl = ttl
        self.renew_on_hit = renew_on_hit
        self.coalesce = coalesce
        self.coalesce_timeout = coalesce_timeout
        self.admit = admit
        self.max_entry_bytes = max_entry_bytes
        self.engine.decode_cap = max_decoded_bytes
        self.engine.freshness = freshness
        self.max_background = max_background
        self._mode: Mode = mode
        self.enabled = enabled
        self._builders: dict[tuple[str, str], KeyBuilder] = {}
        self._closed = False
        self._trust: Trust | None = None
        if audit_rate > 0 or mode == "shadow":
            # Imported here: a cache that neither audits nor shadows never loads it.
            from .engine import Auditor

            auditor = Auditor(
                self.engine,
                rate=audit_rate,
                compare=audit,
                on_mismatch=on_mismatch,
                concurrency=audit_concurrency,
                replace=audit_replace,
            )
            if audit_rate > 0:
                from .engine import Trust

                self._trust = auditor.trust = self.engine.trust = Trust(
                    self.engine,
                    lambda key, inputs, stored, fresh: auditor.judge(
                        key, inputs, stored, fresh, shadow=False
                    ),
                    max_wrong_rate=max_wrong_rate,
                    confidence=confidence,
                    window=trust_window,
                    on_breach=on_breach,
                )
            self.engine.auditor = auditor
            # An audit runs the model and may write: never in replay.
            self.engine.sampler = auditor if audit_rate > 0 and mode != "replay" else None
        self.leases = leases
        self.lease_ttl = lease_ttl
        self.store_wait = store_wait
        self.use_store(chosen)

    @property
    def freshness(self) -> Freshness:
        """The stale windows, jitter and cached errors, as one value (``Freshness``)."""
        return self.engine.freshness

    @property
    def stale_while_revalidate(self) -> float:
        """Seconds after the ttl a stale decision is served while one refresh runs."""
        return self.engine.freshness.stale_while_revalidate

    @property
    def stale_if_error(self) -> float:
        """Seconds after that a stale decision answers a failed computation."""
        return self.engine.freshness.stale_if_error

    @property
    def mode(self) -> Mode:
        """``"live"``, ``"shadow"``, ``"record"`` or ``"replay"``: set at construction."""
        return self._mode

    @property
    def enabled(self) -> bool:
        """``False`` computes every call and touches no store; may be changed on a live cache."""
        return self.engine.mode != "off"

    @enabled.setter
    def enabled(self, value: bool) -> None:
        self.engine.mode = self._mode if value else "off"

    def __repr__(self) -> str:
        return f"DecisionCache(store={self.store!r}, namespace={self.namespace!r})"

    @property
    def store(self) -> DecisionStore:
        """Where the decisions live."""
        return self.engine.store

    def use_store(self, store: DecisionStore) -> None:
        """Point the cache at ``store``: before first use (the CLI's ``--store``)."""
        if self.mode == "record" and not callable(getattr(store, "delete", None)):
            raise ConfigurationError(
                f"mode='record' replaces what a key holds, which needs a store with "
                f"delete(key); {type(store).__name__} has none"
            )
        if self.mode == "replay":
            # The store's own background writes (SQLite's prune) would delete an
            # expired recording while it is replayed.
            pause = getattr(store, "pause_upkeep", None)
            if callable(pause):
                pause()
        engine = self.engine
        engine.use(store)
        engine.leases = None
        if self.leases:
            from .engine import Leases, lease_store

            where = lease_store(store)
            if where is None:
                logger.warning(
                    "asyncache: leases=True but %s has no leases; misses are coalesced "
                    "in this process only",
                    type(store).__name__,
                )
            else:
                engine.leases = Leases(engine, where, ttl=self.lease_ttl)

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
        from .stores.registry import open_store

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

    # -- the doors into the engine -------------------------------------------

    def hit_now(self, key: bytes) -> Any:
        """The decision under ``key`` if the store holds it in memory, else ``MISS``."""
        return self.engine.hit_now(key)

    async def get_or_compute(
        self, key: bytes, compute: Callable[[], Awaitable[T]], inputs: Any = None
    ) -> T:
        """Return the stored decision for ``key``, or compute, store and return it.

        Args:
            key: from ``key()`` or a ``KeyBuilder``.
            compute: runs the model; called at most once per flight.
            inputs: handed to the ``ttl`` and ``admit`` hooks.
        """
        return await self.engine.get_or_compute(key, compute, inputs)

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
        return await self.engine.get_or_compute_many(keys, compute, inputs)

    async def lookup(self, key: bytes) -> Decoded | None:
        """Return the live decoded decision under ``key`` and count the hit, or ``None``.

        A corrupt or tampered entry is counted, deleted and reported as ``None``
        (in replay, which deletes nothing, it is a ``ReplayMiss`` saying why).
        """
        return await self.engine.lookup(key)

    async def store_result(
        self, key: bytes, result: T, *, inputs: Any = None, compute_seconds: float = 0.0
    ) -> T:
        """Admit, encode and add ``result``; return the decision that won."""
        return await self.engine.store_result(
            key, result, inputs=inputs, compute_seconds=compute_seconds
        )

    async def forget(
        self,
        tags: Iterable[str] = (),
        scope: Any = None,
        *,
        dry_run: bool = False,
        progress: Callable[[int, int], object] | None = None,
    ) -> int:
        """Drop every decision of this cache's namespace with any of ``tags`` or under ``scope``.

        Tags are what ``tags=`` (decorator, middleware) and the app's
        ``Cache-Tag`` header named; a scope is what ``scope=`` returned. Both
        given: a decision with either goes. Returns how many were dropped.
        After it returns no process serves a decision stored before the call
        (memory tiers of other processes drop theirs within 100 ms), and a
        computation that began before it stores nothing. See docs/forgetting.md.

        Raises:
            ValueError: neither tags nor a scope was given.
            TypeError: the store cannot forget (it names the store).
            ReplayRefused: the cache replays; replay never writes.
            StoreError: the store failed; what it dropped so far stays dropped.
        """
        return await forget(
            self.engine, self.namespace, tags, scope, dry_run=dry_run, progress=progress
        )

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
        from .engine import warm

        if getattr(function, "cache", None) not in (None, self):
            raise ValueError("warm() needs a function cached by this DecisionCache")
        return await warm(self.engine, function, inputs, concurrency=concurrency, progress=progress)

    # -- lifecycle and stats ----------------------------------------------

    async def check(self) -> StoreCheck:
        """Make one round trip to the store and say what failed, if anything did.

        Writes a probe key, reads it back and deletes it (in replay, which never
        writes, only reads one), each step under ``store_timeout``. For an app's
        startup and a health route: where calls treat a store that is down as a
        miss, this names the failing step and its error. Never raises for the
        store's faults or bugs: the answer says them.

        Returns:
            A ``StoreCheck``, true when every step succeeded; ``.message`` says what
            failed (``"RedisStore: write failed: StoreError: ..."``).
        """
        return await check_store(self.engine)

    def stats(self) -> dict[str, Any]:
        """Every counter, the in-flight gauge and the store's own stats when it has them."""
        counters = self.engine.stats.as_dict()
        counters["in_flight"] = len(self.engine.flights)
        trust = self._trust
        counters["wrong_rate_upper"] = 0.0 if trust is None else trust.highest()
        store_stats = getattr(self.store, "stats", None)
        if callable(store_stats):
            counters["store"] = store_stats()
        return counters

    def trust(self) -> dict[str, TrustReport]:
        """Each namespace's (function's, route's) audit window: audits, mismatched, the
        upper bound of its wrong rate, and whether its hits are served.

        Empty without ``audit_rate``. Windows are this process's: each replica
        of a fleet keeps its own.
        """
        trust = self._trust
        return {} if trust is None else trust.reports()

    def reset_stats(self) -> None:
        """Set every counter back to zero."""
        self.engine.stats.reset()

    async def aclose(self) -> None:
        """Finish background work, cancel running computations and close the store."""
        if self._closed:
            return
        self._closed = True
        await self.engine.aclose()
        await self.store.aclose()
