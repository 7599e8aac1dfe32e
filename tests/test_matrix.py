"""Every door behaves the same: a matrix of doors x features, through the public API.

DESIGN.md ("The engine"): every door (single calls, ``.many()``, micro-batching,
the middleware) takes one path, so coalescing, leases, audit, shadow, admit and
the ttl hook behave the same through each. This module checks exactly that.

- A **door** is a class built as ``Door(cache, model, audit=False)`` whose
  ``await door.ask(texts)`` answers every text concurrently through that door
  and returns the model's answers (strings), and ``door.answer_of(value)``
  reads an answer out of a value the cache's hooks see (``ttl``, ``admit``,
  ``on_mismatch``), which for the middleware is the stored response.
- A **feature** is ``async def feature(door, ctx)``: it builds caches, a
  ``Model`` and doors, and asserts on the model's run count, what callers got
  and ``cache.stats()``.

A new door or a new feature is one line in ``DOORS`` or ``FEATURES``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Protocol

import pytest

from asyncache import DecisionCache, DecisionStore, cached_prediction

from .support import free_port, require

# Hang guards (a failure instead of a hung run), never timing assertions.
FEATURE_LIMIT = 60.0
SETTLE_TRIES = 1000  # x 10 ms of polling for a background counter
SETTLE_SLEEP = 0.01


# -- the model -----------------------------------------------------------------


class Model:
    """A model that counts its work and whose answer the test can switch.

    ``runs`` counts items computed (a batch of three counts three), ``passes``
    counts forward passes. The answer is read when a pass starts, so switching
    it while a pass sleeps does not change that pass.
    """

    def __init__(self, answer: str = "A", delay: float = 0.0) -> None:
        self.answer = answer
        self.delay = delay
        self.runs = 0
        self.passes = 0

    async def one(self, text: str) -> str:
        return (await self.batch([text]))[0]

    async def batch(self, texts: Sequence[str]) -> list[str]:
        self.passes += 1
        self.runs += len(texts)
        answer = self.answer
        if self.delay:
            await asyncio.sleep(self.delay)
        return [f"{answer}:{text}" for text in texts]


# -- the doors -----------------------------------------------------------------


class Door(Protocol):
    name: ClassVar[str]
    # True when the door audits only when asked to (``audit=True``): the middleware.
    audit_opt_in: ClassVar[bool]

    async def ask(self, texts: Sequence[str]) -> list[str]: ...

    def answer_of(self, value: Any) -> str: ...

    async def aclose(self) -> None: ...


DoorFactory = Callable[..., Door]


def _text_tags(text: str) -> list[str]:
    """The tags a door with ``tags=True`` gives each decision."""
    return [f"text:{text}", "matrix"]


class DecoratorDoor:
    """``@cached_prediction(cache)`` on ``predict(text)``, called concurrently."""

    name = "decorator"
    audit_opt_in = False

    def __init__(
        self, cache: DecisionCache, model: Model, *, audit: bool = False, tags: bool = False
    ) -> None:
        @cached_prediction(cache, namespace="matrix.predict", tags=_text_tags if tags else None)
        async def predict(text: str) -> str:
            return await model.one(text)

        self.predict = predict

    async def ask(self, texts: Sequence[str]) -> list[str]:
        return list(await asyncio.gather(*(self.predict(text) for text in texts)))

    def answer_of(self, value: Any) -> str:
        return str(value)

    async def aclose(self) -> None:
        pass


class _BatchDoor:
    """``@cached_prediction(cache, batch=True)`` on ``predict(texts) -> list``."""

    audit_opt_in = False

    def __init__(
        self, cache: DecisionCache, model: Model, *, audit: bool = False, tags: bool = False
    ) -> None:
        @cached_prediction(
            cache,
            namespace="matrix.predict_batch",
            batch=True,
            tags=_text_tags if tags else None,
        )
        async def predict(texts: list[str]) -> list[str]:
            return await model.batch(texts)

        self.predict = predict

    def answer_of(self, value: Any) -> str:
        return str(value)

    async def aclose(self) -> None:
        await self.predict.aclose()


class ManyDoor(_BatchDoor):
    """``await predict.many(texts)``: several concurrent ``.many()`` calls of a few items."""

    name = "many"
    CHUNK = 5

    async def ask(self, texts: Sequence[str]) -> list[str]:
        chunks = [list(texts[i : i + self.CHUNK]) for i in range(0, len(texts), self.CHUNK)]
        answers = await asyncio.gather(*(self.predict.many(chunk) for chunk in chunks))
        return [answer for chunk in answers for answer in chunk]


class MicrobatchDoor(_BatchDoor):
    """``await predict(text)`` one item at a time, concurrently: micro-batching."""

    name = "microbatch"

    async def ask(self, texts: Sequence[str]) -> list[str]:
        return list(await asyncio.gather(*(self.predict(text) for text in texts)))


class MiddlewareDoor:
    """A Starlette app behind ``DecisionCacheMiddleware``, driven in-process by httpx."""

    name = "middleware"
    audit_opt_in = True

    def __init__(
        self, cache: DecisionCache, model: Model, *, audit: bool = False, tags: bool = False
    ) -> None:
        import httpx
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        from asyncache.middleware import DecisionCacheMiddleware

        async def predict(request: Request) -> JSONResponse:
            body = await request.json()
            # With tags, the app names them the way apps do: a Cache-Tag header.
            headers = {"Cache-Tag": ", ".join(_text_tags(body["text"]))} if tags else None
            return JSONResponse({"answer": await model.one(body["text"])}, headers=headers)

        app = Starlette(routes=[Route("/predict", predict, methods=["POST"])])
        # Auditing through the middleware is opt-in; the keyword is passed only when asked
        # for, so that rows not about audits do not depend on it.
        options: dict[str, Any] = {"audit": True} if audit else {}
        self.app = DecisionCacheMiddleware(app, cache=cache, routes=["/predict"], **options)
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app), base_url="http://matrix.test"
        )

    async def ask(self, texts: Sequence[str]) -> list[str]:
        responses = await asyncio.gather(
            *(self.client.post("/predict", json={"text": text}) for text in texts)
        )
        for response in responses:
            assert response.status_code == 200, (response.status_code, response.text)
        return [response.json()["answer"] for response in responses]

    def answer_of(self, value: Any) -> str:
        """The answer in a response as the cache's hooks see it.

        The stored form is ``[status, [[name, value], ...], body, length_at]`` with a
        Latin-1 body (docs/middleware.md); a ``StoredResponse`` has ``json()``.
        """
        if isinstance(value, str):
            return value
        if hasattr(value, "json") and callable(value.json):
            return str(value.json()["answer"])
        if isinstance(value, list | tuple) and len(value) in (3, 4):
            body = value[2]
            raw = body.encode("latin-1") if isinstance(body, str) else bytes(body)
            return str(json.loads(raw)["answer"])
        if isinstance(value, bytes):
            return str(json.loads(value)["answer"])
        return repr(value)

    async def aclose(self) -> None:
        await self.client.aclose()


# One line per door.
DOORS = [
    pytest.param(DecoratorDoor, id="decorator"),
    pytest.param(ManyDoor, id="many"),
    pytest.param(MicrobatchDoor, id="microbatch"),
    pytest.param(MiddlewareDoor, id="middleware"),
]


# -- helpers -------------------------------------------------------------------


@dataclass
class Ctx:
    """What a feature may need besides the door: a directory and the session's fixtures."""

    tmp_path: Path
    request: pytest.FixtureRequest
    stack: AsyncExitStack

    def fixture(self, name: str) -> Any:
        return self.request.getfixturevalue(name)

    async def cache(self, store: DecisionStore | None = None, **options: Any) -> DecisionCache:
        """A cache closed when the feature ends."""
        return await self.stack.enter_async_context(DecisionCache(store, **options))

    async def door(
        self, factory: DoorFactory, cache: DecisionCache, model: Model, **options: Any
    ) -> Door:
        """A door closed when the feature ends (before its cache)."""
        door = factory(cache, model, **options)
        self.stack.push_async_callback(door.aclose)
        return door


