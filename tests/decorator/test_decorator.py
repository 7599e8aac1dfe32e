"""decorator.py: @cached_prediction binds arguments, keeps the signature and types."""

from __future__ import annotations

import asyncio
import functools
import inspect
import math
from typing import Any

import numpy as np
import pytest

from asyncache import DecisionCache, Entry, MemoryStore, cached_prediction
from asyncache.keys import make_key


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def cache(store: MemoryStore) -> DecisionCache:
    return DecisionCache(store, fingerprint="model@1")


class Counter:
    def __init__(self) -> None:
        self.calls: list[Any] = []


# -- binding ---------------------------------------------------------------


async def test_positional_keyword_and_default_calls_share_a_key(cache: DecisionCache) -> None:
    seen = Counter()

    @cached_prediction(cache)
    async def classify(text: str, threshold: float = 0.5) -> dict[str, Any]:
        seen.calls.append((text, threshold))
        return {"text": text, "threshold": threshold}

    calls = [
        classify("hi"),
        classify("hi", 0.5),
        classify(text="hi"),
        classify("hi", threshold=0.5),
        classify(threshold=0.5, text="hi"),
    ]
    results = [await call for call in calls]
    assert seen.calls == [("hi", 0.5)]
    assert all(result == {"text": "hi", "threshold": 0.5} for result in results)
    keys = {
        classify.key("hi"),
        classify.key(text="hi"),
        classify.key("hi", 0.5),
        classify.key(threshold=0.5, text="hi"),
    }
    assert len(keys) == 1
    assert classify.key("hi", 0.7) not in keys
    assert classify.key("hi", 1) != classify.key("hi", 1.0)  # 1 and 1.0 stay apart
    await classify("hi", 0.7)
    assert seen.calls == [("hi", 0.5), ("hi", 0.7)]


async def test_key_is_the_bound_arguments_under_the_namespace_and_fingerprint(
    cache: DecisionCache, store: MemoryStore
) -> None:
    @cached_prediction(cache)
    async def classify(text: str, threshold: float = 0.5) -> str:
        return "ok"

    # module.qualname by default
    assert classify.namespace.startswith(f"{__name__}.test_key_is_the_bound_arguments")
    assert classify.namespace.endswith(".<locals>.classify")
    expected = make_key(classify.namespace, "model@1", None, {"text": "a", "threshold": 0.5})
    assert classify.key("a") == expected
    await classify("a")
    assert store.get_now(expected) is not None


async def test_keyword_only_parameters(cache: DecisionCache) -> None:
    seen = Counter()

    @cached_prediction(cache)
    async def rank(query: str, *, top_k: int = 3, lang: str = "en") -> list[str]:
        seen.calls.append((query, top_k, lang))
        return [query] * top_k

    assert await rank("q") == ["q", "q", "q"]
    assert await rank("q", top_k=3) == ["q", "q", "q"]
    assert await rank(query="q", lang="en") == ["q", "q", "q"]
    assert await rank("q", top_k=1) == ["q"]
    assert seen.calls == [("q", 3, "en"), ("q", 1, "en")]
    with pytest.raises(TypeError):
        await rank("q", 1)  # type: ignore[misc]


async def test_var_positional_and_var_keyword_functions(cache: DecisionCache) -> None:
    seen = Counter()

    @cached_prediction(cache)
    async def embed(model: str, *texts: str, normalize: bool = True, **options: Any) -> int:
        seen.calls.append((model, texts, normalize, options))
        return len(seen.calls)

    assert await embed("m", "a", "b", pool="mean") == 1
    assert await embed("m", "a", "b", normalize=True, pool="mean") == 1
    assert await embed(model="m", pool="mean") == 2  # no texts is another call
    assert await embed("m", "b", "a", pool="mean") == 3  # order of *texts matters
    assert await embed("m", "a", "b", pool="max") == 4
    assert await embed("m", "a", "b", pool="mean", extra=None) == 5
    assert embed.key("m", "a", "b", pool="mean") == embed.key(
        "m", "a", "b", pool="mean", normalize=True
    )


