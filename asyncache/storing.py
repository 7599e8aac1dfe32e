"""The store side of the engine: admitting, encoding and adding decisions, and upkeep.

``StoreSide`` is what ``Engine`` builds on: it decides whether a result is
kept (the ttl and ``admit`` hooks, the size cap, encodability), adds it, picks
the decision that won, reads through the guard, drops corrupt entries, renews
hits in the background, and owns the background tasks ``aclose`` awaits.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, TypeVar

from .codec import decode, encode
from .errors import DecodeError, ReplayMiss
from .guard import StoreGuard
from .keys import canonical
from .runtime import spawn
from .stats import CacheStats, RateLimitedLog
from .stores.protocol import DecisionStore, Entry

__all__ = ["AdmitHook", "Fingerprint", "StoreSide", "TtlHook", "replay_miss"]

logger = logging.getLogger("asyncache")

T = TypeVar("T")
TtlHook = Callable[[Any, Any], float | None]
AdmitHook = Callable[[Any, Any], bool]
Fingerprint = str | Mapping[str, Any] | None


class StoreSide:
    """Settings and steps that touch the store, shared by every path of the engine.

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
        self.store = store
        self.stats = stats
        self.log = log
        self.guard = guard
        self.secret = secret
        self.background: set[asyncio.Task[Any]] = set()
        self.max_background = 64
        self.closed = False
        # Settings; DecisionCache forwards its own to these.
        self.ttl: float | TtlHook | None = None
        self.admit: AdmitHook | None = None
        self.renew_on_hit = False
        self.max_entry_bytes = 1024 * 1024
        self.decode_cap: int | None = None
        # Written into every envelope ("n"), so that tools can select a cache's entries.
        self.namespace: str | None = None
        # Called with the seconds of each model call (one per batch); the Prometheus adapter
        # sets it. Kept to one attribute test so that no-one pays for it when unset.
        self.on_compute: Callable[[float], None] | None = None
        self._renewing: set[bytes] = set()
        self._unencodable_warned: set[str] = set()

    @property
    def max_decoded_bytes(self) -> int:
        """The most bytes a stored entry may inflate to: ``decode_cap``, or 64 times
        ``max_entry_bytes``. Past it an entry is corrupt (a decompression bomb)."""
        return self.decode_cap if self.decode_cap is not None else 64 * self.max_entry_bytes

    async def timed(self, compute: Callable[[], Awaitable[T]]) -> tuple[T, float]:
        """Run one model call; return its result and its seconds (reported to ``on_compute``)."""
        started = time.perf_counter()
        result = await compute()
        seconds = time.perf_counter() - started
        if self.on_compute is not None:
            self.on_compute(seconds)
        return result, seconds

    async def store_result(
        self, key: bytes, result: T, *, inputs: Any = None, compute_seconds: float = 0.0
    ) -> T:
        """Admit, encode and add ``result``; return the decision that won.

        The returned value is decoded from what the store kept, so a miss and a
        later hit give equal values of the same types. A result that is not
        kept (ttl, ``admit``, size, encoding, store failure) is returned as is.
        """
        prepared = self.prepare(key, result, inputs, compute_seconds)
        if prepared is None:
            return result
        value, expires_at = prepared
        entry = await self.guard.call("add", lambda: self.store.add(key, value, expires_at))
        return self.winner(key, value, entry, result)  # type: ignore[no-any-return]

    def prepare(
        self, key: bytes, result: Any, inputs: Any, compute_seconds: float
    ) -> tuple[bytes, float | None] | None:
        """Encode ``result`` for the store, or ``None`` when it must not be kept."""
        try:
            ttl = self.ttl
            if callable(ttl):
                ttl = ttl(inputs, result)
            if ttl == math.inf:
                ttl = None  # the same "no expiry" on every store
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
        try:
            value = encode(
                result,
                ttl=ttl,
                created_at=now,
                compute_seconds=compute_seconds,
                key=key,
                secret=self.secret,
                namespace=self.namespace,
            )
        except (TypeError, ValueError) as exc:
            self.stats.unencodable += 1
            kind = type(result).__qualname__
            if kind not in self._unencodable_warned:
                self._unencodable_warned.add(kind)
                logger.warning(
                    "asyncache: results of type %s are returned but not stored: %s", kind, exc
                )
            return None
        if len(value) > self.max_entry_bytes:
            self.stats.too_large += 1
            return None
        return value, (None if ttl is None else now + ttl)

    def winner(self, key: bytes, value: bytes, entry: Entry | None, result: Any) -> Any:
        """What every caller of a flight receives once its ``add`` returned ``entry``."""
        if entry is None:
            chosen = value  # the store failed: hand back our own decision
        elif entry.value == value:
            self.stats.stores += 1
            chosen = value
        else:
            self.stats.conflicts += 1
            chosen = entry.value
        try:
            return decode(
                chosen, key=key, secret=self.secret, max_size=self.max_decoded_bytes
            ).value
        except DecodeError:
            self.stats.corrupt += 1
            return result

    async def store_get(self, key: bytes) -> Entry | None:
        """The store's ``get``, guarded: a failure is ``None``."""
        return await self.guard.call("get", lambda: self.store.get(key))

    async def discard_corrupt(self, key: bytes, exc: DecodeError) -> None:
        """Count a corrupt entry and delete it."""
        self.stats.corrupt += 1
        self.log.warning("corrupt", "asyncache: dropping an entry that does not decode: %s", exc)
        # Awaited, not backgrounded: the add that follows must not find it.
        await self.delete_entry(key)

    async def delete_entry(self, key: bytes) -> None:
        """The store's ``delete`` (optional: see ``DecisionStore``), guarded."""
        delete = getattr(self.store, "delete", None)
        if delete is not None:
            await self.guard.call("delete", lambda: delete(key))

    def maybe_renew(self, key: bytes, entry: Entry, ttl: float | None) -> None:
        """Push a hit's expiry out by its ttl, at most once every ttl/16, in the background."""
        if ttl is None or ttl <= 0 or entry.expires_at is None:
            return
        now = time.time()
        if ttl - (entry.expires_at - now) < ttl / 16:
            return  # renewed (or stored) less than ttl/16 ago
        if key in self._renewing or len(self.background) >= self.max_background:
            return
        self._renewing.add(key)
        self.spawn(self._renew(key, now + ttl))

    async def _renew(self, key: bytes, expires_at: float) -> None:
        try:
            renewed = await self.guard.call("renew", lambda: self.store.renew(key, expires_at))
            if renewed:
                self.stats.renewals += 1
        finally:
            self._renewing.discard(key)

    def spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any] | None:
        """Run ``work`` as an owned background task, awaited by ``aclose`` (asyncio)."""
        return spawn(work, self.background)


def replay_miss(key: bytes, inputs: Any) -> ReplayMiss:
    """The error of ``mode="replay"`` for a key the store does not hold."""
    try:
        digest = hashlib.blake2b(canonical(inputs), digest_size=6).hexdigest()
    except TypeError:
        digest = key[:6].hex()
    return ReplayMiss(None, digest, key)
