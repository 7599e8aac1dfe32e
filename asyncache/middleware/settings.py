"""What every request of one middleware shares: the app, the engine, the rules, the runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..engine import Broadcast, Engine, Freshness
from .capture import ResponseCapture
from .response import AdmitResponse
from .stats import MiddlewareStats
from .status import StatusHeaders
from .types import ASGIApp, Scope

__all__ = ["MAX_PASSES", "ExchangeSettings", "OnHit"]

MAX_PASSES = 4096
"""The most keys remembered as uncacheable at once (hit-for-pass); past it, the expired
ones go, and if none has, all of them (a request then only queues once more)."""

OnHit = Callable[[Scope], Any]
"""``on_hit(asgi_scope)``: called before a stored answer is sent; ``False`` sends none."""


class ExchangeSettings:
    """What every request of one middleware shares; built once by the middleware.

    Runs in progress are the engine's flights: a run's ``Broadcast`` hangs on its
    key's flight (``Flight.stream``), where identical requests find it.
    """

    __slots__ = (
        "admit",
        "app",
        "audit",
        "engine",
        "freshness",
        "headers",
        "keyed",
        "on_hit",
        "pass_ttl",
        "passes",
        "stats",
        "statuses",
    )

    def __init__(
        self,
        *,
        app: ASGIApp,
        engine: Engine,
        stats: MiddlewareStats,
        headers: StatusHeaders,
        statuses: frozenset[int],
        keyed: frozenset[bytes],
        admit: AdmitResponse | None,
        on_hit: OnHit | None,
        audit: bool,
        freshness: Freshness | None = None,
        pass_ttl: float = 5.0,
    ) -> None:
        self.app = app
        self.engine = engine
        self.stats = stats
        self.headers = headers
        self.statuses = statuses
        self.keyed = keyed
        self.admit = admit
        self.on_hit = on_hit
        self.audit = audit
        self.freshness = freshness
        """These routes' freshness settings (the cache's when ``None``): the most a
        response's own ``Cache-Control: stale-*`` may ask for."""
        self.pass_ttl = pass_ttl
        self.passes: dict[bytes, float] = {}
        """Keys whose last run was not admitted, until when (monotonic): hit-for-pass."""

    def remember_pass(self, key: bytes) -> None:
        """The answer under ``key`` may not be stored: send the next ones straight to the app."""
        if self.pass_ttl <= 0:
            return
        passes = self.passes
        now = time.monotonic()
        if len(passes) >= MAX_PASSES:
            for old in [k for k, until in passes.items() if until <= now]:
                del passes[old]
            if len(passes) >= MAX_PASSES:
                passes.clear()
        passes[key] = now + self.pass_ttl

    def passing(self, key: bytes) -> bool:
        """Whether ``key``'s last answer was uncacheable less than ``pass_ttl`` ago."""
        until = self.passes.get(key)
        if until is None:
            return False
        if until <= time.monotonic():
            del self.passes[key]
            return False
        return True

    def count_bypass(self, reason: str) -> None:
        """Count a request that did not use the cache."""
        self.stats.outcomes["bypass"] += 1
        self.stats.bypassed(reason)
        self.engine.stats.bypassed += 1

    def capture(self, broadcast: Broadcast, scope: Scope, finish: Any) -> ResponseCapture:
        """The app's ``send`` for one run."""
        return ResponseCapture(
            broadcast,
            scope=scope,
            statuses=self.statuses,
            keyed=self.keyed,
            limit=self.engine.max_entry_bytes,
            admit=self.admit,
            finish=finish,
        )
