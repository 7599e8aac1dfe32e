"""The typed round trip: a miss, a hit and a disabled cache answer with equal values of the
same types, rebuilt from the function's return annotation."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import decimal
import enum
import uuid
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asyncache import DecisionCache, cached_prediction
from asyncache.stores.sqlite import SQLiteStore


class Label(enum.Enum):
    YES = "yes"
    NO = "no"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclasses.dataclass(frozen=True)
class Span:
    start: int
    end: int


class Point(NamedTuple):
    x: float
    y: float


@dataclasses.dataclass
class Decision:
    label: Label
    score: float
    spans: list[Span]
    pair: tuple[int, str]
    at: datetime.datetime
    id: uuid.UUID
    where: Point | None = None


class Verdict(pydantic.BaseModel):
    label: Label
    point: Point
    spans: list[Span]
    day: datetime.date


def shape(value: Any) -> Any:
    """The type tree of ``value``: equal values of different types have different shapes."""
    kind = type(value)
    if isinstance(value, list | tuple):
        return (kind, tuple(shape(item) for item in value))
    if isinstance(value, dict):
        return (kind, tuple(sorted((name, shape(item)) for name, item in value.items())))
    if dataclasses.is_dataclass(value):
        fields = dataclasses.fields(value)
        return (kind, tuple((f.name, shape(getattr(value, f.name))) for f in fields))
    if isinstance(value, pydantic.BaseModel):
        names = type(value).model_fields
        return (kind, tuple((name, shape(getattr(value, name))) for name in names))
    return kind


floats = st.floats(allow_nan=False)
times = st.datetimes(timezones=st.sampled_from([None, datetime.UTC]))
spans = st.builds(Span, st.integers(-(2**40), 2**40), st.integers(0, 10))
points = st.builds(Point, floats, floats)
decisions = st.builds(
    Decision,
    st.sampled_from(Label),
    floats,
    st.lists(spans, max_size=3),
    st.tuples(st.integers(), st.text(max_size=5)),
    times,
    st.uuids(),
    st.none() | points,
)
verdicts = st.builds(
    Verdict,
    label=st.sampled_from(Label),
    point=points,
    spans=st.lists(spans, max_size=2),
    day=st.dates(),
)
LEAVES: list[tuple[Any, st.SearchStrategy[Any]]] = [
    (int, st.integers()),
    (float, floats),
    (str, st.text(max_size=8)),
    (bool, st.booleans()),
    (Label, st.sampled_from(Label)),
    (Level, st.sampled_from(Level)),
    (datetime.datetime, times),
    (datetime.date, st.dates()),
    (uuid.UUID, st.uuids()),
    (Span, spans),
    (Point, points),
    (Decision, decisions),
    (Verdict, verdicts),
]


def _nest(
    inner: st.SearchStrategy[tuple[Any, st.SearchStrategy[Any]]],
) -> st.SearchStrategy[tuple[Any, st.SearchStrategy[Any]]]:
    def wrap(pair: tuple[Any, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
        tp, values = pair
        return st.sampled_from(
            [
                (list[tp], st.lists(values, max_size=3)),  # type: ignore[valid-type]
                (tuple[tp, ...], st.lists(values, max_size=3).map(tuple)),  # type: ignore[valid-type]
                (tuple[tp, int], st.tuples(values, st.integers())),  # type: ignore[valid-type]
                (dict[str, tp], st.dictionaries(st.text(max_size=4), values, max_size=3)),  # type: ignore[valid-type]
                (tp | None, st.none() | values),
            ]
        )

    return inner.flatmap(wrap)


typed_values = st.recursive(st.sampled_from(LEAVES), _nest, max_leaves=3).flatmap(
    lambda pair: st.tuples(st.just(pair[0]), pair[1])
)


def _predictor(cache: DecisionCache, annotation: Any, value: Any) -> Any:
    runs: list[int] = []

    async def predict(x: int) -> Any:
        runs.append(x)
        await asyncio.sleep(0)
        return value

    predict.__annotations__["return"] = annotation
    cached = cached_prediction(cache)(predict)
    cached.runs = runs
    return cached


async def _round_trip(annotation: Any, value: Any) -> None:
    async with DecisionCache() as cache, DecisionCache(enabled=False) as off:
        predict = _predictor(cache, annotation, value)
        # Followers of one coalesced flight, then a hit.
        first = await asyncio.gather(*(predict(1) for _ in range(3)))
        hit = await predict(1)
        assert predict.runs == [1]
        disabled = await _predictor(off, annotation, value)(1)
        for answer in [*first, hit, disabled]:
            assert answer == value
            assert shape(answer) == shape(value)
        assert cache.stats()["stores"] == 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(typed_values)
def test_miss_hit_and_disabled_give_equal_values_of_the_same_types(
    case: tuple[Any, Any],
) -> None:
    annotation, value = case
    asyncio.run(_round_trip(annotation, value))


async def test_a_dataclass_is_a_dataclass_on_a_hit_from_a_sqlite_file(tmp_path: Path) -> None:
    decision = Decision(
        Label.YES,
        0.5,
        [Span(1, 2)],
        (3, "x"),
        datetime.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=datetime.UTC),
        uuid.UUID(int=7),
        Point(1.0, -2.5),
    )

    async def predict(text: str) -> Decision:
        return decision

    path = tmp_path / "decisions.sqlite"
    async with DecisionCache(SQLiteStore(path)) as cache:
        assert await cached_prediction(cache)(predict)("a") == decision
    async with DecisionCache(SQLiteStore(path)) as cache:
        hit = await cached_prediction(cache)(predict)("a")
        assert cache.stats()["hits"] == 1
    assert hit == decision and shape(hit) == shape(decision)
    assert hit.label is Label.YES  # an enum member, not its value
    assert type(hit.where) is Point and type(hit.pair) is tuple


async def test_numpy_arrays_keep_dtype_and_shape_inside_containers() -> None:
    @dataclasses.dataclass
    class Embedding:
        vector: np.ndarray[Any, Any]
        names: tuple[str, ...]

    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1, 2], dtype=np.int8)]

    async def embed(x: int) -> list[Embedding]:
        return [Embedding(array, ("a", "b")) for array in arrays]

    async with DecisionCache() as cache:
        cached = cached_prediction(cache)(embed)
        for answer in (await cached(1), await cached(1)):
            assert [type(e) for e in answer] == [Embedding, Embedding]
            for got, want in zip(answer, arrays, strict=True):
                assert got.vector.dtype == want.dtype and got.vector.shape == want.shape
                assert np.array_equal(got.vector, want)
                assert got.names == ("a", "b")
        assert cache.stats()["hits"] == 1


async def test_a_batch_answers_its_items_with_the_declared_type() -> None:
    async with DecisionCache() as cache:

        @cached_prediction(cache, batch=True)
        async def score(texts: list[str]) -> list[Span]:
            return [Span(len(text), 0) for text in texts]

        for answers in (await score.many(["a", "bb"]), await score.many(["a", "bb"])):
            assert answers == [Span(1, 0), Span(2, 0)]
            assert all(type(answer) is Span for answer in answers)
        assert type(await score("bb")) is Span
        assert cache.stats()["hits"] == 3
        await score.aclose()


class Opaque:
    """A class asyncache has no stored form for."""

    def __init__(self, label: str) -> None:
        self.label = label

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque) and other.label == self.label

    __hash__ = object.__hash__


@pytest.mark.parametrize(
    ("annotation", "named"),
    [
        (Opaque, "Opaque"),
        (set[int], "set"),
        (decimal.Decimal, "Decimal"),
        (datetime.timedelta, "timedelta"),
        (Span | Point, "Span | Point"),
        (dict[int, str], "dict"),
        (list[Opaque], "Opaque"),
    ],
)
def test_an_annotation_that_cannot_round_trip_fails_at_decoration(
    annotation: Any, named: str
) -> None:
    async def predict(x: int) -> Any:
        return None

    predict.__annotations__["return"] = annotation
    with pytest.raises(TypeError) as raised:
        cached_prediction(DecisionCache())(predict)
    message = str(raised.value)
    assert "predict" in message and named in message
    assert "encode=" in message and "decode=" in message


async def test_encode_and_decode_hooks_carry_a_type_asyncache_cannot_rebuild() -> None:
    runs = 0

    async def predict(text: str) -> Opaque:
        nonlocal runs
        runs += 1
        return Opaque(text.upper())

    def encode(result: Opaque) -> dict[str, str]:
        return {"label": result.label}

    def decode(stored: dict[str, str]) -> Opaque:
        return Opaque(stored["label"])

    async with DecisionCache() as cache, DecisionCache(enabled=False) as off:
        cached = cached_prediction(cache, encode=encode, decode=decode)(predict)
        answers = [await cached("a"), await cached("a")]
        answers.append(await cached_prediction(off, encode=encode, decode=decode)(predict)("a"))
        assert answers == [Opaque("A")] * 3
        assert all(type(answer) is Opaque for answer in answers)
        assert runs == 2 and cache.stats()["hits"] == 1
    with pytest.raises(ValueError, match="decode="):
        cached_prediction(DecisionCache(), encode=encode)


async def test_plain_json_results_are_not_wrapped() -> None:
    """A result that is already of its declared type on a hit pays for no rebuild."""

    async def plain(x: int) -> dict[str, list[float]]:
        return {"a": [1.0]}

    async def typed(x: int) -> Span:
        return Span(x, x)

    async with DecisionCache() as cache:
        assert cached_prediction(cache)(plain).__code__.co_name == "wrapper"
        assert cached_prediction(cache)(typed).__code__.co_name == "typed"


FORWARD = DecisionCache()


@cached_prediction(FORWARD)
async def defined_before_its_type(x: int) -> DefinedLater:
    return DefinedLater(x, (x, x))


@cached_prediction(FORWARD)
async def typed_only_for_checkers(x: int) -> NeverImported:  # type: ignore[name-defined]  # noqa: F821
    return {"x": x}


@dataclasses.dataclass
class DefinedLater:
    x: int
    pair: tuple[int, int]


async def test_a_type_defined_after_the_function_is_resolved_on_first_use() -> None:
    for _ in range(2):
        answer = await defined_before_its_type(1)
        assert answer == DefinedLater(1, (1, 1)) and type(answer.pair) is tuple
    assert FORWARD.stats()["hits"] == 1


async def test_a_type_never_defined_at_run_time_fails_naming_it() -> None:
    with pytest.raises(TypeError, match=r"NeverImported.*TYPE_CHECKING.*decode="):
        await typed_only_for_checkers(1)


async def test_a_decision_stored_before_the_type_changed_is_recomputed() -> None:
    @dataclasses.dataclass
    class Before:
        label: str

    @dataclasses.dataclass
    class After:
        label: str
        score: float  # added since: the stored decisions lack it

    async def old(text: str) -> Before:
        return Before(text)

    async def new(text: str) -> After:
        return After(text, 0.5)

    async with DecisionCache() as cache:
        assert await cached_prediction(cache, namespace="triage")(old)("a") == Before("a")
        upgraded = cached_prediction(cache, namespace="triage")(new)
        assert await upgraded("a") == After("a", 0.5)  # not a TypeError from the old entry
        assert await upgraded("a") == After("a", 0.5)
        stats = cache.stats()
        assert (stats["corrupt"], stats["hits"], stats["stores"]) == (1, 2, 2)


async def test_a_result_that_does_not_fit_its_annotation_raises() -> None:
    async def wrong(text: str) -> Span:
        return {"start": 1}  # type: ignore[return-value]

    async with DecisionCache() as cache:
        with pytest.raises(TypeError, match="end"):
            await cached_prediction(cache)(wrong)("a")


async def test_a_batch_recomputes_items_stored_before_the_type_changed() -> None:
    async with DecisionCache() as cache:

        @cached_prediction(cache, batch=True, namespace="spans")
        async def old(texts: list[str]) -> list[dict[str, int]]:
            return [{"start": len(text)} for text in texts]

        @cached_prediction(cache, batch=True, namespace="spans")
        async def new(texts: list[str]) -> list[Span]:
            return [Span(len(text), 0) for text in texts]

        assert await old.many(["a", "bb"]) == [{"start": 1}, {"start": 2}]
        assert await new.many(["a", "bb", "ccc"]) == [Span(1, 0), Span(2, 0), Span(3, 0)]
        assert await new("a") == Span(1, 0)
        assert cache.stats()["corrupt"] == 2
        await old.aclose()
        await new.aclose()
