"""``open_store`` URLs: a tier's L2 gets its query exactly as written."""

from __future__ import annotations

import pytest

from asyncache.stores import Entry, TieredStore, open_store

from ..support import IN_CI, key

try:
    from asyncache.stores.redis import RedisStore
except ImportError:  # pragma: no cover - depends on the environment
    if IN_CI:
        raise
    pytest.skip("redis-py is not installed", allow_module_level=True)


@pytest.mark.parametrize(("escaped", "prefix"), [("a%2Bb:", "a+b:"), ("a%26b:", "a&b:")])
async def test_a_tier_and_a_plain_store_share_a_percent_encoded_prefix(
    redis_url: str, redis_prefix: str, escaped: str, prefix: str
) -> None:
    # Before: the tier decoded and re-joined the query, so %2B became a space
    # (another prefix) and %26 split the value in two (an unknown option).
    tier = open_store(f"tiered+{redis_url}?prefix={redis_prefix}{escaped}&l1_ttl=30")
    plain = open_store(f"{redis_url}?prefix={redis_prefix}{escaped}")
    try:
        assert isinstance(tier, TieredStore) and isinstance(plain, RedisStore)
        assert isinstance(tier.l2, RedisStore)
        assert tier.l2.prefix == plain.prefix == (redis_prefix + prefix).encode()
        assert tier.l1_ttl == 30.0
        await plain.add(key(1), b"plain", None)
        assert await tier.get(key(1)) == Entry(b"plain", None)
        await tier.add(key(2), b"tiered", None)
        assert await plain.get(key(2)) == Entry(b"tiered", None)
    finally:
        await plain.clear()
        await tier.aclose()
        await plain.aclose()


async def test_only_the_l1_options_leave_the_query() -> None:
    tier = open_store(
        "tiered+redis://localhost?l1_max_entries=7&prefix=x%2By%3A&l1_ttl=&socket_timeout=0.5"
    )
    try:
        assert isinstance(tier, TieredStore) and isinstance(tier.l2, RedisStore)
        assert tier.l2.prefix == b"x+y:"
        assert tier.l1_ttl is None  # l1_ttl= (empty): no cap
        assert tier.l1.max_entries == 7
    finally:
        await tier.aclose()
