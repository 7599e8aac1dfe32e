"""ShelfStore against asyncache's store contract: run it with `pytest test_shelf_store.py`."""

from collections.abc import AsyncIterator

import pytest_asyncio
import shelf_store  # noqa: F401 (registers shelf://)

from asyncache import DecisionStore, open_store
from asyncache.testing import StoreContract


class TestShelfStore(StoreContract):
    @pytest_asyncio.fixture
    async def store(self) -> AsyncIterator[DecisionStore]:
        store = open_store("shelf://")  # a fresh, empty store for every test
        yield store
        await store.aclose()
