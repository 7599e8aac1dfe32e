"""codec.py: the value envelope round-trips exactly and refuses what it did not write."""

from __future__ import annotations

import functools
import hashlib
import math
import random
import string
import tracemalloc
import zlib
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncache import DecisionCache, MemoryStore, cached_prediction
from asyncache.codec import (
    MAX_DECODED_BYTES,
    Decoded,
    decode,
    decode_envelope,
    encode,
    normalize_secret,
)
from asyncache.errors import DecodeError

KEY = bytes(range(16))
OTHER_KEY = bytes(range(1, 17))
SECRET = normalize_secret("s3cret")


def pack(result: Any, *, secret: bytes | None = None, key: bytes = KEY) -> bytes:
    return encode(result, ttl=60.0, created_at=1_700_000_000.5, compute_seconds=0.25, key=key,
                  secret=secret)  # fmt: skip


def roundtrip(result: Any, *, secret: bytes | None = None) -> Any:
    return decode(pack(result, secret=secret), key=KEY, secret=secret).value


def assert_same_array(got: Any, want: np.ndarray[Any, Any]) -> None:
    assert type(got) is np.ndarray
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.tobytes() == np.ascontiguousarray(want).tobytes()  # bit-exact, NaN payloads too


# -- round trips -----------------------------------------------------------


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.array([1.0, -0.0, np.nan, np.inf, -np.inf], dtype=np.float64),
        np.array([0.1, 65504.0, 6e-8], dtype=np.float16),
        np.array([True, False, True]),
        np.array([1 + 2j, -3.5j], dtype=np.complex128),
        np.array([1 + 2j], dtype=np.complex64),
        np.array(3.25),  # 0-d
        np.zeros((0, 3), dtype=np.int8),  # empty
        np.asfortranarray(np.arange(6, dtype=np.int64).reshape(2, 3)),  # Fortran order
        np.arange(10, dtype=np.uint16)[::3],  # a strided view
        np.array([2**63 - 1, -(2**63)], dtype=np.int64),
        np.array(["ab", "c"]),
        np.array([1, 2], dtype=">i4"),  # big-endian stays big-endian
        np.frombuffer(bytes(range(256)), dtype=np.uint8).reshape(16, 16),
    ],
    ids=lambda array: f"{array.dtype.str}{list(array.shape)}",
)
def test_numpy_arrays_round_trip_bit_exact(array: np.ndarray[Any, Any]) -> None:
    got = roundtrip(array)
    assert_same_array(got, array)
    assert got.flags.writeable
    nested = roundtrip({"scores": array, "more": [array, {"again": array}]})
    assert_same_array(nested["scores"], array)
    assert_same_array(nested["more"][0], array)
    assert_same_array(nested["more"][1]["again"], array)


def test_nan_payloads_survive() -> None:
    odd_nan = np.array([0x7FF8000000000001, 0xFFF0000000000001], dtype=np.uint64).view(np.float64)
    assert np.isnan(odd_nan).all()
    assert_same_array(roundtrip(odd_nan), odd_nan)


@pytest.mark.parametrize(
    "scalar", [np.float32(1.5), np.float64(-0.0), np.int8(-3), np.bool_(True), np.complex64(1j)]
)
def test_numpy_scalars_round_trip_as_scalars(scalar: Any) -> None:
    got = roundtrip(scalar)
    assert type(got) is type(scalar)
    assert np.asarray(got).tobytes() == np.asarray(scalar).tobytes()


def test_object_arrays_cannot_be_stored() -> None:
    with pytest.raises(TypeError):
        pack(np.array([object()], dtype=object))


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"\x00\xff raw bytes",
        bytearray(b"abc"),
        math.nan,
        math.inf,
        -math.inf,
        -0.0,
        [None, math.nan, {"x": [math.inf, b"y"]}],
        {"label": "spam", "score": 0.9731, "tokens": [1, 2, 3], "ok": True, "none": None},
        "ünïcødé ✓",
        2**63,
        [2**64, -(2**63) - 1, 10**40, {"big": -(10**30)}],
        {"\x00t": ["bytes", "eA=="], "other": math.nan},  # a dict that looks like a tag
        [{"\x00t": ["float", "nan"]}, b"forces tags"],
        {"\x00t": ["unknown kind"], "x": [math.nan]},
    ],
    ids=repr,
)
def test_values_round_trip(value: Any) -> None:
    got = roundtrip(value)
    assert orjson.dumps(_typed(got)) == orjson.dumps(_typed(value))


