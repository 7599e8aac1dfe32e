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


def _keys_as_the_builder(inputs_list: list[Any]) -> RecentKeys:
    builder = KeyBuilder("ns", "model@1")
    recent = RecentKeys(builder)
    for _ in range(3):  # remembered on the first round, found on the others
        for inputs in inputs_list:
            assert recent.key(inputs) == builder.key(inputs), inputs
    return recent


def test_remembered_keys_are_the_builders_keys() -> None:
    recent = _keys_as_the_builder(INPUTS)
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
    copy, kept = listed
    value = ["a", 1]
    assert copy(kept) == value and copy(kept) is not copy(kept)
    # Nested JSON: parsed afresh for each caller, so nothing inside is shared either.
    for nested in ([["nested"]], {"a": [1]}, {"answers": [True, False], "n": {"x": 1.5}}):
        how = copier(nested)
        assert how is not None
        copy, kept = how
        first, second = copy(kept), copy(kept)
        assert first == second == nested and type(first) is type(nested)
        assert first is not second and next(
            iter(first.values() if isinstance(first, dict) else first)
        ) is not next(iter(second.values() if isinstance(second, dict) else second))
    # What JSON would not read back as itself is decoded on every hit.
    for odd in ([(1, 2)], {"a": [math.nan]}, {"a": [2**70]}, [[b"x"]], {"a": {1: 2}}):
        assert copier(odd) is None, odd


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
    recent.keep(b"big", large, made("v"), 0.0, None, made, decoded="v")
    assert recent.get(b"big", large, made) is None  # past the bound: made on every hit
    # Small stored bytes that inflate large (a compressed answer): bounded by what they hold.
    small = b"compressed"
    inflated = "a" * (MADE_BYTES + 1)
    recent.keep(b"bomb", small, made(inflated), 0.0, None, made, decoded=inflated)
    assert recent.get(b"bomb", small, made) is None


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


# -- large inputs, remembered by value ------------------------------------------

BIG = "the supplier shall deliver goods within thirty days " * 40  # past KEY_BYTES

LARGE_INPUTS: list[Any] = [
    {"context": BIG, "questions": ["Who signed?", "When?"]},
    {"context": BIG, "questions": ("Who signed?", "When?")},  # a tuple keys as a list
    {"context": BIG, "questions": ["When?", "Who signed?"]},
    {"context": BIG, "x": 1},
    {"context": BIG, "x": 1.0},
    {"context": BIG, "x": True},
    {"context": BIG, "x": 0.0},
    {"context": BIG, "x": -0.0},
    {"context": BIG, "x": None},
    {"context": BIG, "x": math.nan},
    {"context": BIG, "x": "1"},
    {"context": BIG, "x": [1, [True, None], {"a": 1.5}]},
    {"context": BIG, "x": [1, [1, None], {"a": 1.5}]},
    {"context": BIG, "x": {"b": 1, "a": 2}},
    {"context": BIG, "x": {"a": 2, "b": 1}},
    {"context": BIG, "x": "\x00str"},
    {"context": BIG, "x": Color.RED},  # not remembered by value: keyed the careful way
    {"context": BIG, "x": b"1"},
    {"context": BIG, "x": 2**70},
    {"context": BIG + "!", "questions": ["Who signed?", "When?"]},
    {"context": "short"},  # back to a small input in between
]


def test_large_inputs_key_as_the_builder_keys_them() -> None:
    recent = _keys_as_the_builder(LARGE_INPUTS)
    keys = {recent.key(inputs) for inputs in LARGE_INPUTS}
    assert len(keys) == len(LARGE_INPUTS) - 2  # only the tuple and the reordered dict alias


def test_a_list_changed_after_the_call_keys_as_what_it_holds_now() -> None:
    builder = KeyBuilder("ns", None)
    recent = RecentKeys(builder)
    questions = ["Who signed?", "When?"]
    nested = {"labels": ["spam", "ham"]}
    first = recent.key({"context": BIG, "questions": questions, "nested": nested})
    assert recent.key({"context": BIG, "questions": questions, "nested": nested}) == first
    questions.clear()
    questions.extend(["Who paid?", "When?"])
    nested["labels"].append("eggs")
    changed = {"context": BIG, "questions": questions, "nested": nested}
    assert recent.key(changed) == builder.key(changed) != first
    questions[0] = True  # True == 1 == 1.0, but keys apart
    flags = {"context": BIG, "questions": questions, "nested": nested}
    assert recent.key(flags) == builder.key(flags)
    questions[0] = 1
    assert recent.key(flags) == builder.key(flags)
    assert recent.key({"context": BIG, "questions": [True, "When?"], "nested": nested}) != (
        recent.key(flags)
    )


def test_an_equal_string_that_is_another_object_finds_its_key() -> None:
    builder = KeyBuilder("ns", None)
    recent = RecentKeys(builder)
    first = recent.key({"context": BIG})
    copy = "".join(BIG)  # equal, not the same object
    assert recent.key({"context": BIG[:10] + BIG[10:]}) == first
    assert recent.key({"context": copy}) == first


async def test_a_cached_function_answers_a_changed_list_by_what_it_holds() -> None:
    cache = DecisionCache(MemoryStore())

    @cached_prediction(cache)
    async def classify(text: str, labels: list[str]) -> dict[str, Any]:
        return {"label": labels[0], "of": len(labels)}

    labels = ["refund", "spam"]
    assert await classify(BIG, labels) == {"label": "refund", "of": 2}
    assert await classify(BIG, labels) == {"label": "refund", "of": 2}
    labels.clear()
    labels.extend(["spam", "refund", "other"])
    assert await classify(BIG, labels) == {"label": "spam", "of": 3}
    assert await classify(BIG, ["refund", "spam"]) == {"label": "refund", "of": 2}
    assert cache.stats()["misses"] == 2


def test_inputs_remembered_by_value_are_bounded_in_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    from asyncache import keys

    monkeypatch.setattr(keys, "RECENT_INPUT_BYTES", 200_000)
    builder = KeyBuilder("ns", None)
    recent = RecentKeys(builder)
    texts = [f"[{n}] " + "x" * 20_000 for n in range(40)]
    for text in texts:
        assert recent.key({"context": text}) == builder.key({"context": text})
    held = recent._by_value  # what it holds, measured apart from its own count
    measured = sum(sys.getsizeof(value[2]) + sys.getsizeof(value) for value in held)
    assert 0 < measured <= recent._held <= 200_000
    assert len(held) < len(texts)
    huge = {"context": "y" * (keys.RECENT_INPUT_MAX + 1)}
    assert recent.key(huge) == builder.key(huge)
    assert all(value[2] is not huge["context"] for value in held)  # too large to keep
