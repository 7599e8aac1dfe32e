"""Audits and shadow comparisons: is what the cache serves still what the model says?

A cache hides mistakes: a wrong decision is served until it expires. With
``DecisionCache(audit_rate=0.01)`` one hit in a hundred is computed again in
the background and compared with what was served; ``mode="shadow"`` computes
every request and compares it with what the cache would have served. Either
way agreement is counted and ``on_mismatch(inputs, stored, fresh)`` hears of
every disagreement. The caller's response never waits for an audit and never
changes because of one.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..codec import Decoded, round_trip
from ..keys import canonical
from ._engine import Engine, Unshared, lifetime, unwrap

if TYPE_CHECKING:
    from ._trust import Trust

__all__ = ["Auditor", "Compare", "MismatchHook", "same_decision"]

logger = logging.getLogger("asyncache")

Compare = Callable[[Any, Any], bool]
MismatchHook = Callable[[Any, Any, Any], Any]


def same_decision(stored: Any, fresh: Any) -> bool:
    """The default comparison: the two decisions have the same canonical encoding.

    NumPy arrays compare by dtype, shape and bytes, ``NaN`` equals ``NaN``, and
    a tuple equals the list the store gives back. Values the key encoder does
    not know fall back to ``==``.
    """
    try:
        return canonical(stored) == canonical(fresh)
    except (TypeError, ValueError):
        try:
            return bool(stored == fresh)
        except (TypeError, ValueError):
            return False


class Auditor:
    """Samples hits for audit and judges stored decisions against fresh ones.

    Args:
        engine: the engine whose counters, background tasks and secret are used.
        rate: the share of hits audited, from 0 to 1.
        compare: ``compare(stored, fresh)`` is True when they agree;
            ``same_decision`` by default. Pass a tolerance for float outputs.
        on_mismatch: called as ``on_mismatch(inputs, stored, fresh)`` on each
            disagreement; may be a coroutine function.
        concurrency: most audits running at once; sampled hits beyond it are
            dropped and counted in ``audits_dropped``.
        replace: an audit that disagrees stores the fresh decision in place of
            the one it read (compare-and-set: a newer decision stays).
    """

    __slots__ = (
        "_engine",
        "compare",
        "concurrency",
        "on_mismatch",
        "rate",
        "replace",
        "running",
        "trust",
    )

    def __init__(
        self,
        engine: Engine,
        *,
        rate: float,
        compare: Compare | None,
        on_mismatch: MismatchHook | None,
        concurrency: int,
        replace: bool = True,
    ) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"audit_rate must be between 0 and 1, got {rate!r}")
        if concurrency < 1:
            raise ValueError(f"audit_concurrency must be at least 1, got {concurrency!r}")
        self._engine = engine
        self.rate = rate
        self.compare: Compare = same_decision if compare is None else compare
        self.on_mismatch = on_mismatch
        self.concurrency = concurrency
        self.replace = replace
        self.running = 0
        # The audit windows and the bound (asyncache.engine._trust); set by DecisionCache.
        self.trust: Trust | None = None

    def sample(
        self, key: bytes, value: bytes, compute: Callable[[], Awaitable[Any]], inputs: Any
    ) -> None:
        """Maybe audit a hit on ``key`` whose stored envelope is ``value``; never waits."""
        rate = self.rate
        if self.trust is not None:
            rate = self.trust.audit_rate(self.trust.namespace(), rate)
        if random.random() >= rate:
            return
        engine = self._engine
        if self.running >= self.concurrency or engine.closed:
            engine.stats.audits_dropped += 1
            return
        self.running += 1
        engine.spawn(self._audit(key, value, compute, inputs))

    async def _audit(
        self, key: bytes, value: bytes, compute: Callable[[], Awaitable[Any]], inputs: Any
    ) -> None:
        engine = self._engine
        try:
            # Decoded again here: the caller owns (and may mutate) the copy it was given.
            stored = engine.decode(key, value).value
            started = time.perf_counter()
            result = await compute()
            seconds = time.perf_counter() - started
            fresh = unwrap(result)
            if not self.judge(key, inputs, stored, fresh, shadow=False) and self.replace:
                await self._repair(key, value, result, inputs, seconds)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            engine.stats.audit_errors += 1
            engine.log.warning("audit", "asyncache: an audit failed: %r", exc)
        finally:
            self.running -= 1

    async def _repair(
        self, key: bytes, value: bytes, result: Any, inputs: Any, seconds: float
    ) -> None:
        """Store an audit's fresh decision in place of the stored envelope ``value``, if
        ``key`` still holds it: a decision stored since is newer, and stays."""
        if isinstance(result, Unshared):
            return
        engine = self._engine
        fresh, fresh_for = lifetime(result)
        prepared = engine.prepare(key, fresh, inputs, seconds, fresh_for)
        if prepared is None:
            return
        new, expires_at = prepared
        entry = await engine.guard.call(
            "replace", lambda: engine.replace_entry(key, value, new, expires_at)
        )
        if entry is not None and entry.value == new:
            engine.stats.repairs += 1

    def judge_shadow(self, key: bytes, inputs: Any, stored: Decoded | None, fresh: Any) -> None:
        """Count one shadow call: a miss, or a hit that would have agreed or not."""
        if stored is None:
            self._engine.stats.misses += 1
            return
        self._engine.stats.shadow_would_hit += 1
        self.judge(key, inputs, stored.value, fresh, shadow=True)

    def judge(self, key: bytes, inputs: Any, stored: Any, fresh: Any, *, shadow: bool) -> bool:
        """Compare ``stored`` with ``fresh``, count the outcome and report a mismatch."""
        stats = self._engine.stats
        try:
            agreed = bool(self.compare(stored, round_trip(fresh)))
        except Exception as exc:
            # A comparison that cannot decide is a disagreement worth a look.
            self._engine.log.warning("compare", "asyncache: the audit comparison raised: %r", exc)
            agreed = False
        if shadow:
            if agreed:
                stats.shadow_agreed += 1
            else:
                stats.shadow_mismatched += 1
        else:
            stats.audits += 1
            if agreed:
                stats.audit_agreed += 1
            else:
                stats.audit_mismatched += 1
            if self.trust is not None:
                self.trust.record(self.trust.namespace(), agreed)
        if not agreed and self.on_mismatch is not None:
            self._report(inputs, stored, fresh)
        return agreed

    def _report(self, inputs: Any, stored: Any, fresh: Any) -> None:
        assert self.on_mismatch is not None
        self._engine.tell("on_mismatch", self.on_mismatch, inputs, stored, fresh)