def _typed(value: Any) -> Any:
    """A JSON-able form that keeps types and float bits apart, for exact comparison."""
    if isinstance(value, bytearray | bytes):
        return ["bytes", value.hex()]
    if isinstance(value, float):
        return ["float", value.hex()]
    if isinstance(value, bool | int | str) or value is None:
        return [type(value).__name__, value if not isinstance(value, int) else str(value)]
    if isinstance(value, list):
        return ["list", [_typed(item) for item in value]]
    if isinstance(value, dict):
        return ["dict", {name: _typed(item) for name, item in value.items()}]
    raise AssertionError(type(value))


_SURROGATES: tuple[Literal["Cs"]] = ("Cs",)
_json_like = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),  # big ones included
        st.floats(),
        st.text(st.characters(blacklist_categories=_SURROGATES)),
        st.binary(),
    ),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=20,
)


@given(_json_like)
def test_any_json_like_value_round_trips_exactly(value: Any) -> None:
    assert orjson.dumps(_typed(roundtrip(value))) == orjson.dumps(_typed(value))


@pytest.mark.parametrize("ttl", [None, 60.0])
@pytest.mark.parametrize("result", [[None, math.nan], {"a": None, "b": -math.inf}, math.inf, None])
def test_non_finite_floats_survive_whatever_the_ttl(ttl: float | None, result: Any) -> None:
    # With ttl=None the envelope holds a null of its own; the result's still need tags.
    value = encode(result, ttl=ttl, created_at=1.0, compute_seconds=0.0, key=KEY)
    got = decode(value, key=KEY)
    assert orjson.dumps(_typed(got.value)) == orjson.dumps(_typed(result))
    assert got.ttl == ttl


def test_tuples_come_back_as_lists() -> None:
    # Documented: JSON has one sequence type; the key merges them the same way.
    assert roundtrip((1, (2, 3))) == [1, [2, 3]]


def test_envelope_keeps_created_ttl_and_compute_seconds() -> None:
    value = encode({"a": 1}, ttl=30.0, created_at=123.5, compute_seconds=0.125, key=KEY)
    assert decode(value, key=KEY) == Decoded({"a": 1}, 30.0, 123.5, 0.125)
    forever = encode("x", ttl=None, created_at=1.0, compute_seconds=0.0, key=KEY)
    assert decode(forever, key=KEY).ttl is None
    envelope = decode_envelope(value, key=KEY)
    assert envelope == {"v": {"a": 1}, "t": 30.0, "c": 123.5, "d": 0.125}


# -- compression -----------------------------------------------------------


def test_zlib_only_when_smaller() -> None:
    small = pack({"label": "ok"})
    assert small[0] & 0x01 == 0
    assert orjson.loads(small[1:])["v"] == {"label": "ok"}
    repetitive = pack({"text": "spam " * 500})
    assert repetitive[0] & 0x01
    assert len(repetitive) < 500
    assert orjson.loads(zlib.decompress(repetitive[1:]))["v"] == {"text": "spam " * 500}
    assert roundtrip({"text": "spam " * 500}) == {"text": "spam " * 500}
    rnd = random.Random(7)
    seen = set()
    for length in range(120, 400, 5):
        text = "".join(rnd.choice(string.ascii_letters + string.punctuation) for _ in range(length))
        body = orjson.dumps({"v": text, "t": 60.0, "c": 1_700_000_000.5, "d": 0.25})
        value = pack(text)
        compressed = bool(value[0] & 0x01)
        seen.add(compressed)
        if compressed:
            assert len(value) - 1 < len(body)
        else:
            assert value[1:] == body
        if len(zlib.compress(body, 9)) >= len(body):
            assert not compressed  # zlib would not help: the body is stored as is
        assert roundtrip(text) == text
    assert seen == {True, False}


# -- refusing what it did not write ---------------------------------------


def test_signed_value_round_trips_and_is_bound_to_its_key() -> None:
    value = pack({"a": 1}, secret=SECRET)
    assert decode(value, key=KEY, secret=SECRET).value == {"a": 1}
    with pytest.raises(DecodeError, match="HMAC"):
        decode(value, key=OTHER_KEY, secret=SECRET)  # moved to another key
    with pytest.raises(DecodeError, match="HMAC"):
        decode(value, key=KEY, secret=normalize_secret("another secret"))


@pytest.mark.parametrize("position", [0, 1, 5, 16, 17, -1])
def test_tampered_signed_value_is_a_decode_error(position: int) -> None:
    value = bytearray(pack({"label": "spam", "text": "spam " * 100}, secret=SECRET))
    value[position] ^= 0x01
    with pytest.raises(DecodeError):
        decode(bytes(value), key=KEY, secret=SECRET)


