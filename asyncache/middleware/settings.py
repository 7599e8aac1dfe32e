"""What every request of one middleware shares: the app, the engine, the rules, the runs."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from ..engine import Broadcast, Engine, Freshness
from ..tags import Tagging
from .capture import ResponseCapture
from .response import AdmitResponse
from .stats import MiddlewareStats
from .status import StatusHeaders
from .types import ASGIApp, Scope

__all__ = [
    "FOLLOWER_FACTOR",
    "FOLLOWER_FLOOR",
    "MAX_PASSES",
    "SLOW_HALF_LIFE",
    "ExchangeSettings",
    "OnHit",
    "RunTimes",
]

FOLLOWER_FACTOR = 4.0
"""With ``follower_timeout=None``, a follower waits this many times the route's typical run."""
FOLLOWER_FLOOR = 0.1
"""... and never less than this many seconds: a fast route's followers still share."""
SLOW_HALF_LIFE = 600.0
"""The route's slowest recent run counts as its typical run at least, halved every this
many seconds: cheap runs of other inputs never shorten the wait below what a slow input
of the same route takes."""
MAX_PASSES = 4096
"""The most keys remembered as uncacheable at once (hit-for-pass); past it, the expired
ones go, and if none has, all of them (a request then only queues once more)."""

OnHit = Callable[[Scope], Any]
"""``on_hit(asgi_scope)``: called before a stored answer is sent; ``False`` sends none."""


class RunTimes:
    """How long the app takes to answer on each route, and so how long a follower waits.

    A follower waits on another request's run only while it is not much slower
    than a normal run: a client whose request the app throttles (a quota, a
    slow path for its account) must not hold up an identical request of
    someone else's. Only runs whose answer was shared or stored are timed, so
    such a client cannot stretch the wait either.

    Nor can cheap requests shorten it: a route's inputs differ in cost, and
    a burst of cheap distinct ones would bring the moving average down to
    nothing, so that identical requests for a slow input each ran the app.
    The slowest recent run (``SLOW_HALF_LIFE``) is a floor under the average.

    Args:
        fixed: the wait in seconds; ``None`` to follow the route's typical
            run (``FOLLOWER_FACTOR`` times its moving average or its slowest
            recent run, whichever is longer, at least ``FOLLOWER_FLOOR``).
    """

    __slots__ = ("fixed", "slowest", "typical")

    def __init__(self, fixed: float | None) -> None:
        self.fixed = fixed
        self.typical: dict[str, float] = {}
        """Route -> moving average of its storable runs, in seconds."""
        self.slowest: dict[str, tuple[float, float]] = {}
        """Route -> its slowest storable run (seconds) and when it ended (monotonic)."""

    def ran(self, route: str, seconds: float) -> None:
        """Count one run of ``route`` whose answer could be shared."""
        typical = self.typical.get(route)
        self.typical[route] = seconds if typical is None else 0.8 * typical + 0.2 * seconds
        now = time.monotonic()
        if seconds >= self._slow(route, now):
            self.slowest[route] = (seconds, now)

    def _slow(self, route: str, now: float) -> float:
        """``route``'s slowest recent run, halved for every ``SLOW_HALF_LIFE`` since it ran."""
        slow = self.slowest.get(route)
        if slow is None:
            return 0.0
        seconds, when = slow
        return seconds * math.pow(0.5, (now - when) / SLOW_HALF_LIFE)

    def wait(self, route: str, limit: float | None) -> float | None:
        """How long a follower of a run of ``route`` waits for its answer to start.

        ``limit`` (the cache's ``coalesce_timeout``; ``None``: none) bounds it,
        and is the wait before the route's first run was timed.
        """
        wait = self.fixed
        if wait is None:
            typical = self.typical.get(route)
            if typical is None:
                return limit
            typical = max(typical, self._slow(route, time.monotonic()))
            wait = max(FOLLOWER_FLOOR, FOLLOWER_FACTOR * typical)
        return wait if limit is None else min(wait, limit)


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
        "run_times",
        "stats",
        "statuses",
        "tags",
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
        follower_timeout: float | None = None,
        tags: Callable[[Scope], Any] | None = None,
    ) -> None:
        self.tags = tags
        """``tags(asgi_scope)``: the tags a stored response carries (the middleware's ``tags=``)."""
        self.app = app
        self.engine = engine
        self.stats = stats
        self.headers = headers
        self.statuses = statuses
        self.keyed = keyed
        self.admit = admit
        self.on_hit = on_hit
        self.audit = audit
        self.run_times = RunTimes(follower_timeout)
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
        if passes.get(key, 0.0) > now:
            return  # a client refused again within the pass does not renew it for others
        if len(passes) >= MAX_PASSES:
            for old in [k for k, until in passes.items() if until <= now]:
                del passes[old]
            if len(passes) >= MAX_PASSES:
                passes.clear()
        passes[key] = now + self.pass_ttl

    def end_pass(self, key: bytes) -> None:
        """An answer under ``key`` may be stored: identical requests share runs again."""
        if self.passes:
            self.passes.pop(key, None)

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

    def capture(
        self,
        broadcast: Broadcast,
        scope: Scope,
        finish: Any,
        *,
        hold: bool = False,
        fallback: bool = False,
        marks: Tagging | None = None,
    ) -> ResponseCapture:
        """The app's ``send`` for one run (``hold``, ``fallback``: see ``ResponseCapture``)."""
        return ResponseCapture(
            broadcast,
            scope=scope,
            statuses=self.statuses,
            keyed=self.keyed,
            limit=self.engine.max_entry_bytes,
            admit=self.admit,
            finish=finish,
            hold=hold,
            fallback=fallback,
            tag_name=self.headers.tag_name,
            marks=marks,
        )