async def test_positional_only_parameters(cache: DecisionCache) -> None:
    @cached_prediction(cache)
    async def score(text: str, /, scale: float = 1.0) -> float:
        return len(text) * scale

    assert await score("abc") == 3.0
    assert score.key("abc") == score.key("abc", scale=1.0) == score.key("abc", 1.0)
    with pytest.raises(TypeError):
        await score(text="abc")  # type: ignore[call-arg]


async def test_bad_calls_raise_pythons_own_type_error(cache: DecisionCache) -> None:
    @cached_prediction(cache)
    async def classify(text: str, threshold: float = 0.5) -> str:
        return "never"

    for args, kwargs in (
        ((), {}),
        (("a", 0.5, 9), {}),
        (("a",), {"text": "b"}),
        (("a",), {"other": 1}),
    ):
        with pytest.raises(TypeError):
            await classify(*args, **kwargs)
    assert cache.stats()["misses"] == 0


# -- methods, ignore, key, scope, fingerprint ------------------------------


async def test_methods_share_across_instances_with_ignore_self(cache: DecisionCache) -> None:
    class Model:
        def __init__(self, name: str) -> None:
            self.name = name
            self.calls = 0

        @cached_prediction(cache, ignore=("self",))
        async def predict(self, text: str) -> str:
            self.calls += 1
            return f"{self.name}:{text}"

    first, second = Model("first"), Model("second")
    assert await first.predict("hi") == "first:hi"
    # ignore=("self",) says the instances hold one model: they share its decisions.
    assert await second.predict("hi") == "first:hi"
    assert await second.predict(text="hi") == "first:hi"
    assert (first.calls, second.calls) == (1, 0)
    assert Model.predict.key(first, "hi") == Model.predict.key(second, "hi")
    assert await Model.predict.uncached(second, "hi") == "second:hi"
    assert Model.predict.cache is cache


async def test_ignore_leaves_parameters_out_of_the_key(cache: DecisionCache) -> None:
    seen = Counter()

    @cached_prediction(cache, ignore=("request_id", "log"))
    async def classify(text: str, request_id: str, log: Any = None) -> str:
        seen.calls.append(request_id)
        return text.upper()

    assert await classify("a", "r1") == "A"
    assert await classify("a", "r2", log=print) == "A"
    assert await classify("a", request_id="r3") == "A"
    assert seen.calls == ["r1"]
    assert classify.key("a", "r1") == classify.key("a", "r9", object())
    with pytest.raises(ValueError, match="nope"):
        cached_prediction(cache, ignore=("nope",))(classify.__wrapped__)


async def test_ignore_makes_an_unkeyable_argument_usable(cache: DecisionCache) -> None:
    @cached_prediction(cache)
    async def unkeyed(text: str, session: object) -> str:
        return text

    with pytest.raises(TypeError, match=r"argument 'session'.*key=.*ignore="):
        await unkeyed("a", object())

    @cached_prediction(cache, ignore=("session",))
    async def keyed(text: str, session: object) -> str:
        return text

    assert await keyed("a", object()) == "a"


async def test_key_function_says_what_identifies_the_call(cache: DecisionCache) -> None:
    seen = Counter()

    @cached_prediction(cache, key=lambda text, **_: text.strip().lower())
    async def classify(text: str, trace: bool = False) -> str:
        seen.calls.append(text)
        return "spam"

    assert await classify("  Buy NOW ") == "spam"
    assert await classify("buy now", trace=True) == "spam"
    assert seen.calls == ["  Buy NOW "]
    assert classify.key("BUY NOW") == make_key(classify.namespace, "model@1", None, "buy now")


