"""keys.py: equal inputs give equal keys, and nothing JSON would merge shares one."""

from __future__ import annotations

import copy
import dataclasses
import datetime
import decimal
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from asyncache import keys as keys_module
from asyncache.keys import KEY_VERSION, KeyBuilder, canonical, make_key

from .golden.make_keys import cases as golden_cases
from .support.inputs import Color, Level, Mode, Point, Query

GOLDEN = Path(__file__).resolve().parent / "golden"


def key(inputs: Any, *, namespace: str = "ns", fingerprint: Any = "fp", scope: Any = None) -> bytes:
    return make_key(namespace, fingerprint, scope, inputs)


# -- property tests --------------------------------------------------------

# orjson refuses lone surrogates, which no model input carries: leave them out.
_text = st.text(st.characters(codec="utf-8"), max_size=12)
_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),  # unbounded: big ints take the tagged path
    st.floats(),  # NaN, the infinities and -0.0 included
    _text,
    _text.map(lambda text: "\x00" + text),  # strings that start like a tag
    st.binary(max_size=80),  # both sides of the inline/digest threshold
)
_values = st.recursive(
    _leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(_text, inner, max_size=4),
        st.dictionaries(_text.map(lambda text: "\x00" + text), inner, max_size=2),
    ),
    max_leaves=12,
)


def _reordered(value: Any) -> Any:
    """The same value with every dict's insertion order reversed (and fresh objects)."""
    if isinstance(value, dict):
        return {name: _reordered(value[name]) for name in reversed(list(value))}
    if isinstance(value, list):
        return [_reordered(item) for item in value]
    return copy.copy(value)


def _same(a: Any, b: Any) -> bool:
    """Whether two generated values must share a key.

    Exact types (bool is not int, int is not float, bytes is not str), floats by
    their repr (NaN is NaN, -0.0 is not 0.0), dicts by their keys and values.
    """
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return repr(a) == repr(b)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[name], b[name]) for name in a)
    return bool(a == b)


def _confusable(value: Any) -> list[Any]:
    """Values JSON (or a careless encoder) would merge with ``value``; each must key apart."""
    if value is None:
        return [math.nan, math.inf, -math.inf, "null", False, 0]
    if isinstance(value, bool):
        return [int(value), float(value), str(value).lower()]
    if isinstance(value, int):
        return [str(value), float(value) if abs(value) < 2**53 else str(value) + ".0"]
    if isinstance(value, float):
        if math.isnan(value):
            return [None, math.inf, "nan", "NaN"]
        if math.isinf(value):
            return [None, -value, math.nan, str(value)]
        return [str(value), repr(value)] + ([int(value)] if value.is_integer() else [])
    if isinstance(value, str):
        return [value.encode(), "\x00" + value, [value]]
    if isinstance(value, bytes):
        return [value.hex(), value.decode("latin-1"), list(value)]
    if isinstance(value, list):
        return [{str(i): item for i, item in enumerate(value)}, [*value, None]]
    if isinstance(value, dict):
        return [list(value.items()), [list(value), list(value.values())]]
    raise AssertionError(value)


@given(_values)
def test_equal_inputs_give_equal_keys(value: Any) -> None:
    assert key(value) == key(_reordered(value)) == key(copy.deepcopy(value))
    assert key({"a": value, "b": 1}) == key({"b": 1, "a": _reordered(value)})


@given(_values, _values)
def test_keys_are_equal_exactly_when_inputs_are_the_same(a: Any, b: Any) -> None:
    assert (key(a) == key(b)) == _same(a, b)
    assert (key({"x": a}) == key({"x": b})) == _same(a, b)


@given(_values)
def test_confusable_values_key_apart(value: Any) -> None:
    for other in _confusable(value):
        assert key(value) != key(other), (value, other)
        # Nested, next to a plain value and next to one that forces the tagged path.
        assert key({"x": [value], "y": "plain"}) != key({"x": [other], "y": "plain"})
        assert key({"x": [value], "y": b"b"}) != key({"x": [other], "y": b"b"})