async def settle(condition: Callable[[], bool]) -> bool:
    """Poll a counter other tasks move, a bounded number of short sleeps; never hangs."""
    for _ in range(SETTLE_TRIES):
        if condition():
            return True
        await asyncio.sleep(SETTLE_SLEEP)
    return condition()


async def let_background_run(turns: int = 20) -> None:
    """Give background tasks (audits, renewals) a chance to start and finish."""
    for _ in range(turns):
        await asyncio.sleep(SETTLE_SLEEP)


def mentions(inputs: Any, text: str) -> bool:
    """Whether ``text`` appears in the inputs a hook received (a dict, an item, a request)."""
    if inputs == text:
        return True
    if isinstance(inputs, str):
        return text in inputs
    if isinstance(inputs, bytes):
        return text.encode() in inputs
    if isinstance(inputs, dict):
        return any(mentions(value, text) for value in inputs.values())
    if isinstance(inputs, list | tuple):
        return any(mentions(value, text) for value in inputs)
    return False


def counters(*caches: DecisionCache) -> dict[str, Any]:
    """The numeric counters of every cache, summed (the fleet's view)."""
    total: dict[str, Any] = {}
    for cache in caches:
        for name, value in cache.stats().items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                total[name] = total.get(name, 0) + value
    return total


# -- the features --------------------------------------------------------------