async def test_scope_keeps_tenants_apart(cache: DecisionCache) -> None:
    seen = Counter()

    @cached_prediction(cache, ignore=("user",), scope=lambda text, user: user["tenant"])
    async def classify(text: str, user: dict[str, str]) -> str:
        seen.calls.append(user["tenant"])
        return f"for {user['tenant']}"

    alice, bob, carol = {"tenant": "a"}, {"tenant": "b"}, {"tenant": "a", "name": "carol"}
    assert await classify("x", alice) == "for a"
    assert await classify("x", bob) == "for b"
    assert await classify("x", carol) == "for a"  # same tenant: shared
    assert seen.calls == ["a", "b"]
    assert classify.key("x", alice) != classify.key("x", bob)
    assert classify.key("x", alice) == make_key(classify.namespace, "model@1", "a", {"text": "x"})


async def test_namespace_and_fingerprint_options(cache: DecisionCache) -> None:
    @cached_prediction(cache, namespace="classify")
    async def first(text: str) -> str:
        return "first"

    @cached_prediction(cache, namespace="classify")
    async def second(text: str) -> str:
        return "second"

    @cached_prediction(cache, namespace="classify", fingerprint="model@2")
    async def retrained(text: str) -> str:
        return "retrained"

    assert await first("x") == "first"
    assert await second("x") == "first"  # a pinned namespace shares decisions
    assert await retrained("x") == "retrained"  # another model: another key
    assert first.key("x") == second.key("x") != retrained.key("x")


# -- helpers and the wrapper ----------------------------------------------


async def test_uncached_runs_the_function_without_the_cache(
    cache: DecisionCache, store: MemoryStore
) -> None:
    seen = Counter()

    @cached_prediction(cache)
    async def classify(text: str) -> str:
        seen.calls.append(text)
        return text

    await classify("a")
    before = cache.stats()
    assert await classify.uncached("a") == "a"
    assert await classify.uncached(text="b") == "b"
    assert seen.calls == ["a", "a", "b"]
    assert cache.stats() == before and len(store) == 1
    assert classify.cache is cache


async def test_wrapper_keeps_name_doc_signature_and_is_a_coroutine_function(
    cache: DecisionCache,
) -> None:
    async def classify(text: str, *, threshold: float = 0.5) -> dict[str, float]:
        """Classify ``text``."""
        return {}

    wrapped = cached_prediction(cache)(classify)
    assert inspect.signature(wrapped) == inspect.signature(classify)
    assert wrapped.__name__ == "classify" and wrapped.__doc__ == "Classify ``text``."
    assert wrapped.__wrapped__ is classify
    assert inspect.iscoroutinefunction(wrapped)
    assert functools.WRAPPER_ASSIGNMENTS  # what wraps copies
    assert wrapped.__annotations__ == classify.__annotations__


def test_a_sync_function_without_offload_is_a_type_error(cache: DecisionCache) -> None:
    def predict(text: str) -> str:
        return text

    with pytest.raises(TypeError, match="offload"):
        cached_prediction(cache)(predict)


# -- what comes back -------------------------------------------------------


