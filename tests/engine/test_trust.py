"""Trust (issue 35): the wrong-rate bound, its breaches, repairs and where it is kept.

The doors x stores rows (decorator, ``.many()``, micro-batching, the middleware
on memory, SQLite and Redis) are in tests/test_matrix.py (``trust-*``); here
the bound's arithmetic, streams, ``audit_replace=False``, compare-and-set,
``on_breach`` as a coroutine, and replicas with leases keeping their own windows.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any

import pytest

from asyncache import DecisionCache, cached_prediction, open_store
from asyncache.engine._trust import needed_audits, upper_bound

from ..support import GENEROUS_REDIS_TIMEOUTS
from ..support import until as wait_until

TRUST: dict[str, Any] = {
    "audit_rate": 1.0,
    "max_wrong_rate": 0.2,
    "trust_window": 20,
    "store_timeout": 30.0,
}


async def until(condition: Callable[[], bool]) -> None:
    await wait_until(condition, within=60.0)  # a hang guard, never a timing assertion


# scipy.stats.beta.ppf(0.95, mismatched + 1, audits - mismatched): the one-sided
# Clopper-Pearson upper bound as the beta quantile (computed once, with scipy 1.17).
@pytest.mark.parametrize(
    ("mismatched", "audits", "expected"),
    [
        (0, 1, 0.95),
        (0, 299, 0.009969146792899269),
        (1, 100, 0.046559811453538935),
        (4, 1000, 0.009129952563871467),
        (37, 500, 0.09620286083712486),
        (999, 1000, 0.999948708021091),
    ],
)
def test_the_bound_is_clopper_pearson(mismatched: int, audits: int, expected: float) -> None:
    # Found here without scipy, by bisection on the binomial CDF.
    assert upper_bound(mismatched, audits, 0.95) == pytest.approx(expected, rel=1e-6)


def test_agreeing_audits_that_earn_trust() -> None:
    assert needed_audits(0.01) == 299  # "about 300 for 1% at 95%" (docs/audit.md)
    assert upper_bound(0, 299, 0.95) <= 0.01 < upper_bound(0, 298, 0.95)
    assert needed_audits(0.2) == 14
    assert upper_bound(0, 0, 0.95) == 1.0


def test_max_wrong_rate_needs_audits() -> None:
    with pytest.raises(ValueError, match="audit_rate"):
        DecisionCache(max_wrong_rate=0.01)
    with pytest.raises(ValueError, match="max_wrong_rate"):
        DecisionCache(audit_rate=0.1, max_wrong_rate=1.5)


async def _earn(call: Callable[[], Any], cache: DecisionCache) -> None:
    for _ in range(40):
        if cache.trust() and all(report.serving for report in cache.trust().values()):
            return
        await call()
        await asyncio.sleep(0)
    raise AssertionError(f"trust never earned: {cache.trust()}")


def _url(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == "memory":
        return "memory://"
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'trust.db'}"
    prefix = request.getfixturevalue("redis_prefix")
    return f"{request.getfixturevalue('redis_url')}?prefix={prefix}&{GENEROUS_REDIS_TIMEOUTS}"


@pytest.mark.parametrize("coalesce", [True, False], ids=["coalesced", "uncoalesced"])
@pytest.mark.parametrize(
    "kind", ["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis)]
)
async def test_a_stream_breaches_repairs_and_streams_fresh_chunks(
    kind: str, coalesce: bool, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store_url = _url(kind, tmp_path, request)
    answer = {"word": "old"}
    runs = []
    async with DecisionCache(open_store(store_url), coalesce=coalesce, **TRUST) as cache:

        @cached_prediction(cache, namespace="tokens")
        async def tokens(prompt: str) -> AsyncGenerator[str, None]:
            runs.append(prompt)
            for word in (prompt, answer["word"]):
                yield word

        async def chunks() -> list[str]:
            return [chunk async for chunk in tokens("p")]  # read to the end

        assert await chunks() == ["p", "old"]
        await _earn(chunks, cache)
        assert cache.stats()["doubt_computes"] >= 14
        answer["word"] = "new"
        assert await chunks() == ["p", "old"]  # trusted: served; its audit disagrees
        await until(lambda: cache.stats()["repairs"] == 1)
        stats = cache.stats()
        assert stats["breaches"] == 1 and stats["audit_mismatched"] == 1, stats
        assert cache.trust()["tokens"].serving is False
        runs.clear()
        assert await chunks() == ["p", "new"]  # in doubt: computed, judged (agrees: repaired)
        assert runs == ["p"]
        assert cache.stats()["doubt_computes"] == stats["doubt_computes"] + 1

    if store_url == "memory://":
        return  # the store went with its cache
    async with DecisionCache(open_store(store_url), store_timeout=30.0) as plain:

        @cached_prediction(plain, namespace="tokens")
        async def again(prompt: str) -> AsyncGenerator[str, None]:
            yield "never"

        assert [chunk async for chunk in again("p")] == ["p", "new"]  # the repaired entry


async def test_audit_replace_false_keeps_the_stored_decision() -> None:
    answer = {"value": "old"}
    async with DecisionCache(audit_rate=1.0, audit_replace=False) as cache:

        @cached_prediction(cache, namespace="f")
        async def f(x: int) -> str:
            return answer["value"]

        assert await f(1) == "old"
        answer["value"] = "new"
        assert await f(1) == "old"
        await until(lambda: cache.stats()["audits"] == 1)
        assert await f(1) == "old"  # kept: today's behaviour
        await until(lambda: cache.stats()["audits"] == 2)
        stats = cache.stats()
        assert stats["audit_mismatched"] == 2 and stats["repairs"] == 0, stats
        # Measured all the same, without a limit: nothing is doubted.
        report = cache.trust()["f"]
        assert report.serving and report.mismatched == 2 and report.upper > 0.5, report


async def test_an_audit_never_overwrites_a_newer_decision() -> None:
    gate = asyncio.Event()
    answer = {"value": "old"}
    async with DecisionCache(audit_rate=1.0) as cache:

        @cached_prediction(cache)
        async def f(x: int) -> str:
            if answer["value"] == "new":
                await gate.wait()  # the audit's recomputation waits here
            return answer["value"]

        assert await f(1) == "old"
        answer["value"] = "new"
        assert await f(1) == "old"  # a hit; its audit starts and waits
        await until(lambda: getattr(cache.engine.auditor, "running", 0) == 1)
        key = f.key(1)
        # Meanwhile another writer stores a newer decision (record mode's delete + add;
        # not closed here: it shares the store).
        writer = DecisionCache(cache.store, mode="record")
        assert await writer.get_or_compute(key, _constant("newest")) == "newest"
        gate.set()
        await until(lambda: cache.stats()["audits"] == 1)
        await asyncio.sleep(0.01)
        assert cache.stats()["repairs"] == 0
        reader = DecisionCache(cache.store)
        assert await reader.get_or_compute(key, _constant("computed")) == "newest"


def _constant(value: str) -> Callable[[], Any]:
    async def compute() -> str:
        return value

    return compute


async def test_on_breach_may_be_a_coroutine_function() -> None:
    told: list[tuple[str, Any]] = []
    answer = {"value": "old"}

    async def on_breach(namespace: str, report: Any) -> None:
        await asyncio.sleep(0)
        told.append((namespace, report))

    async with DecisionCache(on_breach=on_breach, **TRUST) as cache:

        @cached_prediction(cache, namespace="scored")
        async def f(x: int) -> str:
            return answer["value"]

        await _earn(lambda: f(1), cache)
        answer["value"] = "new"
        assert await f(1) == "old"
        await until(lambda: len(told) == 1)
        [(namespace, report)] = told
        assert namespace == "scored" and not report.serving and report.breaches == 1


async def test_replicas_with_leases_keep_their_own_windows(tmp_path: Path) -> None:
    """Two replicas on one SQLite file, leases on: a breach on one is not the other's."""
    answer = {"value": "old"}
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    options: dict[str, Any] = {**TRUST, "leases": True, "lease_ttl": 30.0}
    async with (
        DecisionCache(open_store(url), **options) as first,
        DecisionCache(open_store(url), **options) as second,
    ):

        def predictor(cache: DecisionCache) -> Any:
            @cached_prediction(cache, namespace="fleet")
            async def f(x: int) -> str:
                return answer["value"]

            return f

        f1, f2 = predictor(first), predictor(second)
        await _earn(lambda: f1(1), first)
        await _earn(lambda: f2(1), second)
        answer["value"] = "new"
        assert await f1(1) == "old"
        await until(lambda: first.stats()["repairs"] == 1)  # under its lease, in place
        assert first.trust()["fleet"].serving is False
        assert second.trust()["fleet"].serving is True  # its own window: no breach
        assert second.stats()["breaches"] == 0
        assert await f2(1) == "new"  # the repaired decision, read through the store
        assert await f1(1) == "new"  # in doubt: computed under the lease, agreeing


async def test_after_a_breach_every_hit_is_audited_until_the_bound_is_under_half() -> None:
    """Audits follow the doubt: at ``audit_rate`` while trusted; after a breach, once
    serving again, every hit until the bound is under half of ``max_wrong_rate``."""
    async with DecisionCache(audit_rate=0.01, max_wrong_rate=0.2, trust_window=60) as cache:
        trust = cache.engine.trust
        assert trust is not None
        for _ in range(20):
            trust.record("ns", True)
        assert cache.trust()["ns"].serving
        assert trust.audit_rate("ns", 0.01) == 0.01  # trusted, never breached
        trust.record("ns", False)
        assert not cache.trust()["ns"].serving and cache.stats()["breaches"] == 1
        rates = []
        while cache.trust()["ns"].upper > 0.1:
            trust.record("ns", True)
            if cache.trust()["ns"].serving:
                rates.append(trust.audit_rate("ns", 0.01))
        assert rates and set(rates[:-1]) == {1.0}, rates  # serving again, every hit audited
        assert trust.audit_rate("ns", 0.01) == 0.01  # under half the limit: the sample again
        assert cache.stats()["breaches"] == 1
