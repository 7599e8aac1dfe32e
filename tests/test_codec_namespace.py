"""The envelope records the namespace of the cache that wrote it (``"n"``), for tools."""

from __future__ import annotations

import pytest

from asyncache import DecisionCache
from asyncache.cli.entries import namespace_of
from asyncache.codec import decode, decode_envelope, encode, normalize_secret
from asyncache.errors import DecodeError

KEY = b"k" * 16


@pytest.mark.parametrize("result", [{"label": "refund"}, "x" * 500], ids=["plain", "compressed"])
def test_the_namespace_rides_in_the_envelope_and_decoding_ignores_it(result: object) -> None:
    value = encode(
        result, ttl=60.0, created_at=1.0, compute_seconds=0.5, key=KEY, namespace="triage"
    )
    assert decode_envelope(value, key=KEY)["n"] == "triage"
    assert decode(value, key=KEY).value == result
    assert namespace_of(KEY, value) == "triage"
    bare = encode(result, ttl=60.0, created_at=1.0, compute_seconds=0.5, key=KEY)
    assert "n" not in decode_envelope(bare, key=KEY)
    assert namespace_of(KEY, bare) is None


def test_a_signed_envelope_names_its_namespace_without_the_secret() -> None:
    secret = normalize_secret("s3cr3t")
    value = encode(
        1, ttl=None, created_at=1.0, compute_seconds=0.0, key=KEY, secret=secret, namespace="a"
    )
    assert namespace_of(KEY, value) == "a"  # read, not trusted
    assert decode(value, key=KEY, secret=secret).value == 1  # still verifies
    forged = value[:-1] + bytes([value[-1] ^ 1])
    with pytest.raises(DecodeError):
        decode(forged, key=KEY, secret=secret)
    with pytest.raises(DecodeError):
        namespace_of(KEY, b"not an envelope")


async def test_a_cache_writes_its_namespace_and_only_its_own() -> None:
    named, unnamed = DecisionCache(namespace="triage"), DecisionCache()
    for cache in (named, unnamed):
        key = cache.key("text", namespace="f")
        await cache.get_or_compute(key, lambda: _answer())
        entry = await cache.store.get(key)
        assert entry is not None
        expected = "triage" if cache is named else None
        assert namespace_of(key, entry.value) == expected
    named.namespace = "renamed"  # a setting like the others: the next entries say so
    key = named.key("other", namespace="f")
    await named.get_or_compute(key, lambda: _answer())
    entry = await named.store.get(key)
    assert entry is not None and namespace_of(key, entry.value) == "renamed"


async def _answer() -> str:
    return "refund"
