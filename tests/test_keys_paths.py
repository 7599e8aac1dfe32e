"""keys.py: the orjson fast path and the fallback walk key every supported value alike.

An input takes the walk when anything in it needs a tag (``None`` next to a
NaN, bytes, a set...), so every value below is keyed twice: alone, and next to
``b""``, which forces the walk. Aliases (enum members, ``str``/``int``/``float``
subclasses, UUIDs, tuples, mappings) key like their plain value on both paths.
"""

from __future__ import annotations

import collections
import enum
import math
import sys
import uuid
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from asyncache import DecisionCache, MemoryStore, cached_prediction
from asyncache import keys as keys_module
from asyncache.keys import canonical, make_key

from .support.inputs import Color, Level, Mode, Point, Query

WRAP = b'["\\u0000c",'
FORCE = b'["\\u0000c",{"f":["\\u0000bytes",""],"v":'


def key(inputs: Any) -> bytes:
    return make_key("ns", "fp", None, inputs)


def walked(value: Any) -> bytes:
    """The key of ``value`` next to bytes: it takes the walk whatever it is."""
    return key({"v": value, "f": b""})


# -- aliases ---------------------------------------------------------------


class Text(str):
    def __str__(self) -> str:  # never consulted
        return "other"


class Number(int):
    pass


class Real(float):
    pass


class MyUUID(uuid.UUID):
    pass


class Pair(NamedTuple):
    a: Any
    b: Any


USER = uuid.UUID("12345678-1234-5678-1234-567812345678")

ALIASES = [
    (USER, str(USER)),
    (MyUUID(str(USER)), str(USER)),
    (Color.RED, "red"),
    (Color.NONE, None),
    (Color.NAN, math.nan),
    (Color.BYTES, b"x"),
    (Color.PAIR, [1, 2]),
    (Mode.FAST, "fast"),
    (Level.HIGH, 3),
    (Text("a"), "a"),
    (Text("\x00a"), "\x00a"),
    (Number(5), 5),
    (Number(2**70), 2**70),
    (Real(1.5), 1.5),
    (Real(math.inf), math.inf),
    (Pair(1, None), [1, None]),
    (collections.OrderedDict(b=1, a=None), {"a": None, "b": 1}),
    ({Text("k"): 1, Mode.FAST: 2, USER: 3}, {"k": 1, "fast": 2, str(USER): 3}),
]


@pytest.mark.parametrize(("alias", "plain"), ALIASES, ids=repr)
def test_aliases_key_like_their_value_on_both_paths(alias: Any, plain: Any) -> None:
    # Was: a str/int/float subclass, OrderedDict or named tuple keyed like its value
    # only once walked, an enum or UUID only on the fast path (next to None it was
    # walked and wrapped; a UUID next to bytes was a TypeError).
    for wrap in (
        lambda v: v,
        lambda v: {"x": v},
        lambda v: {"x": v, "note": None},
        lambda v: {"x": [v], "y": b"b"},
        lambda v: {"x": v, "nan": math.nan},
        lambda v: {"x": {1, 2}, "y": (v,)},
    ):
        assert key(wrap(alias)) == key(wrap(plain)), wrap(alias)
        assert canonical(wrap(alias)) == canonical(wrap(plain))


def test_aliases_key_like_their_value_as_dict_keys_and_set_items() -> None:
    assert key({Color.RED: 1}) == key({"red": 1})
    assert key({Text("a"): 1, "b": b""}) == key({"a": 1, "b": b""})
    assert key({USER: None}) == key({str(USER): None})
    assert key({Level.HIGH: "a"}) == key({3: "a"})
    assert key(frozenset({Color.RED, 1})) == key(frozenset({"red", 1}))
    # Two keys that alias one string stay apart from either alone, in any order.
    both = {Color.RED: 1, "red": 2}
    assert key(both) == key({"red": 2, Color.RED: 1})
    assert key(both) not in (key({"red": 1}), key({"red": 2}))


def test_a_uuid_argument_next_to_none_keys_like_its_string() -> None:
    # predict(user: UUID, note: str | None = None) raised "cannot build a cache key
    # from argument 'user'" whenever note was None (or a NaN, bytes or a set was near).
    assert key({"user": USER, "note": None}) == key({"user": str(USER), "note": None})
    assert key({"user": USER, "note": b"n"}) == key({"user": str(USER), "note": b"n"})
    assert key({"user": USER, "note": {1}}) == key({"user": str(USER), "note": {1}})
    assert key({"user": USER, "note": None}) != key({"user": USER, "note": "None"})