def _same_types(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_types(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same_types(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


RESULTS: list[Any] = [
    {"label": "spam", "score": 0.973, "tokens": [1, 2, 3], "flags": {"a": True, "b": None}},
    np.arange(6, dtype=np.float32).reshape(2, 3),
    {"logits": np.array([[0.1, -2.5]], dtype=np.float16), "ids": np.int64(7)},
    [b"raw", math.nan, math.inf, -0.0, 2**70],
    "plain",
    None,
]


@pytest.mark.parametrize("result", RESULTS, ids=lambda result: type(result).__name__)
async def test_a_miss_and_a_later_hit_return_equal_values_of_the_same_types(
    cache: DecisionCache, result: Any
) -> None:
    @cached_prediction(cache)
    async def predict(text: str) -> Any:
        return result

    miss = await predict("x")
    hit = await predict("x")
    assert cache.stats()["hits"] == 1
    assert _same_types(miss, hit)
    assert _same_types(hit, result)


async def test_tuples_come_back_as_lists_on_miss_and_hit_alike(cache: DecisionCache) -> None:
    @cached_prediction(cache)
    async def predict(text: str) -> Any:
        return ("label", (1, 2))

    # Documented: stored decisions are JSON, which has one sequence type.
    assert await predict("x") == ["label", [1, 2]]
    assert await predict("x") == ["label", [1, 2]]


async def test_unstorable_results_come_back_as_they_are(cache: DecisionCache) -> None:
    marker = object()

    @cached_prediction(cache)
    async def predict(text: str) -> Any:
        return marker

    assert await predict("x") is marker
    assert await predict("x") is marker
    assert cache.stats()["unencodable"] == 2


async def test_callers_may_mutate_what_they_get(cache: DecisionCache) -> None:
    @cached_prediction(cache)
    async def predict(text: str) -> dict[str, list[int]]:
        await asyncio.sleep(0)
        return {"ids": [1, 2]}

    first, second = await asyncio.gather(predict("x"), predict("x"))
    first["ids"].append(3)
    assert second == {"ids": [1, 2]}
    third = await predict("x")
    third["ids"].append(4)
    assert await predict("x") == {"ids": [1, 2]}


# -- the wrapper's own hit path -------------------------------------------


async def test_a_corrupt_entry_is_recomputed_counted_once_and_replaced(
    cache: DecisionCache, store: MemoryStore
) -> None:
    seen = Counter()

    @cached_prediction(cache)
    async def classify(text: str) -> str:
        seen.calls.append(text)
        return "fresh"

    store.put_now(classify.key("a"), Entry(b"\x10{broken", None))
    assert await classify("a") == "fresh"
    assert await classify("a") == "fresh"
    assert seen.calls == ["a"]
    stats = cache.stats()
    assert (stats["corrupt"], stats["misses"], stats["hits"]) == (1, 1, 1)


async def test_a_disabled_cache_runs_the_function_every_time(store: MemoryStore) -> None:
    cache = DecisionCache(store)
    seen = Counter()

    @cached_prediction(cache)
    async def classify(text: str) -> str:
        seen.calls.append(text)
        return "x"

    await classify("a")
    cache.enabled = False  # switched off at run time: even a stored decision is not used
    await classify("a")
    await classify("a")
    assert seen.calls == ["a", "a", "a"]
    assert cache.stats()["bypassed"] == 2


async def test_hits_through_the_wrapper_renew_and_save_compute_time(store: MemoryStore) -> None:
    cache = DecisionCache(store, ttl=160.0, renew_on_hit=True)

    @cached_prediction(cache)
    async def classify(text: str) -> str:
        return "x"

    await classify("a")
    key = classify.key("a")
    entry = store.get_now(key)
    assert entry is not None and entry.expires_at is not None
    store.put_now(key, Entry(entry.value, entry.expires_at - 50))  # stored 50 s ago
    await classify("a")
    for _ in range(1000):  # the renewal runs in the background
        if cache.stats()["renewals"]:
            break
        await asyncio.sleep(0)
    renewed = store.get_now(key)
    assert renewed is not None and renewed.expires_at is not None
    assert renewed.expires_at > entry.expires_at
    assert cache.stats()["renewals"] == 1
    assert cache.stats()["compute_seconds_saved"] > 0


async def test_a_bound_method_passes_its_instance_to_key_and_uncached() -> None:
    cache = DecisionCache()
    runs: list[str] = []

    class Model:
        fingerprint = "model-v1"

        @cached_prediction(cache)
        async def predict(self, text: str, k: int = 1) -> str:
            runs.append(text)
            return text * k

    model = Model()
    assert await model.predict("a") == "a"
    assert await model.predict("a", 1) == "a"
    assert runs == ["a"]
    # The instance is bound: key() takes the same arguments as the call.
    assert model.predict.key("a") == Model.predict.key(model, "a") == model.predict.key(text="a")
    assert model.predict.key("a") != model.predict.key("a", 2)
    assert await model.predict.uncached("a") == "a"
    assert runs == ["a", "a"]
    assert model.predict.cache is cache
    assert model.predict.namespace.endswith("Model.predict")
    assert inspect.iscoroutinefunction(model.predict)