async def coalescing(door: DoorFactory, ctx: Ctx) -> None:
    """20 identical concurrent calls with a slow model run it once; all get one answer."""
    model = Model(delay=0.2)
    cache = await ctx.cache()
    d = await ctx.door(door, cache, model)
    answers = await d.ask(["same"] * 20)
    assert answers == ["A:same"] * 20
    assert model.runs == 1, f"the model ran {model.runs} times for one key"
    stats = cache.stats()
    assert stats["hits"] + stats["misses"] == 20, stats
    assert stats["coalesced"] >= 1, stats
    assert stats["stores"] == 1, stats


def _lease_stores(kind: str, ctx: Ctx) -> tuple[DecisionStore, DecisionStore]:
    """Two store objects on one shared backend: two replicas' views of it."""
    if kind == "sqlite":
        from asyncache.stores.sqlite import SQLiteStore

        path = ctx.tmp_path / "fleet.db"
        # A contended host: writers wait for the lock rather than fail over to computing.
        return SQLiteStore(path, busy_timeout=30), SQLiteStore(path, busy_timeout=30)
    require(importlib.util.find_spec("redis") is not None, "redis-py is not installed")
    from asyncache.stores.redis import RedisStore

    url: str = ctx.fixture("redis_url")
    prefix: str = ctx.fixture("redis_prefix")
    return RedisStore.from_url(url, prefix=prefix), RedisStore.from_url(url, prefix=prefix)


async def leases(kind: str, door: DoorFactory, ctx: Ctx) -> None:
    """Two replicas (two caches, two stores on one backend) with leases: one run in total."""
    model = Model(delay=0.3)  # one model for the fleet: it counts every replica's runs
    first_store, second_store = _lease_stores(kind, ctx)
    # The replicas are up before the burst: each store opens (and SQLite creates its schema)
    # one after the other. Two SQLiteStores opening a fresh file at the same instant can fail
    # with "database is locked", which is not what this row is about.
    for store in (first_store, second_store):
        await store.count()
    # Generous store timeouts: a lease call timing out computes without a lease (correctly).
    first = await ctx.cache(first_store, leases=True, lease_ttl=30, store_timeout=30)
    second = await ctx.cache(second_store, leases=True, lease_ttl=30, store_timeout=30)
    a = await ctx.door(door, first, model)
    b = await ctx.door(door, second, model)
    answers_a, answers_b = await asyncio.gather(a.ask(["burst"] * 10), b.ask(["burst"] * 10))
    assert answers_a + answers_b == ["A:burst"] * 20
    assert model.runs == 1, f"the fleet ran the model {model.runs} times for one key"
    stats = counters(first, second)
    assert stats["lease_waits"] >= 1 or stats["hits"] >= 1, stats
    assert stats["errors"] == 0, stats


