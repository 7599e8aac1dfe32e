"""A decision that would inflate past the read cap is not stored.

Reads refuse an entry that inflates past ``max_decoded_bytes`` (64 times
``max_entry_bytes`` by default) as a decompression bomb. A result that
compresses better than that (a mostly-zero mask) must be refused on write,
counted ``too_large``, rather than stored and then refused on every read as
``corrupt`` (a false tampering signal) while the model runs every call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import numpy
import pytest

from asyncache import DecisionCache, cached_prediction
from asyncache.stores import DecisionStore

from ..stores.test_contract import store_of


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[DecisionStore]:
    async with store_of(request.param, request, tmp_path) as made:
        yield made


def _mask(side: int) -> numpy.ndarray:
    mask = numpy.zeros((side, side), dtype=numpy.float32)
    mask[side // 4 : side // 3, side // 4 : side // 3] = 1.0
    return mask


async def _three_calls(cache: DecisionCache, side: int) -> list[int]:
    runs: list[int] = []

    @cached_prediction(cache, namespace="masks")
    async def segment(image: int) -> numpy.ndarray:
        runs.append(image)
        return _mask(side)

    for _ in range(3):
        assert numpy.array_equal(await segment(7), _mask(side))
    return runs


async def test_a_result_inflating_past_the_read_cap_is_not_stored(store: DecisionStore) -> None:
    # 512 x 512 float32: 1 MiB of array, ~1.4 MB of envelope, a few KiB compressed.
    cache = DecisionCache(store, max_entry_bytes=16 * 1024, store_timeout=30)
    runs = await _three_calls(cache, 512)
    stats = cache.stats()
    assert (stats["corrupt"], stats["too_large"], stats["hits"]) == (0, 3, 0)
    assert len(runs) == 3
    assert await store.count() == 0
    await cache.aclose()


async def test_a_result_within_the_read_cap_is_stored_and_hit(store: DecisionStore) -> None:
    # 64 x 64: the envelope inflates to ~23 KB, under the 1 MiB cap of 16 KiB entries.
    cache = DecisionCache(store, max_entry_bytes=16 * 1024, store_timeout=30)
    runs = await _three_calls(cache, 64)
    stats = cache.stats()
    assert (stats["corrupt"], stats["too_large"], stats["hits"]) == (0, 0, 2)
    assert len(runs) == 1
    await cache.aclose()


async def test_the_issues_mask_under_default_settings() -> None:
    # The reported case: a 4096 x 4096 mostly-zero float32 mask compresses past 64:1.
    cache = DecisionCache()
    runs = await _three_calls(cache, 4096)
    stats = cache.stats()
    assert (stats["corrupt"], stats["too_large"]) == (0, 3)
    assert len(runs) == 3
    await cache.aclose()