# -- values JSON would merge -----------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (None, math.nan),
        (None, math.inf),
        (None, -math.inf),
        (math.nan, math.inf),
        (math.inf, -math.inf),
        (1, 1.0),
        (0, False),
        (1, True),
        ("x", b"x"),
        ("78", b"x"),  # the hex of b"x"
        (2**64, str(2**64)),
        (-(2**63) - 1, str(-(2**63) - 1)),
        (2**100, float(2**100)),
        ("\x00bytes", b""),
        (["\x00bytes", "78"], b"x"),
        (["\x00c", 1], [["\x00str", "\x00c"], 1]),
        ({"\x00x": 1}, {"\x00\x00x": 1}),
        ({1: "a"}, {"1": "a"}),
        ({"a": 1}, [["a", 1]]),
        ({1, 2}, [1, 2]),
        (bytes(100), bytes(101)),  # long bytes key on length and digest
        (datetime.date(2024, 1, 2), "2024-01-02"),
        (datetime.timedelta(seconds=1), 1.0),
        (decimal.Decimal("1.10"), decimal.Decimal("1.1")),
        (decimal.Decimal("1"), 1),
    ],
    ids=repr,
)
def test_values_json_would_merge_key_apart(a: Any, b: Any) -> None:
    assert key(a) != key(b)
    assert key({"x": a}) != key({"x": b})
    assert key({"x": a, "pad": "p" * 2000}) != key({"x": b, "pad": "p" * 2000})  # long encodings


def test_tuple_and_list_share_a_key() -> None:
    # Documented merge: JSON has one sequence type, and results come back as lists too.
    assert key((1, 2)) == key([1, 2])
    assert key({"x": (1, (2, b"3"))}) == key({"x": [1, [2, b"3"]]})


def test_long_inputs_take_the_careful_path_when_they_hide_a_null() -> None:
    # Encodings past the scan limit are judged by a bounded look at the objects first.
    many = [f"item {i}" for i in range(300)]
    assert key([*many, None]) != key([*many, math.nan])
    assert key({"text": "null " * 400, "x": 1}) != key({"text": "null " * 400, "x": 1.0})
    assert key({"text": "null " * 400}) == key({"text": "null " * 400})
    assert key([*many, None]) == key(list([*many, None]))


@given(_values, st.sampled_from([0, 64, 10**9]), st.sampled_from([0, 3, 10**9]))
def test_the_encoding_does_not_depend_on_how_it_was_decided(
    value: Any, scan_limit: int, budget: int
) -> None:
    # The scan and the bounded look are shortcuts; the bytes must be the same either way.
    expected = canonical({"x": value, "note": "null is a word"})
    saved = keys_module._SCAN_LIMIT, keys_module._LOOK_BUDGET
    keys_module._SCAN_LIMIT, keys_module._LOOK_BUDGET = scan_limit, budget
    try:
        assert canonical({"x": value, "note": "null is a word"}) == expected
    finally:
        keys_module._SCAN_LIMIT, keys_module._LOOK_BUDGET = saved


def test_null_inside_a_string_keeps_the_plain_encoding() -> None:
    for size in (10, 600, 5000):
        inputs = {"text": "null " * size, "ids": list(range(100))}
        assert canonical(inputs) == orjson.dumps(inputs, option=orjson.OPT_SORT_KEYS)
    assert key({"text": "null"}) != key({"text": None})


def test_dict_order_does_not_matter_anywhere() -> None:
    a = {"b": {"y": 1, "x": [None, {"q": b"1", "p": 2}]}, "a": {3: "c", 1: "d"}}
    b = {"a": {1: "d", 3: "c"}, "b": {"x": [None, {"p": 2, "q": b"1"}], "y": 1}}
    assert key(a) == key(b)
    assert key({1, 2, 3}) == key({3, 2, 1})


# -- arrays and tensors ----------------------------------------------------


def test_numpy_arrays_key_on_dtype_shape_and_bytes() -> None:
    base = np.arange(6, dtype=np.float32)
    assert key(base) == key(np.arange(6, dtype=np.float32))
    assert key(base) != key(base.astype(np.float64))
    assert key(base) != key(base.view(np.int32))  # same bytes, other dtype
    assert key(base) != key(base.reshape(2, 3))  # same bytes, other shape
    assert key(base) != key(base.astype(base.dtype.newbyteorder(">")))
    assert key(base) != key(base.tolist())
    changed = base.copy()
    changed[5] = np.nextafter(changed[5], np.float32(10))
    assert key(base) != key(changed)