async def test_the_decorator_keys_a_uuid_argument_with_a_none_default() -> None:
    calls: list[Any] = []
    cache = DecisionCache(MemoryStore(), fingerprint="model@1")

    @cached_prediction(cache)
    async def predict(user: uuid.UUID, note: str | None = None) -> str:
        calls.append((user, note))
        return f"{user}:{note}"

    assert await predict(USER) == f"{USER}:None"
    assert await predict(USER, None) == f"{USER}:None"
    assert await predict(USER, math.nan) == f"{USER}:nan"  # type: ignore[arg-type]
    assert len(calls) == 2
    assert predict.key(USER) != predict.key(USER, "None")


def test_a_plain_encoding_that_starts_like_a_tag_is_walked() -> None:
    # An enum whose value starts with NUL, first in a top-level list, encoded plain
    # as exactly the wrapper of a walked input: the two shared a key.
    forged = [Color.NUL, {"x": ["\x00bytes", "78"]}]
    assert canonical(forged) != canonical({"x": b"x"})
    assert key(forged) == key(["\x00c", {"x": ["\x00bytes", "78"]}])


# -- what the walk refuses, and how ------------------------------------------


def nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def test_self_containing_inputs_are_type_errors_naming_the_argument() -> None:
    loop: list[Any] = []
    loop.append(loop)
    looped: dict[str, Any] = {"a": 1}
    looped["self"] = looped
    for inputs, where in [
        ({"batch": loop}, r"argument 'batch'\[0\]: it contains itself"),
        ({"text": "hi", "meta": {"m": looped}}, r"argument 'meta'\['m'\]\['self'\]: it contains"),
        ({"x": [b"", loop]}, r"argument 'x'\[1\]\[0\]: it contains itself"),
    ]:
        with pytest.raises(TypeError, match=where) as raised:
            key(inputs)
        assert "key=" in str(raised.value) and "ignore=" in str(raised.value)
    shared = [1]
    assert key({"x": [shared, shared]}) == key({"x": [[1], [1]]})  # shared is not a cycle


def test_inputs_nested_past_orjsons_limit_are_type_errors_on_both_paths() -> None:
    # Was a RecursionError (2,000 deep). 254 nested containers are what orjson
    # encodes, and the walk accepts exactly as many.
    for deep in (nested(2000), nested(2000, b"")):
        with pytest.raises(TypeError, match="argument 'deep': it nests more than 254 containers"):
            key({"deep": deep})
    assert key(nested(254)) != key(nested(253))
    assert walked(nested(253)) != walked(nested(252))
    with pytest.raises(TypeError, match="the inputs: it nests more than 254"):
        key(nested(255))
    with pytest.raises(TypeError, match="argument 'v': it nests more than 254"):
        canonical({"v": nested(254), "f": b""})


def test_a_deep_input_under_a_low_recursion_limit_is_a_type_error() -> None:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(300)
    try:
        with pytest.raises(TypeError, match="argument 'deep': it nests too deep for Python"):
            key({"deep": nested(250, b"")})
    finally:
        sys.setrecursionlimit(limit)


def test_huge_integers_key_on_their_value() -> None:
    # Was a ValueError: str() of an int past 4,300 digits (sys.get_int_max_str_digits).
    huge = 10**5000
    assert key(huge) == key(10**5000)
    assert key(huge) != key(huge + 1)
    assert key(-huge) != key(huge)
    assert key({"x": huge, "y": None}) == key({"y": None, "x": 10**5000})
    assert key(Number(huge)) == key(huge)
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)  # the lowest limit Python allows
    try:
        assert key(2**2000) == key(2**2000)  # 603 digits: decimal, under any limit
        assert key(huge) == key(10**5000)
    finally:
        sys.set_int_max_str_digits(limit)
    assert key(2**2000) != key(str(2**2000))
    assert key(2**2001) != key(hex(2**2001))
    with pytest.raises(TypeError, match=r"argument 'x'\[<int>\] of type"):
        key({"x": {huge: object()}})


def test_a_lone_surrogate_is_a_type_error_naming_the_argument() -> None:
    with pytest.raises(TypeError, match=r"argument 'text': a string holding a lone surrogate"):
        key({"text": "\ud800", "n": None})
    with pytest.raises(TypeError, match=r"argument 'meta'\['\\ud800'\]: a string"):
        key({"meta": {"\ud800": 1}})


# -- the property: one key whichever path runs --------------------------------

