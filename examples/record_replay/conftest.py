"""CI replays the recorded decisions: the model never runs, and a ticket that was never
recorded fails its test with ReplayMiss instead of calling the model."""

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

HERE = Path(__file__).resolve().parent
os.environ.setdefault("ASYNCACHE_MODE", "replay")
os.environ.setdefault("ASYNCACHE_STORE_URL", f"sqlite:///{HERE / 'decisions.sqlite'}")


@pytest_asyncio.fixture(scope="session", autouse=True)
async def close_the_cache() -> AsyncIterator[None]:
    yield
    import triage

    await triage.cache.aclose()