def test_rewritten_unsigned_body_is_refused_when_a_secret_is_set() -> None:
    forged = pack({"label": "ham"})  # a writer without the secret
    with pytest.raises(DecodeError, match="not signed"):
        decode(forged, key=KEY, secret=SECRET)
    # Nor can a forger keep the header's signed bit and drop the tag.
    signed = pack({"label": "spam"}, secret=SECRET)
    with pytest.raises(DecodeError):
        decode(signed[:1] + pack({"label": "ham"})[1:], key=KEY, secret=SECRET)


def test_a_reader_without_the_secret_can_still_read_signed_values() -> None:
    assert decode(pack([1, 2], secret=SECRET), key=KEY).value == [1, 2]


def test_long_secrets_are_hashed_and_empty_ones_refused() -> None:
    long = normalize_secret("x" * 200)
    assert long is not None and len(long) <= 64
    assert normalize_secret(b"k") == b"k"
    assert normalize_secret(None) is None
    with pytest.raises(ValueError, match="empty"):
        normalize_secret("")


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"\x20" + b'{"v":1,"t":null,"c":1.0,"d":0.0}',  # another format
        b"\x00" + b'{"v":1,"t":null,"c":1.0,"d":0.0}',
        b"\x18" + b'{"v":1,"t":null,"c":1.0,"d":0.0}',  # an unknown flag
        b"\x10not json",
        b"\x10[1,2]",
        b'\x10{"t":null}',
        b"\x11" + b"not zlib",
        b"\x14" + b'{"v":{"\\u0000t":["martian",1]},"t":null,"c":1.0,"d":0.0}',
        b"\x14" + b'{"v":{"\\u0000t":["ndarray","<f4",[3],"AAAA"]},"t":null,"c":1.0,"d":0.0}',
        b'{"v":1,"t":null,"c":1.0,"d":0.0}',  # no header at all
    ],
    ids=repr,
)
def test_values_it_did_not_write_are_decode_errors(value: bytes) -> None:
    with pytest.raises(DecodeError):
        decode(value, key=KEY)
    with pytest.raises(DecodeError):
        decode(value, key=KEY, secret=SECRET)


def test_unencodable_results_are_type_errors() -> None:
    for result in ({1: "non-string key"}, object(), {1, 2}, [lambda: 1], 1 + 2j):
        with pytest.raises(TypeError):
            pack(result)


# -- bounded inflating -----------------------------------------------------

MiB = 1024 * 1024


