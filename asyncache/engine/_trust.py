"""Trust: a measured bound on how often a served hit is wrong, and what the cache does about it.

Audits (``asyncache.engine._audit``) recompute a sample of hits. Here each
namespace (a decorated function, a middleware route) keeps its last
``trust_window`` audit outcomes, and from them the one-sided Clopper-Pearson
upper confidence bound of the share of hits that disagree with the model now.
With ``max_wrong_rate`` set, a namespace's hits are served only while that
bound is at most ``max_wrong_rate``; otherwise ``Engine.hit`` hands the entry
back as a doubted one (a ``StaleHit`` outside any window: every door already
computes those as a miss, replaces the entry by compare-and-set, and falls back
on it if the model fails). The computation is judged here against the stored
decision (it counts as an audit) before anything is written.

Windows live in this process: each replica of a fleet earns and loses trust on
its own evidence.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ..codec import Decoded
from ..errors import DecodeError
from ..stores.protocol import Entry

if TYPE_CHECKING:
    from ._engine import Engine

# judge(key, inputs, stored, fresh) -> agreed: the auditor's comparison, counted as an audit.
Judge = Callable[[bytes, Any, Any, Any], bool]

__all__ = [
    "BreachHook",
    "Trust",
    "TrustReport",
    "judged_as",
    "needed_audits",
    "upper_bound",
]

BreachHook = Callable[[str, "TrustReport"], Any]

judged_as: ContextVar[str | None] = ContextVar("asyncache_trust_namespace", default=None)
"""The namespace whose window judges the call in progress: set by the decorator
(the function's namespace) and the middleware (the route); the cache's own
namespace, or ``"default"``, when unset."""

# Doubted keys not yet computed (a computation that returns Unshared stores nothing
# and never comes back for its key): forgotten past this many.
_MOST_DOUBTED = 10_000


def _binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed in log space (no underflow at n = 10^4)."""
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 1.0 if k >= n else 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    term = n * log_q  # log P(X = 0)
    total = 0.0
    for i in range(k + 1):
        if i:
            term += math.log((n - i + 1) / i) + log_p - log_q
        total += math.exp(term)
    return min(total, 1.0)


@lru_cache(maxsize=4096)
def upper_bound(mismatched: int, audits: int, confidence: float) -> float:
    """The one-sided Clopper-Pearson upper bound of a disagreement share.

    The largest ``p`` for which seeing at most ``mismatched`` disagreements in
    ``audits`` audits still has probability ``1 - confidence``; found by
    bisection on the binomial CDF (which falls as ``p`` grows). 1.0 with no audits.
    """
    if audits <= 0 or mismatched >= audits:
        return 1.0
    alpha = 1.0 - confidence
    if mismatched == 0:
        return float(1.0 - alpha ** (1.0 / audits))  # the closed form of the same bound
    low, high = mismatched / audits, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        if _binomial_cdf(mismatched, audits, middle) > alpha:
            low = middle
        else:
            high = middle
    return high


def needed_audits(max_wrong_rate: float, confidence: float = 0.95) -> int:
    """How many agreeing audits (none disagreeing) bring the bound to ``max_wrong_rate``:
    the smallest ``n`` with ``1 - (1 - confidence) ** (1 / n) <= max_wrong_rate``."""
    return math.ceil(math.log(1.0 - confidence) / math.log1p(-max_wrong_rate))


@dataclass(frozen=True)
class TrustReport:
    """One namespace's (or route's) standing, as ``cache.trust()`` reports it.

    Attributes:
        audits: audit outcomes in the window (at most ``trust_window``).
        mismatched: how many of them disagreed.
        upper: the upper confidence bound of the share of hits that are wrong.
        serving: whether its hits are served (always, without ``max_wrong_rate``).
        breaches: how many times it went from serving to not serving.
    """

    audits: int
    mismatched: int
    upper: float
    serving: bool
    breaches: int


class _Window:
    """The last audit outcomes of one namespace (True: disagreed)."""

    __slots__ = ("breached", "breaches", "mismatched", "outcomes", "serving")

    def __init__(self, size: int, serving: bool) -> None:
        self.outcomes: deque[bool] = deque(maxlen=size)
        self.mismatched = 0
        self.serving = serving
        # Since the last breach, until the bound is back under half the limit: audit every hit.
        self.breached = False
        self.breaches = 0

    def add(self, disagreed: bool) -> None:
        outcomes = self.outcomes
        if len(outcomes) == outcomes.maxlen and outcomes[0]:
            self.mismatched -= 1
        outcomes.append(disagreed)
        self.mismatched += disagreed


class Trust:
    """Per-namespace audit windows, the bound, and the decision to serve or doubt.

    Args:
        engine: the engine whose counters, log and background tasks are used.
        judge: the auditor's comparison, ``judge(key, inputs, stored, fresh)``:
            whether they agree, counted as an audit (which ``record`` hears of).
        max_wrong_rate: the most the bound may be while hits are served;
            ``None`` measures without acting.
        confidence: of the one-sided bound, between 0 and 1.
        window: audit outcomes kept per namespace.
        on_breach: ``on_breach(namespace, report)`` when a namespace stops
            being served; may be a coroutine function.
    """

    def __init__(
        self,
        engine: Engine,
        judge: Judge,
        *,
        max_wrong_rate: float | None,
        confidence: float,
        window: int,
        on_breach: BreachHook | None,
    ) -> None:
        if max_wrong_rate is not None and not 0.0 < max_wrong_rate < 1.0:
            raise ValueError(f"max_wrong_rate must be between 0 and 1, got {max_wrong_rate!r}")
        if not 0.0 < confidence < 1.0:
            raise ValueError(f"confidence must be between 0 and 1, got {confidence!r}")
        if window < 1:
            raise ValueError(f"trust_window must be at least 1, got {window!r}")
        self._engine = engine
        self._judge = judge
        self.max_wrong_rate = max_wrong_rate
        self.confidence = confidence
        self.window = window
        self.on_breach = on_breach
        self._windows: dict[str, _Window] = {}
        # Keys handed back as doubted: key -> (the entry's bytes, namespace).
        self._doubted: dict[bytes, tuple[bytes, str]] = {}

    # -- the namespace of a call --------------------------------------------

    def namespace(self) -> str:
        """The namespace judging the call in progress."""
        return judged_as.get() or self._engine.namespace or "default"

    def _of(self, namespace: str) -> _Window:
        window = self._windows.get(namespace)
        if window is None:
            # A cold namespace with a limit has earned nothing yet: it computes.
            window = self._windows[namespace] = _Window(self.window, self.max_wrong_rate is None)
        return window

    def _within(self, window: _Window, limit: float) -> bool:
        """Whether the window's bound is at most ``limit``: one CDF, no bisection."""
        audits = len(window.outcomes)
        if audits == 0 or window.mismatched >= audits:
            return False
        return _binomial_cdf(window.mismatched, audits, limit) <= 1.0 - self.confidence

    # -- the hit path -------------------------------------------------------

    def doubts(self, key: bytes, entry: Entry) -> bool:
        """Whether a fresh hit on ``entry`` must be computed instead of served.

        Counts the hit as verified when served under the limit; a doubted one
        is remembered, so that its computation is judged (``judge_doubted``).
        """
        if self.max_wrong_rate is None or self._engine.mode != "live":
            return False
        namespace = self.namespace()
        if self._of(namespace).serving:
            self._engine.stats.verified_hits += 1
            return False
        if len(self._doubted) >= _MOST_DOUBTED:
            self._doubted.clear()
        self._doubted[key] = (entry.value, namespace)
        self._engine.stats.doubt_computes += 1
        return True

    def audit_rate(self, namespace: str, rate: float) -> float:
        """The share of ``namespace``'s hits to audit: every one after a breach while the
        bound is not yet under half the limit, else ``rate``."""
        window = self._windows.get(namespace)
        if window is None or not window.breached or self.max_wrong_rate is None:
            return rate
        if self._within(window, self.max_wrong_rate / 2):
            window.breached = False
            return rate
        return 1.0

    def judge_doubted(
        self, key: bytes, replacing: bytes, fresh: Any, inputs: Any
    ) -> Decoded | None:
        """A doubted key's computation, about to replace ``replacing``: judged as an audit.

        Returns the stored decision (decoded) when the two agree (nothing need be written),
        or ``None``: not doubted (a stale entry's refresh), or they disagree and the
        fresh decision replaces the stored one (compare-and-set).
        """
        doubted = self._doubted.get(key)
        if doubted is None or doubted[0] != replacing:
            return None
        del self._doubted[key]
        engine = self._engine
        try:
            stored = engine.decode(key, replacing)
        except DecodeError:
            return None
        token = judged_as.set(doubted[1])
        try:
            agreed = self._judge(key, inputs, stored.value, fresh)
        finally:
            judged_as.reset(token)
        if agreed:
            return stored
        engine.stats.repairs += 1  # the fresh decision replaces it next (compare-and-set)
        return None

    # -- the evidence -------------------------------------------------------

    def record(self, namespace: str, agreed: bool) -> None:
        """Add one audit outcome to ``namespace``'s window; serve or stop serving."""
        window = self._of(namespace)
        window.add(not agreed)
        limit = self.max_wrong_rate
        if limit is None:
            return
        serving = self._within(window, limit)
        if serving == window.serving:
            return
        window.serving = serving
        if serving:
            return
        window.breached = True
        window.breaches += 1
        self._engine.stats.breaches += 1
        self._engine.log.warning(
            "breach",
            "asyncache: hits of %s are no longer served: the wrong-rate bound passed %s",
            namespace,
            limit,
        )
        if self.on_breach is not None:
            self._engine.tell("on_breach", self.on_breach, namespace, self._report(window))

    def _report(self, window: _Window) -> TrustReport:
        audits = len(window.outcomes)
        return TrustReport(
            audits=audits,
            mismatched=window.mismatched,
            upper=upper_bound(window.mismatched, audits, self.confidence),
            serving=window.serving,
            breaches=window.breaches,
        )

    def reports(self) -> dict[str, TrustReport]:
        """Every namespace's standing (``cache.trust()``)."""
        return {name: self._report(window) for name, window in self._windows.items()}

    def highest(self) -> float:
        """The highest bound over namespaces; 0.0 before any audit (``wrong_rate_upper``)."""
        return max(
            (
                upper_bound(window.mismatched, len(window.outcomes), self.confidence)
                for window in self._windows.values()
                if window.outcomes
            ),
            default=0.0,
        )