async def audit(door: DoorFactory, ctx: Ctx) -> None:
    """A hit is audited in the background; a changed model is a reported mismatch."""
    mismatches: list[tuple[Any, Any, Any]] = []
    model = Model()
    cache = await ctx.cache(audit_rate=1.0, on_mismatch=lambda *seen: mismatches.append(seen))
    d = await ctx.door(door, cache, model, audit=True)
    assert await d.ask(["audited"]) == ["A:audited"]  # computed and stored
    model.answer = "B"  # the model changed; the cache still holds A
    assert await d.ask(["audited"]) == ["A:audited"]  # a hit serves what was stored
    await settle(lambda: cache.stats()["audits"] >= 1 and len(mismatches) >= 1)
    stats = cache.stats()
    assert stats["audits"] == 1, stats
    assert stats["audit_mismatched"] == 1, stats
    assert stats["audit_agreed"] == 0, stats
    assert model.runs == 2  # the fill, then the audit's recomputation
    assert len(mismatches) == 1, mismatches
    inputs, stored, fresh = mismatches[0]
    assert mentions(inputs, "audited"), inputs
    assert d.answer_of(stored) == "A:audited"
    assert d.answer_of(fresh) == "B:audited"


async def audit_without_opt_in(door: DoorFactory, ctx: Ctx) -> None:
    """Without ``audit=True`` a door that needs the opt-in audits nothing; the others do."""
    mismatches: list[tuple[Any, Any, Any]] = []
    model = Model()
    cache = await ctx.cache(audit_rate=1.0, on_mismatch=lambda *seen: mismatches.append(seen))
    d = await ctx.door(door, cache, model)  # no audit=True
    assert await d.ask(["plain"]) == ["A:plain"]
    model.answer = "B"
    assert await d.ask(["plain"]) == ["A:plain"]
    if d.audit_opt_in:
        await let_background_run()
        stats = cache.stats()
        assert stats["audits"] == 0, stats
        assert stats["audits_dropped"] == 0, stats
        assert model.runs == 1
        assert mismatches == []
    else:
        await settle(lambda: cache.stats()["audits"] >= 1)
        assert cache.stats()["audits"] == 1, cache.stats()
        assert model.runs == 2


async def shadow(door: DoorFactory, ctx: Ctx) -> None:
    """Shadow mode computes every call and serves nothing from the store, not even to followers."""
    mismatches: list[tuple[Any, Any, Any]] = []
    model = Model(delay=0.1)
    cache = await ctx.cache(mode="shadow", on_mismatch=lambda *seen: mismatches.append(seen))
    d = await ctx.door(door, cache, model)
    assert await d.ask(["shadowed"]) == ["A:shadowed"]  # fills the store with A
    model.answer = "B"
    answers = await d.ask(["shadowed"] * 5)
    assert answers == ["B:shadowed"] * 5, "a stored decision reached a caller in shadow mode"
    stats = cache.stats()
    assert stats["hits"] == 0, stats
    assert stats["shadow_would_hit"] >= 1, stats
    assert stats["shadow_mismatched"] >= 1, stats
    assert stats["shadow_agreed"] == 0, stats
    assert model.runs >= 2
    assert mismatches, "on_mismatch was not called"
    for inputs, stored, fresh in mismatches:
        assert mentions(inputs, "shadowed"), inputs
        assert d.answer_of(stored) == "A:shadowed"
        assert d.answer_of(fresh) == "B:shadowed"


async def admit_refusal(door: DoorFactory, ctx: Ctx) -> None:
    """``admit`` returning False stores nothing: every call runs the model."""
    seen: list[tuple[Any, Any]] = []

    def admit(inputs: Any, result: Any) -> bool:
        seen.append((inputs, result))
        return False

    model = Model()
    cache = await ctx.cache(admit=admit)
    d = await ctx.door(door, cache, model)
    assert await d.ask(["refused"]) == ["A:refused"]
    assert await d.ask(["refused"]) == ["A:refused"]
    assert model.runs == 2
    stats = cache.stats()
    assert stats["not_admitted"] >= 1, stats
    assert stats["stores"] == 0, stats
    assert stats["hits"] == 0, stats
    assert seen, "the admit hook was not called"
    for inputs, result in seen:
        assert mentions(inputs, "refused"), inputs
        assert d.answer_of(result) == "A:refused"


