"""What every request of one middleware shares: the app, the engine, the rules, the runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..engine import Broadcast, Engine
from .capture import ResponseCapture
from .response import AdmitResponse
from .stats import MiddlewareStats
from .status import StatusHeaders
from .types import ASGIApp, Scope

__all__ = ["ExchangeSettings", "OnHit"]

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
        "headers",
        "keyed",
        "on_hit",
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