def test_numpy_views_key_like_their_contiguous_copy() -> None:
    grid = np.arange(24, dtype=np.int16).reshape(4, 6)
    for view in (grid.T, grid[:, ::2], grid[1:3, 2:5], np.asfortranarray(grid), grid[::-1]):
        assert not view.flags.c_contiguous
        assert key(view) == key(np.ascontiguousarray(view))
    assert key(grid.T) != key(grid)


def test_numpy_scalars_and_0d_arrays_do_not_merge_with_1_element_arrays() -> None:
    assert key(np.array(1.5)) != key(np.array([1.5]))
    assert key(np.float32(1.5)) != key(np.array([1.5], dtype=np.float32))
    assert key(np.float64(1.5)) != key(1.5)
    assert key(np.int64(1)) != key(np.int32(1))
    assert key(np.zeros((0, 3))) != key(np.zeros((3, 0)))


def test_structured_dtypes_key_on_their_fields() -> None:
    a = np.zeros(2, dtype=[("a", "<i4"), ("b", "<f4")])
    b = np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")])
    assert a.tobytes() == b.tobytes()
    assert key(a) != key(b)


def test_numpy_object_arrays_are_refused() -> None:
    with pytest.raises(TypeError, match=r"argument 'x'.*key=.*ignore="):
        canonical({"x": np.array(["a", None], dtype=object)})


def test_torch_tensors_key_on_dtype_shape_and_bytes() -> None:
    base = torch.arange(6, dtype=torch.float32)
    assert key(base) == key(torch.arange(6, dtype=torch.float32))
    assert key(base) != key(base.to(torch.float64))
    assert key(base) != key(base.view(torch.int32))
    assert key(base) != key(base.reshape(2, 3))
    assert key(torch.tensor(1.0)) != key(torch.tensor([1.0]))
    assert key(base) != key(base.numpy())  # a tensor is not an array
    grid = torch.arange(12, dtype=torch.int64).reshape(3, 4)
    for view in (grid.t(), grid[:, ::2], grid[1:, 1:3]):
        assert not view.is_contiguous()
        assert key(view) == key(view.contiguous().clone())
    weights = torch.ones(3, requires_grad=True)
    assert key(weights) == key(torch.ones(3))


# -- other supported types -------------------------------------------------


@dataclasses.dataclass
class Other:
    x: int
    y: float


def test_dataclasses_key_on_class_and_fields() -> None:
    assert key(Point(1, 2.0)) == key(Point(1, 2.0))
    assert key(Point(1, 2.0)) != key(Point(1, 2.5))
    assert key(Point(1, 2.0)) != key(Other(1, 2.0))
    assert key(Point(1, 2.0)) != key({"x": 1, "y": 2.0})


def test_enum_members_key_as_their_value_on_both_paths() -> None:
    # Documented merge: a member and its value share a key, also next to bytes,
    # which forces the tagged path.
    for member in (Color.RED, Mode.FAST, Level.HIGH):
        assert key(member) == key(member.value)
        assert key([member, b"b"]) == key([member.value, b"b"])
    assert key(Level.HIGH) != key(3.0)


def test_datetimes_key_on_their_iso_form_and_type() -> None:
    moment = datetime.datetime(2024, 5, 1, 12, 30)
    assert key(moment) == key(datetime.datetime(2024, 5, 1, 12, 30))
    assert key(moment) != key(moment.replace(tzinfo=datetime.UTC))
    assert key(moment) != key(moment.date())
    assert key(moment) != key(moment.isoformat())
    assert key(datetime.time(1)) != key(datetime.timedelta(hours=1))


def test_pydantic_models_key_on_their_fields() -> None:
    assert key(Query(text="a")) == key(Query(text="a", top_k=5))
    assert key(Query(text="a")) != key(Query(text="a", top_k=6))
    assert key(Query(text="a")) != key({"text": "a", "top_k": 5})


class Opaque:
    pass