TTL = 1.0


async def ttl_hook(door: DoorFactory, ctx: Ctx) -> None:
    """The ttl hook sees the computed result; the entry is a hit until it expires."""
    calls: list[tuple[Any, Any]] = []

    def ttl(inputs: Any, result: Any) -> float:
        calls.append((inputs, result))
        return TTL

    model = Model()
    cache = await ctx.cache(ttl=ttl)
    d = await ctx.door(door, cache, model)
    assert await d.ask(["timed"]) == ["A:timed"]
    assert calls, "the ttl hook was not called"
    inputs, result = calls[0]
    assert mentions(inputs, "timed"), inputs
    assert d.answer_of(result) == "A:timed"
    assert await d.ask(["timed"]) == ["A:timed"]
    assert model.runs == 1, "the entry was not a hit right after it was stored"
    assert cache.stats()["hits"] >= 1, cache.stats()
    await asyncio.sleep(TTL * 1.5)  # past the expiry: sleeping never returns early
    assert await d.ask(["timed"]) == ["A:timed"]
    assert model.runs == 2, "the entry was still served after its ttl"


async def ttl_zero(door: DoorFactory, ctx: Ctx) -> None:
    """A ttl hook returning 0 stores nothing."""
    calls: list[tuple[Any, Any]] = []

    def ttl(inputs: Any, result: Any) -> float:
        calls.append((inputs, result))
        return 0

    model = Model()
    cache = await ctx.cache(ttl=ttl)
    d = await ctx.door(door, cache, model)
    assert await d.ask(["untimed"]) == ["A:untimed"]
    assert await d.ask(["untimed"]) == ["A:untimed"]
    assert model.runs == 2
    assert len(calls) >= 2, calls
    stats = cache.stats()
    assert stats["stores"] == 0, stats
    assert stats["not_admitted"] >= 1, stats


async def store_down(door: DoorFactory, ctx: Ctx) -> None:
    """A store that fails every call: every caller still gets the model's answer."""
    require(importlib.util.find_spec("redis") is not None, "redis-py is not installed")
    from asyncache.stores.redis import RedisStore

    # A real RedisStore where nothing listens: every call is a refused connection.
    store = RedisStore.from_url(
        f"redis://127.0.0.1:{free_port()}",
        socket_connect_timeout=0.2,
        socket_timeout=0.2,
        retries=0,
    )
    model = Model(delay=0.05)
    cache = await ctx.cache(store, store_timeout=1.0)
    d = await ctx.door(door, cache, model)
    assert await d.ask(["down"] * 5) == ["A:down"] * 5
    assert await d.ask(["down"]) == ["A:down"]
    assert await d.ask(["other"]) == ["A:other"]
    stats = cache.stats()
    assert stats["errors"] > 0, stats
    assert stats["hits"] == 0, stats
    assert stats["stores"] == 0, stats


def _trust_store(kind: str, ctx: Ctx) -> DecisionStore | None:
    """A fresh store of ``kind`` for one cache (``None``: the cache's own MemoryStore)."""
    if kind == "memory":
        return None
    if kind == "sqlite":
        from asyncache.stores.sqlite import SQLiteStore

        return SQLiteStore(ctx.tmp_path / "trust.db", busy_timeout=30)
    require(importlib.util.find_spec("redis") is not None, "redis-py is not installed")
    from asyncache.stores.redis import RedisStore

    url: str = ctx.fixture("redis_url")
    return RedisStore.from_url(url, prefix=ctx.fixture("redis_prefix"))