_text = st.text(st.characters(codec="utf-8"), max_size=8)  # no lone surrogates
_ints = st.one_of(st.integers(), st.integers(min_value=2**1990, max_value=2**2100))
_hashable = st.one_of(
    st.none(),
    st.booleans(),
    _ints,
    st.floats(),
    _text,
    _text.map(lambda text: "\x00" + text),
    st.binary(max_size=70),
    st.sampled_from([*Color, Mode.FAST, Level.HIGH]),
    _text.map(Text),
    _ints.map(Number),
    st.floats().map(Real),
    st.uuids(),
    st.uuids().map(lambda u: MyUUID(int=u.int)),
    st.datetimes(),
    st.dates(),
    st.times(),
    st.timedeltas(),
    st.decimals(places=3, allow_nan=False),
)
_leaves = st.one_of(
    _hashable,
    st.frozensets(_hashable, max_size=3),
    st.sets(_hashable, max_size=3),
    st.builds(Query, text=_text, top_k=st.integers(0, 9)),
    st.sampled_from([np.arange(3, dtype=np.int16), np.array(1.5), np.float64(2.0), np.str_("a")]),
)
_keys = st.one_of(_text, _text.map(Text), st.sampled_from([Color.RED, Mode.FAST]), st.uuids())
_values = st.recursive(
    _leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.builds(Pair, inner, inner),
        st.dictionaries(_text, inner, max_size=3),
        st.dictionaries(_keys, inner, max_size=3),
        st.dictionaries(_hashable, inner, max_size=2),
        st.dictionaries(_text, inner, max_size=3).map(collections.OrderedDict),
        st.builds(Point, inner, inner),
    ),
    max_leaves=10,
)


def plain_twin(value: Any) -> Any:
    """``value`` with every alias replaced by the plain value it must key as."""
    if isinstance(value, enum.Enum):
        return plain_twin(value.value)
    if isinstance(value, np.generic | np.ndarray):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, uuid.UUID):
        return uuid.UUID.__str__(value)
    if isinstance(value, list | tuple):
        return [plain_twin(item) for item in value]
    if isinstance(value, dict):
        twin = {frozen(plain_twin(name)): plain_twin(item) for name, item in value.items()}
        assume(len(twin) == len(value))  # keys that alias one another merge in a dict
        return twin
    if isinstance(value, set | frozenset):
        items = frozenset(frozen(plain_twin(item)) for item in value)
        assume(len(items) == len(value))
        return items
    if isinstance(value, Point):
        return Point(plain_twin(value.x), plain_twin(value.y))
    return value


def frozen(value: Any) -> Any:
    """A hashable form of a twin (a tuple keys like a list) for a dict key or a set item."""
    return tuple(frozen(item) for item in value) if isinstance(value, list) else value


def inner_of(encoding: bytes, *, walked: bool) -> bytes:
    """The bytes of ``v`` in ``canonical({"v": v})`` or ``canonical({"v": v, "f": b""})``."""
    head = FORCE if walked else (WRAP + b'{"v":' if encoding.startswith(WRAP) else b'{"v":')
    assert encoding.startswith(head)
    return encoding[len(head) : -2 if encoding.startswith(WRAP) else -1]


@given(_values, st.sampled_from([(512, 64), (0, 0), (10**9, 10**9)]))
def test_the_fast_path_and_the_walk_encode_every_supported_value_alike(
    value: Any, limits: tuple[int, int]
) -> None:
    saved = keys_module._SCAN_LIMIT, keys_module._LOOK_BUDGET
    keys_module._SCAN_LIMIT, keys_module._LOOK_BUDGET = limits
    try:
        alone = canonical({"v": value})
        forced = canonical({"v": value, "f": b""})
        # The same bytes for the value on both paths, but for the strings starting
        # with NUL that only the walk tags.
        if alone.startswith(WRAP) or b"\\u0000" not in alone:
            assert inner_of(alone, walked=False) == inner_of(forced, walked=True)
        twin = plain_twin(value)
        assert canonical(value) == canonical(twin)
        assert alone == canonical({"v": twin})
        assert forced == canonical({"v": twin, "f": b""})
    finally:
        keys_module._SCAN_LIMIT, keys_module._LOOK_BUDGET = saved


@given(_values, _values)
def test_two_values_share_a_key_on_one_path_exactly_when_on_the_other(a: Any, b: Any) -> None:
    assert (key(a) == key(b)) == (walked(a) == walked(b))
    assert (key({"x": a}) == key({"x": b})) == (key([a, math.nan]) == key([b, math.nan]))


@given(_values)
def test_every_supported_value_keys_and_equal_ones_key_alike(value: Any) -> None:
    # Keys are a function of the value: a fresh, equal copy keys alike.
    assert key(value) == key(plain_twin(value)) == key(plain_twin(plain_twin(value)))
    assert walked(value) == walked(plain_twin(value))
