"""``asyncache copy``, ``export`` and ``import``: real SQLite files, a real redis-server."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from asyncache import DecisionCache, open_store
from asyncache.stores import DecisionStore, Entry, EntryScan

from ..support.stores import fill
from .test_cli import one_line_error, run

SECRET = "copy-test-secret"


async def _walk(url: str) -> dict[bytes, Entry]:
    store = open_store(url)
    try:
        assert isinstance(store, EntryScan)
        return {key: entry async for batch in store.entries() for key, entry in batch}
    finally:
        await store.aclose()


async def _decide(url: str, namespace: str, inputs: list[int]) -> dict[int, Any]:
    """Decisions of a signed cache named ``namespace`` over ``url``: computed, or hits."""
    computed: list[int] = []

    async def model(x: int) -> dict[str, int]:
        computed.append(x)
        return {"label": x * 10}

    async with DecisionCache(open_store(url), namespace=namespace, ttl=3600, secret=SECRET) as c:
        answers = {
            x: await c.get_or_compute(c.key(x, namespace="f"), lambda x=x: model(x)) for x in inputs
        }
        answers["computed"] = computed
        return answers


@pytest.fixture
def recorded(tmp_path: Path) -> str:
    """A SQLite file with 3 signed decisions of ``triage``, 2 of ``spam`` and one expired entry."""
    url = f"sqlite:///{tmp_path / 'recorded.db'}"

    async def decide() -> None:
        await _decide(url, "triage", [1, 2, 3])
        await _decide(url, "spam", [1, 2])

    asyncio.run(decide())
    fill(url, [(b"x" * 16, b"gone", time.time() - 5)])
    return url


def test_copy_sqlite_into_redis_keeps_values_expiries_and_the_first_decision(
    recorded: str, redis_url: str, redis_prefix: str
) -> None:
    pytest.importorskip("redis")
    destination = f"{redis_url}?prefix={redis_prefix}"
    source = asyncio.run(_walk(recorded))
    triage = {k: e for k, e in source.items() if b'"n":"triage"' in e.value}
    assert len(source) == 5 and len(triage) == 3
    held_key = next(iter(triage))

    async def hold() -> None:  # the fleet already decided one of them
        store = open_store(destination)
        await store.add(held_key, b"the fleet's own decision", None)
        await store.aclose()

    asyncio.run(hold())
    result = run("copy", recorded, destination, "--namespace", "triage")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"copied 2 entries from {recorded} to {destination} in ")
    assert "  1 entry kept as the destination had them (a live decision there wins)" in lines
    assert "  2 entries skipped: not of namespace 'triage'" in lines
    assert "copying" in result.stderr  # the progress bar

    copied = asyncio.run(_walk(destination))
    assert copied[held_key] == Entry(b"the fleet's own decision", None)
    for key, entry in triage.items():
        if key != held_key:
            assert copied[key] == entry  # the same bytes (still signed), the same expiry
    assert set(copied) == set(triage)

    # The copies are decisions the fleet's cache serves as hits, their signatures intact;
    # only the held key (not a valid envelope) is computed again.
    keys = DecisionCache(namespace="triage")
    [held_input] = [x for x in (1, 2, 3) if keys.key(x, namespace="f") == held_key]
    answers = asyncio.run(_decide(destination, "triage", [1, 2, 3]))
    assert answers.pop("computed") == [held_input]
    assert answers == {x: {"label": x * 10} for x in (1, 2, 3)}


def test_a_copy_again_adds_nothing(recorded: str, tmp_path: Path) -> None:
    destination = f"sqlite:///{tmp_path / 'fleet.db'}"  # created by the copy
    first = run("copy", recorded, destination, "--no-progress")
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("copied 5 entries")  # the expired one is not live
    again = run("copy", recorded, destination, "--json")
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert {k: summary[k] for k in ("read", "added", "same", "kept")} == {
        "read": 5,
        "added": 0,
        "same": 5,
        "kept": 0,
    }
    assert asyncio.run(_walk(destination)) == {
        k: e for k, e in asyncio.run(_walk(recorded)).items() if e.value != b"gone"
    }


def test_copy_refuses_the_same_store_and_a_missing_source(recorded: str, tmp_path: Path) -> None:
    assert "same store" in one_line_error(run("copy", recorded, recorded))
    missing = tmp_path / "missing.db"
    assert f"no such file: {missing}" in one_line_error(
        run("copy", f"sqlite:///{missing}", recorded)
    )


def test_export_then_import_round_trips_exactly(recorded: str, tmp_path: Path) -> None:
    exported = run("export", recorded)
    assert exported.returncode == 0, exported.stderr
    assert exported.stderr.strip().endswith(f"exported 5 entries from {recorded}")
    records = [json.loads(line) for line in exported.stdout.splitlines()]
    assert [r["key"] for r in records] == sorted(r["key"] for r in records)  # SQLite: key order
    assert sorted(r["namespace"] for r in records) == ["spam", "spam", "triage", "triage", "triage"]
    source = asyncio.run(_walk(recorded))
    for record in records:
        entry = source[bytes.fromhex(record["key"])]
        assert base64.b64decode(record["value"]) == entry.value
        assert record["expires_at"] == entry.expires_at

    dump = tmp_path / "decisions.jsonl"
    dump.write_text(exported.stdout)
    copy = f"sqlite:///{tmp_path / 'replayed.db'}"
    imported = run("import", copy, str(dump))
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith(f"imported 5 entries into {copy}")
    assert asyncio.run(_walk(copy)) == {k: e for k, e in source.items() if e.value != b"gone"}
    again = run("import", copy, stdin=exported.stdout)  # no file: stdin
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[1:] == ["  5 entries already there"]


def test_export_of_one_namespace_to_a_file(recorded: str, tmp_path: Path) -> None:
    out = tmp_path / "spam.jsonl"
    result = run("export", recorded, "--namespace", "spam", "-o", str(out), "--no-progress")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert [json.loads(line)["namespace"] for line in out.read_text().splitlines()] == [
        "spam",
        "spam",
    ]
    assert "exported 2 entries" in result.stderr


def test_import_skips_what_expired_and_checks_every_line_first(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'target.db'}"
    live = {"key": "01" * 16, "value": base64.b64encode(b"v").decode(), "expires_at": None}
    dead = {**live, "key": "02" * 16, "expires_at": time.time() - 1}
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps(live) + "\n\n" + json.dumps(dead) + "\n")
    result = run("import", url, str(good), "--no-progress")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith("imported 1 entry into")
    assert "  1 entry skipped: expired" in result.stdout.splitlines()

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({**live, "key": "03" * 16}) + "\n" + '{"key": "zz"}\n')
    assert f"{bad}:2: expected key (hex) and value (base64)" in one_line_error(
        run("import", url, str(bad))
    )
    assert set(asyncio.run(_walk(url))) == {bytes.fromhex("01" * 16)}  # line 1 was not added


def test_a_store_that_cannot_list_its_entries_is_one_line(tmp_path: Path) -> None:
    """A third-party store without ``entries`` (a registered scheme) cannot be copied."""
    plugin = tmp_path / "plainstore.py"
    plugin.write_text(
        "from asyncache.stores import MemoryStore, register_store\n"
        "class Plain:\n"
        "    def __init__(self): self.inner = MemoryStore()\n"
        "    def __getattr__(self, name):\n"
        "        if name == 'entries': raise AttributeError(name)\n"
        "        return getattr(self.inner, name)\n"
        "register_store('plain', lambda url: Plain())\n"
    )
    code = (
        "import sys, plainstore; from asyncache.cli import main; "
        "sys.exit(main(['copy', 'plain://', 'memory://']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 2, result.stderr
    assert "plain://: Plain cannot list its entries" in result.stderr


def test_entries_is_not_required_of_a_decision_store() -> None:
    """``EntryScan`` is a capability of its own: a store without it is still a store."""

    class Minimal:
        async def get(self, key: bytes) -> None: ...
        async def get_many(self, keys: Any) -> list[None]: ...
        async def add(self, key: bytes, value: bytes, expires_at: Any) -> Entry: ...
        async def add_many(self, items: Any) -> list[Entry]: ...
        async def renew(self, key: bytes, expires_at: Any) -> bool: ...
        async def prune(self) -> int: ...
        async def count(self) -> int: ...
        async def clear(self) -> None: ...
        async def aclose(self) -> None: ...

    assert isinstance(Minimal(), DecisionStore)
    assert not isinstance(Minimal(), EntryScan)


@pytest.mark.parametrize(
    "key",
    [b"", b"\x01", bytes(300), b"lease:" + bytes(range(16)), bytes(15), bytes(17)],
    ids=["0 bytes", "1 byte", "300 bytes", "a lease key", "15 bytes", "17 bytes"],
)
def test_import_refuses_keys_the_cache_never_makes(tmp_path: Path, key: bytes) -> None:
    # A line keyed "lease:" + K would land on K's lease key in Redis, with no expiry.
    url = f"sqlite:///{tmp_path / 'target.db'}"
    value = base64.b64encode(b"v").decode()
    lines = tmp_path / "keys.jsonl"
    good = {"key": "01" * 16, "value": value, "expires_at": None}
    lines.write_text(json.dumps(good) + "\n" + json.dumps({**good, "key": key.hex()}) + "\n")
    error = one_line_error(run("import", url, str(lines), module=True))
    assert f"{lines}:2: a key is 16 bytes (32 hex digits), not {len(key)}" in error
    assert not (tmp_path / "target.db").exists() or not asyncio.run(_walk(url))