@functools.cache
def bomb(inflated: int, *, secret: bytes | None = None, key: bytes = KEY) -> bytes:
    """A small zlib envelope whose body inflates to ``inflated`` bytes of valid JSON.

    Without a cap it would decode: the cap, not a parse error, is what stops it.
    Built a MiB at a time, so making it never holds the inflated body.
    """
    head = b'{"v":"'
    tail = b'","t":null,"c":1.0,"d":0.0}'
    packer = zlib.compressobj(1)
    parts = [packer.compress(head)]
    run = inflated - len(head) - len(tail)
    chunk = b"a" * MiB
    for _ in range(run // MiB):
        parts.append(packer.compress(chunk))
    parts.append(packer.compress(b"a" * (run % MiB) + tail))
    parts.append(packer.flush())
    body = b"".join(parts)
    if secret is None:
        return bytes((0x11,)) + body  # format 1, zlib
    header = 0x13  # format 1, zlib, signed
    mac = hashlib.blake2b(key=secret, digest_size=16)
    for part in (key, bytes((header,)), body):
        mac.update(part)
    return bytes((header,)) + mac.digest() + body


def peak_bytes_while(fn: Callable[[], object]) -> int:
    """The peak traced allocation while ``fn()`` runs (what it raises is swallowed)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        try:
            fn()
        except DecodeError:
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_default_cap_is_public_and_sane() -> None:
    assert MAX_DECODED_BYTES == 64 * MiB
    with pytest.raises(DecodeError, match=f"inflates past {MAX_DECODED_BYTES} bytes"):
        decode(bomb(MAX_DECODED_BYTES + 1), key=KEY)


@pytest.mark.parametrize("decoder", [decode, decode_envelope], ids=lambda fn: fn.__name__)
@pytest.mark.parametrize("secret", [None, SECRET], ids=["unsigned", "signed"])
def test_a_decompression_bomb_is_refused_without_inflating_it(
    secret: bytes | None, decoder: Callable[..., Any]
) -> None:
    # A signed store's writer can plant one only if the secret leaked; an unsigned one, anyone.
    inflated = 50_000_000
    value = bomb(inflated, secret=secret)
    assert len(value) < inflated // 50  # small on the wire
    cap = 1 * MiB
    with pytest.raises(DecodeError, match=f"inflates past {cap} bytes"):
        decoder(value, key=KEY, secret=secret, max_size=cap)
    peak = peak_bytes_while(lambda: decoder(value, key=KEY, secret=secret, max_size=cap))
    # The cap bounds memory, not the bomb's size: the pieces inflated so far, one
    # more step, zlib's window. Refusing costs no more than a quarter over the cap.
    assert peak < 1.25 * cap < inflated // 15, peak
    # With no cap a smaller one is a valid entry: only the cap stops it.
    assert decode(bomb(4 * MiB, secret=secret), key=KEY, secret=secret, max_size=None).value


def test_a_value_at_the_cap_decodes_and_one_byte_over_does_not() -> None:
    result = {"text": "spam " * 2000, "scores": [0.5] * 100}
    value = pack(result)
    assert value[0] & 0x01  # compressed
    size = len(zlib.decompress(value[1:]))
    assert decode(value, key=KEY, max_size=size).value == result
    assert decode_envelope(value, key=KEY, max_size=size)["v"] == result
    with pytest.raises(DecodeError, match=f"inflates past {size - 1} bytes"):
        decode(value, key=KEY, max_size=size - 1)
    signed = pack(result, secret=SECRET)
    assert decode(signed, key=KEY, secret=SECRET, max_size=size).value == result
    with pytest.raises(DecodeError, match="inflates past"):
        decode(signed, key=KEY, secret=SECRET, max_size=size - 1)


def test_normal_compressed_values_round_trip_under_the_default_and_no_cap() -> None:
    result: dict[str, Any] = {"text": "spam " * 500, "array": np.arange(1000, dtype=np.int32)}
    value = pack(result)
    assert value[0] & 0x01
    for max_size in (MAX_DECODED_BYTES, None):
        got = decode(value, key=KEY, max_size=max_size).value
        assert got["text"] == result["text"]
        assert_same_array(got["array"], result["array"])


def test_only_inflating_is_capped() -> None:
    # An uncompressed value is already as large as it will get: the cap does not apply.
    value = pack({"label": "ok"})
    assert value[0] == 0x10
    assert decode(value, key=KEY, max_size=0).value == {"label": "ok"}
    assert decode_envelope(value, key=KEY, max_size=0)["v"] == {"label": "ok"}


def test_truncated_and_negative_caps() -> None:
    value = pack({"text": "spam " * 500})
    for max_size in (MAX_DECODED_BYTES, None):
        with pytest.raises(DecodeError, match="corrupt"):
            decode(value[:-4], key=KEY, max_size=max_size)  # the stream ends early
    with pytest.raises(ValueError, match="max_size"):
        decode(value, key=KEY, max_size=-1)


async def test_a_planted_bomb_is_a_corrupt_miss_that_is_replaced() -> None:
    cache = DecisionCache(MemoryStore())
    runs: list[str] = []

    @cached_prediction(cache)
    async def classify(text: str) -> dict[str, Any]:
        runs.append(text)
        return {"label": "ham", "text": text}

    key = classify.key("hello")
    # Bigger than the default cap, so it is refused whatever cap the engine passes.
    planted = bomb(MAX_DECODED_BYTES + 36 * MiB, key=key)
    await cache.store.add(key, planted, None)
    assert await classify("hello") == {"label": "ham", "text": "hello"}
    assert runs == ["hello"]
    assert cache.stats()["corrupt"] == 1
    entry = await cache.store.get(key)
    assert entry is not None and entry.value != planted
    assert decode(entry.value, key=key).value == {"label": "ham", "text": "hello"}
    assert await classify("hello") == {"label": "ham", "text": "hello"}  # a hit now
    assert runs == ["hello"]
    assert cache.stats()["hits"] == 1


@pytest.mark.parametrize("max_entry_bytes", [1024 * 1024, 256 * 1024])
def test_a_cache_refuses_a_bomb_within_a_quarter_over_its_cap(max_entry_bytes: int) -> None:
    # The cap follows max_entry_bytes (64 times it: 64 MiB by default), as documented.
    cache = DecisionCache(MemoryStore(), max_entry_bytes=max_entry_bytes)
    cap = cache.engine.max_decoded_bytes
    assert cap == 64 * max_entry_bytes
    value = bomb(200_000_000)  # 200 MB inflated; under 1 MB in the store
    with pytest.raises(DecodeError, match=f"inflates past {cap} bytes"):
        cache.engine.decode(KEY, value)
    peak = peak_bytes_while(lambda: cache.engine.decode(KEY, value))
    assert peak < 1.25 * cap, (peak, cap)
