"""Every measured number in the docs and the README is on the generated performance page.

Other pages link to docs/performance.md (which ``benchmarks/report.py`` writes)
instead of quoting measurements that drift from it. A measurement is a time
with a decimal or in micro- or nanoseconds, a ratio such as ``1.49x``, a
throughput, or a percentage with a decimal; settings (``5 ms``, ``1 ms to 30
s``) are whole numbers and stay.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ROOT / "docs" / "performance.md"
MEASUREMENT = re.compile(
    r"\d[\d,]*(?:\.\d+)?\s?(?:µs|us|ns)\b"  # 20 µs, 1.9 us
    r"|\d+\.\d+\s?(?:ms|s)\b"  # 117.0 ms, 0.41s
    r"|\d+(?:\.\d+)?x\b"  # 1.49x, 8x
    r"|\d[\d,]*(?:\.\d+)?\s?(?:req/s|calls/s|hits/s|ops/s)"  # 135 req/s
    r"|\d+\.\d+\s?%"  # 0.09%
)
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])


def _prose(text: str) -> str:
    """The page without its console blocks (what a command prints is not a claim)."""
    return re.sub(r"^```console\n.*?^```$", "", text, flags=re.M | re.S)


@pytest.mark.parametrize("page", [p for p in PAGES if p != GENERATED], ids=lambda p: p.name)
def test_measurements_live_on_the_performance_page(page: Path) -> None:
    found = MEASUREMENT.findall(_prose(page.read_text()))
    assert not found, f"{page.name} quotes measurements; link to performance.md: {found}"


def test_the_pattern_finds_what_it_must() -> None:
    samples = "about 20 µs; 1.25 times; 1.49x a memory hit; 135 req/s; 117.0 ms; 0.09%"
    assert MEASUREMENT.findall(samples) == ["20 µs", "1.49x", "135 req/s", "117.0 ms", "0.09%"]
    assert MEASUREMENT.findall("5 ms by default, buckets from 1 ms to 30 s, 100%") == []
    assert MEASUREMENT.findall(GENERATED.read_text())  # the page itself is all numbers
