"""recent.py: remembered keys are the keys, and remembered results are never shared."""

from __future__ import annotations

import math
from typing import Any

import pytest

from asyncache import DecisionCache, MemoryStore, cached_prediction
from asyncache.engine._memo import MADE_BYTES, RecentValues, copier
from asyncache.keys import KEY_BYTES, KeyBuilder, RecentKeys

from ..support.inputs import Color

INPUTS: list[Any] = [
    {"x": None},
    {"x": math.nan},
    {"x": math.inf},
    {"x": -math.inf},
    {"x": 1},
    {"x": 1.0},
    {"x": True},
    {"x": "1"},
    {"x": b"1"},
    {"x": [1, 2]},
    {"x": (1, 2)},
    {"x": {"b": 1, "a": 2}},
    {"x": {"a": 2, "b": 1}},
    {"x": "\x00str"},
    {"x": Color.RED},
    {"x": "red"},
    {"x": 2**70},
    {"x": {1, 2}},
    {"x": "y" * (KEY_BYTES * 2)},
    {"x": ["null", None]},
]


def test_remembered_keys_are_the_builders_keys() -> None:
    builder = KeyBuilder("ns", "model@1")
    recent = RecentKeys(builder)
    for _ in range(3):  # remembered on the first round, found on the others
        for inputs in INPUTS:
            assert recent.key(inputs) == builder.key(inputs), inputs
    # None and NaN encode alike in plain JSON; their keys stay apart.
    assert recent.key({"x": None}) != recent.key({"x": math.nan})


def test_an_input_that_cannot_be_keyed_is_refused_alike() -> None:
    recent = RecentKeys(KeyBuilder("ns", None))
    with pytest.raises(TypeError, match="argument 'x'"):
        recent.key({"x": object()})


def test_copiers_copy_what_is_mutable() -> None:
    assert copier("text") is not None and copier(None) is not None
    listed = copier(["a", 1])
    assert listed is not None
    value = ["a", 1]
    assert listed(value) == value and listed(value) is not value
    assert copier([["nested"]]) is None and copier({"a": [1]}) is None


async def test_no_caller_gets_an_object_another_caller_holds() -> None:
    cache = DecisionCache(MemoryStore())
    calls = 0

    @cached_prediction(cache)
    async def answer(text: str) -> Any:
        nonlocal calls
        calls += 1
        results = {"flat": ["a", "b"], "scores": {"x": 1.0}, "nested": {"a": [1, 2]}}
        return results[text] if text else "text"

    for text in ("", "flat", "scores", "nested"):
        first = await answer(text)
        second = await answer(text)
        second_again = await answer(text)
        assert first == second == second_again
        if isinstance(second, str):
            continue  # immutable: it may be the same object
        assert second is not second_again and first is not second
        second.append("mutated") if isinstance(second, list) else second.update(y=2)
        if isinstance(first, dict) and "a" in first:
            second_again["a"].append(3)
        assert await answer(text) == first
    assert calls == 4 and cache.stats()["hits"] == 11


async def test_a_replaced_entry_is_decoded_afresh() -> None:
    cache = DecisionCache(MemoryStore())
    value = ["old"]

    @cached_prediction(cache)
    async def answer(text: str) -> list[str]:
        return list(value)

    assert await answer("q") == ["old"]
    assert await answer("q") == ["old"]  # remembered now
    await cache.store.clear()
    value = ["new"]
    assert await answer("q") == ["new"]
    assert await answer("q") == ["new"]


def test_what_a_caller_made_is_handed_only_to_callers_asking_with_it() -> None:
    def made(result: Any) -> tuple[str, Any]:
        return ("made", result)

    def other(result: Any) -> tuple[str, Any]:
        return ("other", result)

    recent = RecentValues()
    stored = b"the stored bytes"
    recent.keep(b"k", stored, made([1, 2]), 0.5, 60.0, made)
    got = recent.get(b"k", stored, made)
    assert got is not None
    assert (got[0], got[1].saved, got[1].ttl) == (("made", [1, 2]), 0.5, 60.0)
    assert recent.get(b"k", stored) is None  # a decoding caller never gets it
    assert recent.get(b"k", stored, other) is None
    assert recent.get(b"k", b"the stored bytes!"[:-1], made) is None  # other bytes, equal value
    large = b"x" * (MADE_BYTES + 1)
    recent.keep(b"big", large, made("v"), 0.0, None, made)
    assert recent.get(b"big", large, made) is None  # past the bound: made on every hit


async def test_the_engines_hit_hands_what_was_made_only_to_its_maker_for_the_same_bytes() -> None:
    # Engine.hit_now reads RecentValues' records itself (the hot case, without a call).
    cache = DecisionCache()
    engine = cache.engine
    key = b"k" * 32
    await cache.store_result(key, [1, 2])

    def made(result: Any) -> list[Any]:
        return ["made", result]

    def other(result: Any) -> list[Any]:
        return ["other", result]

    first = engine.hit_now(key, made)
    assert first == ["made", [1, 2]] and engine.hit_now(key, made) is first
    assert engine.hit_now(key, other) == ["other", [1, 2]]
    assert engine.hit_now(key, made) is not first  # the other maker's replaced it: made anew
    decoded = engine.hit_now(key)
    assert decoded == [1, 2] and decoded is not engine.hit_now(key)  # a mutable list: copied
    again = engine.hit_now(key, made)
    await cache.store.delete(key)
    await cache.store_result(key, [1, 2])  # equal value, other bytes
    assert engine.hit_now(key, made) == again and engine.hit_now(key, made) is not again
    await cache.store.delete(key)
    await cache.store_result(key, [3])
    assert engine.hit_now(key, made) == ["made", [3]]
    assert engine.stats.hits == 10  # every call above was a hit