@pytest.mark.parametrize("value", [Opaque(), object(), lambda: 1, 1 + 2j, range(3)], ids=repr)
def test_unknown_types_raise_type_error_naming_the_argument(value: Any) -> None:
    with pytest.raises(TypeError) as raised:
        key({"text": "hi", "session": value})
    message = str(raised.value)
    assert "argument 'session'" in message
    assert "key=" in message and "ignore=" in message
    assert repr(value) not in message  # never str()-ed into the key or the message


def test_unknown_type_nested_is_located() -> None:
    with pytest.raises(TypeError, match=r"argument 'batch'\[1\]\['x'\]"):
        key({"batch": [{"x": 1}, {"x": Opaque()}]})


# -- namespace, fingerprint and scope -------------------------------------


def test_namespace_fingerprint_and_scope_change_the_key() -> None:
    inputs = {"text": "hi"}
    base = key(inputs)
    assert key(inputs, namespace="other") != base
    assert key(inputs, fingerprint="fp2") != base
    assert key(inputs, fingerprint=None) != base
    assert key(inputs, fingerprint={"id": "fp"}) != base
    assert key(inputs, scope="tenant-a") != base
    assert key(inputs, scope="tenant-a") != key(inputs, scope="tenant-b")


@pytest.mark.parametrize("scope", ["", "null", 0, False, math.nan, [None], {"user": None}])
def test_no_scope_differs_from_every_scope(scope: Any) -> None:
    assert key({"x": 1}, scope=None) != key({"x": 1}, scope=scope)


def test_fingerprint_mapping_order_does_not_matter() -> None:
    assert key(1, fingerprint={"id": "m", "rev": 2}) == key(1, fingerprint={"rev": 2, "id": "m"})


def test_parts_do_not_bleed_into_each_other() -> None:
    # The parts are JSON items, not concatenated strings.
    assert key("b", namespace="a/") != key("/b", namespace="a")
    assert make_key("a", "b", None, "c") != make_key("a", None, "b", "c")


def test_key_builder_matches_make_key_and_is_16_bytes() -> None:
    builder = KeyBuilder("ns", "fp")
    for inputs, scope in [({"x": 1}, None), ({"x": b"1"}, "s"), ([None], {"t": 1})]:
        assert builder.key(inputs, scope) == make_key("ns", "fp", scope, inputs)
        assert len(builder.key(inputs, scope)) == 16


def test_canonical_names_the_argument_only_for_argument_dicts() -> None:
    with pytest.raises(TypeError, match="the inputs"):
        canonical([Opaque()])
    with pytest.raises(TypeError, match="argument 'scope'"):
        KeyBuilder("ns", None).key({"x": 1}, scope=Opaque())


# -- golden vectors --------------------------------------------------------


def test_golden_vectors_pin_the_key_format() -> None:
    golden = json.loads((GOLDEN / "keys.json").read_text())
    assert golden["key_version"] == KEY_VERSION, "regenerate tests/golden/keys.json"
    expected = {row["name"]: row for row in golden["vectors"]}
    cases = golden_cases()
    assert [name for name, _ in cases] == list(expected)
    assert 20 <= len(cases) <= 40
    changed = [
        name
        for name, args in cases
        if make_key(**args).hex() != expected[name]["key"]
        or canonical(args["inputs"]).decode() != expected[name]["canonical"]
    ]
    # A change here is a change of the key format: bump KEY_VERSION and rerun
    # tests/golden/make_keys.py --write, never just the second.
    assert changed == []


def test_golden_vectors_cover_every_tag() -> None:
    text = (GOLDEN / "keys.json").read_text()
    assert '"canonical": "{\\"n\\":0,\\"text\\":\\"null and void\\"}"' in text
    for tag in (
        "float",
        "bytes",
        "int",
        "str",
        "map",
        "set",
        "datetime",
        "date",
        "time",
        "timedelta",
        "decimal",
        "dataclass",
        "pydantic",
        "ndarray",
        "tensor",
        "c",
    ):
        assert f'\\\\u0000{tag}\\"' in text, tag
    keys = [row["key"] for row in json.loads(text)["vectors"]]
    assert len(set(keys)) == len(keys)
