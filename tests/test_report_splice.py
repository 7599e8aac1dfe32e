"""``benchmarks/report.py --only NAME --splice`` rewrites one script's section of the
performance page and keeps every other byte of the page as it was."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _report() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_report", ROOT / "benchmarks" / "report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["_report"] = module
    spec.loader.exec_module(module)
    return module


def test_a_spliced_section_replaces_its_own_and_nothing_else() -> None:
    report = _report()
    titles = dict(report.SCRIPTS)
    page = "".join(
        f"## {part}\n\ntext of {part}\n\n"
        if part in ("Run", "Benchmark scripts", "Reproduce")
        else f"### {titles[part]}\n\nnumbers of {part}\n\n#### table\n\n| a |\n\n"
        for part in ("Run", "Benchmark scripts", "fleet", "capacity", "faults", "Reproduce")
    )
    section = f"### {titles['fleet_watch']}\n\nfirst\n\n"
    once = report.splice_section(page, "fleet_watch", section)
    # The page without the section is the page as it was, byte for byte.
    assert once.replace(section, "", 1) == page
    # Spliced again: only the section changes.
    again = report.splice_section(once, "fleet_watch", section.replace("first", "second"))
    assert again == once.replace("\n\nfirst\n\n", "\n\nsecond\n\n", 1)
    # In SCRIPTS' order: before the sections of the scripts after it, after those before.
    assert again.index(section.split("\n")[0]) > again.index(f"### {titles['fleet']}\n")
    assert again.index(section.split("\n")[0]) < again.index(f"### {titles['capacity']}\n")


def test_the_performance_page_has_the_watched_fleets_section() -> None:
    report = _report()
    page = (ROOT / "docs" / "performance.md").read_text()
    assert f"### {dict(report.SCRIPTS)['fleet_watch']}\n" in page
    assert "--only fleet_watch --splice" in page


def test_the_watched_fleet_runs_both_modes_in_the_report() -> None:
    assert _report().SCRIPT_ARGS["fleet_watch"] == ["--both-modes", "--rate", "300"]


def test_the_performance_page_splices_its_freshness_section_into_itself() -> None:
    report = _report()
    page = (ROOT / "docs" / "performance.md").read_text()
    start = page.index(f"### {dict(report.SCRIPTS)['freshness']}\n")
    section = page[start : page.index("\n### ", start) + 1]
    assert "--only freshness" in section  # it was rerun alone, and says how
    assert report.splice_section(page, "freshness", section) == page
