"""Cached methods: an instance keys by its model's fingerprint, never by accident of sharing."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from asyncache import DecisionCache, MethodWarning, cached_prediction

from ..support import require


def _model_class(cache: DecisionCache, **options: Any) -> type:
    class Model:
        def __init__(self, name: str, fingerprint: Any = None) -> None:
            self.name = name
            self.calls = 0
            if fingerprint is not None:
                self.fingerprint = fingerprint

        @cached_prediction(cache, **options)
        async def predict(self, text: str) -> str:
            self.calls += 1
            return f"{self.name}:{text}"

    return Model


async def test_instances_with_different_fingerprints_never_share() -> None:
    async with DecisionCache() as cache:
        model = _model_class(cache)
        two, three, again = model("two", "m2"), model("three", "m3"), model("again", "m2")
        assert await two.predict("x") == "two:x"
        assert await three.predict("x") == "three:x"
        # The same model in another instance (another replica) shares the decision.
        assert await again.predict("x") == "two:x"
        assert (two.calls, three.calls, again.calls) == (1, 1, 0)
        assert two.predict.key("x") != three.predict.key("x")
        assert two.predict.key("x") == again.predict.key("x")


async def test_cache_fingerprint_wins_and_may_be_a_method() -> None:
    async with DecisionCache() as cache:

        class Service:
            fingerprint = "ignored"

            def __init__(self, revision: str) -> None:
                self.revision = revision

            def __cache_fingerprint__(self) -> dict[str, str]:
                return {"model": "triage", "revision": self.revision}

            @cached_prediction(cache)
            async def predict(self, text: str) -> str:
                return f"{self.revision}:{text}"

        assert await Service("r1").predict("a") == "r1:a"
        assert await Service("r2").predict("a") == "r2:a"
        assert await Service("r1").predict("a") == "r1:a"
        assert cache.stats()["hits"] == 1


async def test_a_service_holding_an_adapter_keys_by_the_adapters_fingerprint() -> None:
    require(_has("torch"), "needs torch")
    import torch

    from asyncache.adapters.torch import TorchModel

    async with DecisionCache() as cache:

        class Service:
            def __init__(self, seed: int) -> None:
                torch.manual_seed(seed)
                self.model = TorchModel(torch.nn.Linear(2, 1))

            @cached_prediction(cache)
            async def predict(self, x: float) -> float:
                [out] = self.model.predict_batch([[x, x]])
                return float(out[0])

        first, other, same = Service(1), Service(2), Service(1)
        assert first.model.fingerprint != other.model.fingerprint
        assert await first.predict(1.0) != await other.predict(1.0)
        assert await same.predict(1.0) == await first.predict(1.0)
        assert cache.stats()["hits"] == 2


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


async def test_an_instance_without_a_fingerprint_warns_once_and_is_not_shared() -> None:
    async with DecisionCache() as cache:
        model = _model_class(cache)
        first, second = model("first"), model("second")
        with pytest.warns(MethodWarning) as caught:
            assert await first.predict("x") == "first:x"
        [warning] = caught
        message = str(warning.message)
        assert "Model" in message and "predict" in message
        assert "key=" in message and 'ignore=("self",)' in message
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once per class: no second warning
            assert await second.predict("x") == "second:x"
            assert await first.predict("x") == "first:x"  # its own entry, a hit
        assert (first.calls, second.calls) == (1, 1)
        assert cache.stats()["hits"] == 1


async def test_a_dead_instances_entries_are_not_inherited() -> None:
    """A token per instance, not its id(): a new object at a freed address is another model."""
    async with DecisionCache() as cache:
        model = _model_class(cache)
        keys = set()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MethodWarning)
            for index in range(50):
                instance = model(str(index))
                keys.add(instance.predict.key("x"))
                await instance.predict("x")
                del instance
        assert len(keys) == 50
        assert cache.stats()["hits"] == 0


async def test_key_or_ignore_self_say_what_is_meant_without_a_warning() -> None:
    async with DecisionCache() as cache:
        shared = _model_class(cache, ignore=("self",))
        by_text = _model_class(cache, key=lambda self, text: text, namespace="by-text")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert await shared("a").predict("x") == "a:x"
            assert await shared("b").predict("x") == "a:x"
            assert await by_text("c").predict("x") == "c:x"
            assert await by_text("d").predict(text="x") == "c:x"
