"""The recipe of docs/stores.md, "Writing your own store", runs as written.

The page includes the files of ``examples/own_store/``: a third-party store
(``ShelfStore``, registered as ``shelf://``), an app that opens it by URL, the
test module that runs ``asyncache.testing.StoreContract`` against it, and its
pytest configuration. Here they are copied to a fresh directory, as a project of
their own would hold them, and pytest runs there in a subprocess: the contract
passes in pytest-asyncio's strict and auto modes. Stores broken on purpose show
that the contract can fail, and on the rule that was broken.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from asyncache.testing import LeaseStoreContract, StoreContract
from tests.support import subprocess_env

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "examples" / "own_store"
FILES = ("shelf_store.py", "test_shelf_store.py", "app.py", "pytest.ini")
# The contract had these many test cases when it moved to asyncache.testing.
STORE_CONTRACT_CASES_AT_LEAST = 24


def _cases(contract: type) -> list[str]:
    """The test cases pytest makes of ``contract``'s methods, parametrize marks expanded."""
    cases = []
    for name in dir(contract):
        if not name.startswith("test"):
            continue
        ids = [name]
        for mark in getattr(getattr(contract, name), "pytestmark", []):
            if mark.name == "parametrize":
                ids = [f"{case}[{i}]" for case in ids for i in mark.kwargs["ids"]]
        cases.extend(ids)
    return cases


def _project(tmp_path: Path) -> Path:
    """A directory holding the recipe's files, as a third-party project would."""
    for name in FILES:
        shutil.copy(RECIPE / name, tmp_path / name)
    return tmp_path


def _env() -> dict[str, str]:
    return subprocess_env(str(ROOT))


def _pytest(project: Path, *args: str) -> dict[str, str]:
    """Run pytest in ``project``; return each test's outcome by ``Class::test`` id."""
    report = project / "report.xml"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={report}", *args],
        cwd=project,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert report.is_file(), output
    outcomes: dict[str, str] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        test_id = f"{case.get('classname', '').rpartition('.')[2]}::{case.get('name')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = child.tag
        outcomes[test_id] = outcome
    failed = any(outcome != "passed" for outcome in outcomes.values())
    assert result.returncode == (1 if failed else 0), output
    return outcomes


def test_the_contract_still_has_every_case() -> None:
    assert len(_cases(StoreContract)) >= STORE_CONTRACT_CASES_AT_LEAST
    assert len(_cases(LeaseStoreContract)) > 0


@pytest.mark.parametrize("mode", ["strict", "auto"])
def test_the_recipe_store_passes_the_contract(tmp_path: Path, mode: str) -> None:
    project = _project(tmp_path)
    outcomes = _pytest(project, "-o", f"asyncio_mode={mode}", "test_shelf_store.py")
    expected = {f"TestShelfStore::{case}" for case in _cases(StoreContract)}
    assert set(outcomes) == expected
    assert set(outcomes.values()) == {"passed"}, outcomes


def test_the_recipe_app_runs(tmp_path: Path) -> None:
    project = _project(tmp_path)
    result = subprocess.run(
        [sys.executable, "app.py"],
        cwd=project,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.splitlines() == ["long long", "hits: 1 entries: 1"]
    assert not result.stderr


# Stores broken on purpose, each beside a correct one. They build on the
# recipe's ShelfStore through its public methods, as a third party would.
BROKEN = '''
"""ShelfStore variants, some of them wrong on purpose."""

import asyncio
import time

import pytest_asyncio
from shelf_store import ShelfStore

from asyncache import Entry
from asyncache.testing import LeaseStoreContract, StoreContract
from tests.support import subprocess_env


class OverwritingStore(ShelfStore):
    """Wrong: ``add`` replaces a live entry instead of returning it."""

    async def add(self, key, value, expires_at):
        await self.delete(key)
        return await super().add(key, value, expires_at)


class LeasingShelf(ShelfStore):
    """Right: in-process leases, for the lease contract."""

    def __init__(self):
        super().__init__()
        self.leases = {}

    def holder(self, key):
        token, until = self.leases.get(key, (None, 0.0))
        return token if until > time.time() else None

    async def acquire_lease(self, key, token, ttl):
        if self.holder(key) not in (None, token):
            return False
        self.leases[key] = (token, time.time() + ttl)
        return True

    async def release_lease(self, key, token):
        if self.holder(key) == token:
            del self.leases[key]

    async def wait_for_entry(self, key, timeout):
        deadline = time.monotonic() + timeout
        while True:
            entry = await self.get(key)
            if entry is not None:
                return entry
            if self.holder(key) is None or time.monotonic() >= deadline:
                return None
            await asyncio.sleep(min(0.01, max(0.0, deadline - time.monotonic())))


class CarelessLeasingShelf(LeasingShelf):
    """Wrong: anyone may release a lease, not only its holder."""

    async def release_lease(self, key, token):
        self.leases.pop(key, None)


def fixture_of(cls):
    @pytest_asyncio.fixture
    async def store(self):
        store = cls()
        yield store
        await store.aclose()

    return store


class TestOverwritingStore(StoreContract):
    store = fixture_of(OverwritingStore)


class TestLeasingShelf(StoreContract, LeaseStoreContract):
    store = fixture_of(LeasingShelf)


class TestCarelessLeasingShelf(LeaseStoreContract):
    store = fixture_of(CarelessLeasingShelf)
'''


def test_broken_stores_fail_the_contract_on_the_rule_they_break(tmp_path: Path) -> None:
    project = _project(tmp_path)
    (project / "test_broken_stores.py").write_text(textwrap.dedent(BROKEN))
    outcomes = _pytest(project, "test_broken_stores.py")

    def failed(cls: str) -> set[str]:
        return {
            test_id.partition("::")[2]
            for test_id, outcome in outcomes.items()
            if test_id.startswith(f"{cls}::") and outcome != "passed"
        }

    store_cases, lease_cases = _cases(StoreContract), _cases(LeaseStoreContract)
    assert len(outcomes) == 2 * len(store_cases) + 2 * len(lease_cases)
    # The first decision must win: every test that adds twice to a live key notices.
    assert {
        "test_first_add_wins",
        "test_add_many_returns_winners",
        "test_concurrent_adds_without_looking",
    } <= failed("TestOverwritingStore")
    # Nothing else is wrong with it: the tests that add each key once pass.
    assert "test_add_then_get" not in failed("TestOverwritingStore")
    assert "test_values_are_exact_bytes[1MiB]" not in failed("TestOverwritingStore")
    # A correct third-party lease store passes both contracts ...
    assert failed("TestLeasingShelf") == set()
    # ... and one whose leases anyone can release fails exactly that rule.
    assert failed("TestCarelessLeasingShelf") == {"test_only_the_holder_releases"}