# A bound of 20% at 95%: 14 agreeing audits earn trust (docs/audit.md, "Trust").
TRUST = {"audit_rate": 1.0, "max_wrong_rate": 0.2, "trust_window": 20, "store_timeout": 30}
TRUST_TEXTS = [f"trusted-{i}" for i in range(5)]


async def _earn_trust(d: Door, cache: DecisionCache) -> None:
    """Fill, then ask again until the namespace's audits earned trust (a bounded loop)."""
    assert await d.ask(TRUST_TEXTS) == [f"A:{text}" for text in TRUST_TEXTS]
    for _ in range(20):
        reports = cache.trust()
        if reports and all(report.serving for report in reports.values()):
            return
        assert await d.ask(TRUST_TEXTS) == [f"A:{text}" for text in TRUST_TEXTS]
        await let_background_run(2)
    raise AssertionError(f"trust never earned: {cache.trust()} {cache.stats()}")


async def trust_steady(kind: str, door: DoorFactory, ctx: Ctx) -> None:
    """An unchanged model: a cold namespace computes until its audits earn trust, then
    its hits are served (and audited) with no breach."""
    model = Model()
    cache = await ctx.cache(_trust_store(kind, ctx), **TRUST)
    d = await ctx.door(door, cache, model, audit=True)
    await _earn_trust(d, cache)
    earned = cache.stats()
    assert earned["doubt_computes"] >= 14, earned  # the cold namespace computed meanwhile
    for _ in range(3):
        assert await d.ask(TRUST_TEXTS) == [f"A:{text}" for text in TRUST_TEXTS]
    # Each hit is audited, or dropped past audit_concurrency (micro-batched hits come at once).
    sampled = earned["audits"] + earned["audits_dropped"] + 15
    await settle(lambda: cache.stats()["audits"] + cache.stats()["audits_dropped"] >= sampled)
    stats = cache.stats()
    assert stats["doubt_computes"] == earned["doubt_computes"], stats  # served from here on
    assert stats["verified_hits"] >= 15, stats
    assert stats["breaches"] == 0, stats
    assert stats["audit_mismatched"] == 0, stats
    [report] = cache.trust().values()
    assert report.serving and report.mismatched == 0 and report.breaches == 0, report
    assert 14 <= report.audits <= 20 and report.upper <= 0.2, report
    assert stats["wrong_rate_upper"] == report.upper, stats


async def trust_breach(kind: str, door: DoorFactory, ctx: Ctx, coalesce: bool = True) -> None:
    """A changed model: an audit disagrees, the namespace breaches (``on_breach``), the
    audited key is repaired in the store, and calls get the fresh answer while in doubt."""
    breaches: list[tuple[str, Any]] = []
    model = Model()
    store = _trust_store(kind, ctx)
    cache = await ctx.cache(
        store, on_breach=lambda *seen: breaches.append(seen), coalesce=coalesce, **TRUST
    )
    d = await ctx.door(door, cache, model, audit=True)
    await _earn_trust(d, cache)
    model.answer = "B"
    # Trusted: the stored A is served; its audit disagrees, repairs and breaches.
    assert await d.ask(TRUST_TEXTS[:1]) == [f"A:{TRUST_TEXTS[0]}"]
    # The breach is counted when the audit is judged; its repair's write lands next.
    assert await settle(lambda: cache.stats()["repairs"] == 1), cache.stats()
    stats = cache.stats()
    assert stats["breaches"] == 1 and stats["audit_mismatched"] == 1, stats
    [(namespace, report)] = breaches
    assert cache.trust()[namespace].serving is False
    assert report.mismatched >= 1 and report.upper > 0.2 and not report.serving, report
    assert cache.stats()["wrong_rate_upper"] > 0.2
    # In doubt: every call computes, is judged, repairs what disagrees, gets the fresh answer.
    runs = model.runs
    assert await d.ask(TRUST_TEXTS) == [f"B:{text}" for text in TRUST_TEXTS]
    assert model.runs == runs + len(TRUST_TEXTS)
    after = cache.stats()
    assert after["doubt_computes"] >= stats["doubt_computes"] + len(TRUST_TEXTS), after
    assert after["repairs"] >= len(TRUST_TEXTS), after  # every key's A replaced by B
    # The store holds the repaired decisions: a cache without audits serves B.
    if kind == "memory":
        plain = await ctx.cache(cache.store)
    else:
        plain = await ctx.cache(_trust_store(kind, ctx), store_timeout=30)
    reader = await ctx.door(door, plain, Model(answer="C"))
    assert await reader.ask(TRUST_TEXTS) == [f"B:{text}" for text in TRUST_TEXTS]


