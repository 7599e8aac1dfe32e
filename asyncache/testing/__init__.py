"""The store contract as a test suite: run it against a store of your own.

``StoreContract`` holds the tests every ``DecisionStore`` must pass, and
``LeaseStoreContract`` those of the optional ``LeaseStore`` methods. They are
classes of tests without a store (cachetools' ``CacheTestMixin`` pattern):
subclass one in a test module, named so that pytest collects it (``Test...``),
and give it a ``store`` fixture that yields a fresh, empty store and closes it
afterwards. asyncache's own stores run this same suite.

```python
import pytest_asyncio

from asyncache.testing import StoreContract


class TestMyStore(StoreContract):
    @pytest_asyncio.fixture
    async def store(self):
        store = MyStore()  # a fresh, empty store for every test
        yield store
        await store.aclose()
```

A store with leases subclasses both: ``class TestMyStore(StoreContract,
LeaseStoreContract)``; one that can walk its entries (``EntryScan``, which
``asyncache copy`` and ``export`` use) adds ``EntryScanContract``; one that
can forget decisions by tag or scope (``Forgetting``) adds ``ForgetContract``.

What it needs: pytest and pytest-asyncio (0.24 or later). Every test is
marked ``pytest.mark.asyncio``, so the suite runs in pytest-asyncio's strict
mode as in ``asyncio_mode = "auto"``; in strict mode the ``store`` fixture must
be declared with ``pytest_asyncio.fixture`` (``pytest.fixture`` is enough in
auto mode). Each test runs in an event loop of its own (the default function
loop scope), and the fixture is created in that loop. Importing this module
imports pytest; ``import asyncache`` never does.

A few tests sleep a fraction of a second, for an entry or a lease to expire;
none asserts how long a call takes: a slow store passes, a wrong one fails.
"""

from __future__ import annotations

from .forget import ForgetContract
from .leases import LeaseStoreContract
from .scan import EntryScanContract
from .stores import StoreContract

__all__ = ["EntryScanContract", "ForgetContract", "LeaseStoreContract", "StoreContract"]
