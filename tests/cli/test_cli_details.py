"""The command's details: its version, plurals, files that are not stores, memory URLs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from asyncache import __version__, open_store
from asyncache.cli.stats import MEMORY_NOTE
from asyncache.errors import ConfigurationError
from asyncache.stores import MemoryStore

from ..support.stores import fill
from .test_cli import one_line_error, run


def test_version() -> None:
    result = run("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"asyncache {__version__}"


@pytest.fixture
def one_of_each(tmp_path: Path) -> str:
    """A SQLite store with one live entry and one expired entry."""
    url = f"sqlite:///{tmp_path / 'one.db'}"

    fill(url, [(b"a" * 16, b"live", time.time() + 3600), (b"b" * 16, b"gone", time.time() - 60)])
    return url


def test_one_is_singular(one_of_each: str) -> None:
    pruned = run("prune", one_of_each)
    assert pruned.stdout.startswith(f"pruned 1 expired entry from {one_of_each}"), pruned.stdout
    refused = run("clear", one_of_each, stdin="n\n")
    assert f"delete the 1 entry in {one_of_each}? [y/N]" in refused.stdout
    cleared = run("clear", one_of_each, "--yes")
    assert cleared.stdout.strip() == f"cleared {one_of_each} (1 entry)"
    again = run("prune", one_of_each)
    assert again.stdout.startswith("pruned 0 expired entries")


@pytest.mark.parametrize(
    "command",
    [("stats",), ("prune",), ("clear", "--yes"), ("export",), ("copy", "memory://")],
    ids=["stats", "prune", "clear", "export", "copy"],
)
def test_a_file_that_is_not_a_database_is_named(tmp_path: Path, command: tuple[str, ...]) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database, only some words\n" * 50)
    name, *rest = command
    message = one_line_error(run(name, f"sqlite:///{notes}", *rest))
    assert str(notes) in message
    assert "not a database" in message
    assert notes.read_text().startswith("not a database")  # left as it was


def test_stats_of_memory_says_why_it_is_empty() -> None:
    result = run("stats", "memory://")
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == f"asyncache: note: {MEMORY_NOTE}"
    assert "--live" in MEMORY_NOTE
    tiered = run("stats", "memory://", "--json")
    assert json.loads(tiered.stdout)["store"]["entries"] == 0
    assert MEMORY_NOTE in tiered.stderr


def test_a_memory_url_can_say_no_bound() -> None:
    store = open_store("memory://?max_entries=none&max_bytes=None&max_entry_bytes=4096")
    assert isinstance(store, MemoryStore)
    assert (store.max_entries, store.max_bytes, store.max_entry_bytes) == (None, None, 4096)
    shown = json.loads(run("stats", "memory://?max_entries=none", "--json").stdout)["store"]
    assert shown["max_entries"] is None
    for wrong, says in (("zero", r"not an integer \(or none"), ("0", "must be positive")):
        with pytest.raises(ConfigurationError, match=f"max_entries='{wrong}'.*{says}"):
            open_store(f"memory://?max_entries={wrong}")