def _forget_store(kind: str, ctx: Ctx) -> DecisionStore | None:
    """``_trust_store``, and a Redis Cluster for ``cluster``."""
    if kind != "cluster":
        return _trust_store(kind, ctx)
    require(importlib.util.find_spec("redis") is not None, "redis-py is not installed")
    from asyncache.stores.redis import RedisStore

    url: str = ctx.fixture("redis_cluster_url")
    return RedisStore.from_url(url, prefix=ctx.fixture("redis_prefix"))


async def forgetting(kind: str, door: DoorFactory, ctx: Ctx) -> None:
    """Tagged decisions through the door: a forgotten tag is computed again, the rest hit."""
    from asyncache.tags import MARGIN

    model = Model()
    cache = await ctx.cache(_forget_store(kind, ctx))
    d = await ctx.door(door, cache, model, tags=True)
    assert await d.ask(["a", "b", "c"]) == ["A:a", "A:b", "A:c"]
    assert await d.ask(["a", "b", "c"]) == ["A:a", "A:b", "A:c"]
    assert model.runs == 3
    assert await cache.forget(tags=["text:b"]) == 1
    await asyncio.sleep(MARGIN)  # what began before the forget is not stored after it
    model.answer = "B"
    assert await d.ask(["a", "b", "c"]) == ["A:a", "B:b", "A:c"]
    assert model.runs == 4
    assert await cache.forget(tags=["matrix"]) == 3
    assert cache.stats()["forgotten"] == 4
    if kind != "memory":
        await cache.store.clear()


Feature = Callable[[DoorFactory, Ctx], Awaitable[None]]

# One line per feature.
FEATURES = [
    pytest.param(coalescing, id="coalescing"),
    pytest.param(partial(leases, "sqlite"), id="leases-sqlite"),
    pytest.param(partial(leases, "redis"), id="leases-redis", marks=pytest.mark.redis),
    pytest.param(audit, id="audit"),
    pytest.param(audit_without_opt_in, id="audit-without-opt-in"),
    pytest.param(partial(trust_steady, "memory"), id="trust-steady-memory"),
    pytest.param(partial(trust_breach, "memory"), id="trust-breach-memory"),
    pytest.param(partial(trust_breach, "sqlite"), id="trust-breach-sqlite"),
    pytest.param(partial(trust_breach, "sqlite", coalesce=False), id="trust-breach-uncoalesced"),
    pytest.param(partial(trust_steady, "redis"), id="trust-steady-redis", marks=pytest.mark.redis),
    pytest.param(partial(trust_breach, "redis"), id="trust-breach-redis", marks=pytest.mark.redis),
    pytest.param(shadow, id="shadow"),
    pytest.param(admit_refusal, id="admit-refusal"),
    pytest.param(ttl_hook, id="ttl-hook"),
    pytest.param(ttl_zero, id="ttl-zero"),
    pytest.param(store_down, id="store-down"),
    pytest.param(partial(forgetting, "memory"), id="forget-memory"),
    pytest.param(partial(forgetting, "sqlite"), id="forget-sqlite"),
    pytest.param(partial(forgetting, "redis"), id="forget-redis", marks=pytest.mark.redis),
    pytest.param(partial(forgetting, "cluster"), id="forget-cluster", marks=pytest.mark.redis),
]


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("feature", FEATURES)
async def test_matrix(
    feature: Feature, door: DoorFactory, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with AsyncExitStack() as stack:
        ctx = Ctx(tmp_path=tmp_path, request=request, stack=stack)
        async with asyncio.timeout(FEATURE_LIMIT):
            await feature(door, ctx)
