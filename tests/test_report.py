"""``benchmarks/report.py --splice``: one script's section replaced, the page's other bytes kept."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def report(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``benchmarks/report.py``, imported as the scripts import each other."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    return importlib.import_module("report")


PAGE = """# Performance

## Benchmark scripts

### Fleet: a burst

| a |
|---|
| 1 |


### Freshness: at expiry

| old |


### Faults: a stall

text


## Reproduce
"""


def test_splice_replaces_one_section_and_keeps_the_rest(report: ModuleType) -> None:
    new = "### Freshness: at expiry\n\n| new |\n\n\n"
    spliced = report.splice(PAGE, "Freshness: at expiry", new)
    assert spliced == PAGE.replace("| old |", "| new |")
    last = report.splice(PAGE, "Faults: a stall", "### Faults: a stall\n\nnew\n\n\n")
    assert last == PAGE.replace("text\n", "new\n")
    with pytest.raises(ValueError, match="no section"):
        report.splice(PAGE, "Streams", "")


def test_the_performance_page_splices_into_itself(report: ModuleType) -> None:
    page = (ROOT / "docs" / "performance.md").read_text()
    start = page.index("### Freshness")
    section = page[start : page.index("\n### ", start) + 1]
    title = section.splitlines()[0].removeprefix("### ")
    assert report.splice(page, title, section) == page
