"""The docs site: every page is in the nav, and every code sample is a tested example."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SNIPPET = re.compile(r'^--8<-- "([^"]+?)(?::[\w-]+)?"$', re.M)
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)


def nav_pages() -> list[str]:
    """The pages named in mkdocs.yml's nav (read as text: no YAML dependency)."""
    text = (ROOT / "mkdocs.yml").read_text()
    nav = text.split("\nnav:\n", 1)[1]
    block = re.split(r"\n(?=\S)", nav, maxsplit=1)[0]
    return re.findall(r":\s*(\S+\.md)\s*$", block, re.M)


def test_the_nav_lists_every_page_once() -> None:
    pages = nav_pages()
    assert len(pages) == len(set(pages)), pages
    on_disk = sorted(path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md"))
    assert sorted(pages) == on_disk


def typed_samples(page: Path) -> list[str]:
    """First lines of the Python code blocks in ``page`` that are not ``--8<--`` includes."""
    return [
        body.strip().splitlines()[0]
        for language, body in FENCE.findall(page.read_text())
        if language in ("python", "py") and not SNIPPET.fullmatch(body.strip())
    ]


def test_every_python_sample_is_an_included_example() -> None:
    # A sample typed into a page is never run; one included from examples/ is, by
    # tests/test_examples.py.
    # No page is let off: every Python block is one include of a checked example.
    typed = {
        page.relative_to(DOCS).as_posix(): samples
        for page in sorted(DOCS.rglob("*.md"))
        if (samples := typed_samples(page))
    }
    assert not typed, f"typed python samples (include an example instead): {typed}"


def test_included_files_exist_and_are_examples() -> None:
    for page in sorted(DOCS.rglob("*.md")):
        for path in SNIPPET.findall(page.read_text()):
            assert path.startswith("examples/"), f"{page.name} includes {path}"
            assert (ROOT / path).is_file(), f"{page.name} includes missing {path}"


def test_every_example_is_shown_somewhere() -> None:
    shown = {path for page in DOCS.rglob("*.md") for path in SNIPPET.findall(page.read_text())}
    examples = {f"examples/{path.name}" for path in (ROOT / "examples").glob("*.py")}
    assert examples <= shown, f"examples no page includes: {sorted(examples - shown)}"
