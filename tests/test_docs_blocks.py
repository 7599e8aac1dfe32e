"""The docs' Python code blocks run as copied.

Each block is rendered as the site shows it (``pymdownx.snippets``: a whole
file, or the lines between ``[start:name]`` and ``[end:name]`` dedented), then:

- every block names nothing it does not define or import, or that an earlier
  block of its page does not (a reader copies a page's blocks in order); the
  few blocks that show a pattern around the reader's own model are listed in
  ``FRAGMENTS`` with the names they leave to the reader, so a new one is noticed;
- every self-contained section is run on its own in a fresh interpreter, in
  an empty directory, as copied (top-level ``await`` as in ``python -m asyncio``).
  Whole files are run by ``tests/test_examples.py``.

``docs/stores.md``'s own-store block (``DictStore``) failed as copied with
``NameError: Entry`` (and needed ``Sequence`` and ``time``): this is what keeps it fixed.
"""

from __future__ import annotations

import builtins
import re
import subprocess
import symtable
import sys
import textwrap
from pathlib import Path

import pytest

from .support import subprocess_env

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SNIPPET = re.compile(r'^--8<-- "([^"]+?)(?::([\w-]+))?"$', re.M)
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
# What every module has without defining it.
MODULE_NAMES = frozenset({"__file__", "__name__", "__doc__"})
# Blocks that show a pattern around the reader's own objects (their model, their
# helpers), with the names they leave to the reader: (page, include) -> names.
_FRAMEWORK_DEMO = frozenset({"CACHED", "calls", "decide"})  # the page's shared demo model
FRAGMENTS: dict[tuple[str, str], frozenset[str]] = {
    ("middleware.md", "examples/asgi_frameworks.py:litestar"): _FRAMEWORK_DEMO,
    ("middleware.md", "examples/asgi_frameworks.py:quart"): _FRAMEWORK_DEMO,
    ("middleware.md", "examples/asgi_frameworks.py:django"): _FRAMEWORK_DEMO,
    ("offload.md", "examples/offload_recipes.py:thread"): frozenset({"model"}),
    ("offload.md", "examples/offload_recipes.py:batch"): frozenset({"item", "items", "model"}),
    ("offload.md", "examples/offload_recipes.py:shared"): frozenset(
        {"cpu", "gpu", "int8_model", "torch_model"}
    ),
}
# Files a block reads beside it: a module an earlier block of its page shows as a file
# (its first line names it), as the reader saved it, or the reader's own model file.
BESIDE: dict[tuple[str, str], dict[str, str]] = {
    ("offload.md", "examples/offload_recipes.py:process"): {
        "models.py": '--8<-- "examples/models.py:models"',
        "forest.json": '{"weights": [0.5, 0.25], "bias": 1.0}',
    },
}
# Runs a block as copied into ``python -m asyncio``: top-level await allowed.
RUNNER = """
import ast, asyncio, sys
code = compile(sys.stdin.read(), "<docs block>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
outcome = eval(code, {"__name__": "__main__"})
if outcome is not None:
    asyncio.run(outcome)
"""


def _section(path: str, name: str) -> str:
    lines: list[str] = []
    inside = False
    for line in (ROOT / path).read_text().splitlines():
        if f"[start:{name}]" in line:
            inside = True
        elif f"[end:{name}]" in line:
            inside = False
        elif inside:
            lines.append(line)
    assert lines, f"{path} has no section {name}"
    return textwrap.dedent("\n".join(lines)) + "\n"


def _rendered(body: str) -> str:
    """A block as the site shows it: its includes replaced by what they include."""

    def include(found: re.Match[str]) -> str:
        path, name = found[1], found[2]
        return (ROOT / path).read_text() if name is None else _section(path, name)

    return SNIPPET.sub(include, body)


def _blocks() -> list[tuple[str, str, str]]:
    """Every Python block of the docs: (page, the block as written, as rendered)."""
    found = []
    for page in sorted(DOCS.glob("*.md")):
        for language, body in FENCE.findall(page.read_text()):
            if language in ("python", "py"):
                found.append((page.name, body.strip(), _rendered(body)))
    return found


def _defined(code: str) -> set[str]:
    table = symtable.symtable(code, "<docs block>", "exec")
    return {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported()}


def _undefined(code: str) -> set[str]:
    """The global names ``code`` reads but neither defines, imports nor has as builtins."""
    table = symtable.symtable(code, "<docs block>", "exec")
    defined = _defined(code) | MODULE_NAMES
    missing: set[str] = set()
    todo = [table]
    while todo:
        scope = todo.pop()
        for symbol in scope.get_symbols():
            name = symbol.get_name()
            module_level = scope.get_type() == "module" or symbol.is_global()
            if (
                module_level
                and symbol.is_referenced()
                and name not in defined
                and not hasattr(builtins, name)
            ):
                missing.add(name)
        todo.extend(scope.get_children())
    return missing


def _include(written: str) -> str:
    found = SNIPPET.fullmatch(written)
    return written if found is None else found[0].split('"')[1]


def test_every_block_names_only_what_it_or_its_page_defines() -> None:
    wrong: dict[str, list[str]] = {}
    for page in sorted({page for page, _, _ in _blocks()}):
        earlier: set[str] = set()
        for where, written, code in _blocks():
            if where != page:
                continue
            left = _undefined(code) - earlier
            allowed = FRAGMENTS.get((page, _include(written)), frozenset())
            if left != allowed:
                wrong[f"{page}: {_include(written)}"] = sorted(left ^ allowed)
            earlier |= _defined(code)
    assert not wrong, f"blocks that do not run as copied (names to import or define): {wrong}"


def _sections() -> list[tuple[str, str, str]]:
    """The self-contained blocks that include a section (whole files run elsewhere)."""
    return [
        (page, _include(written), code)
        for page, written, code in _blocks()
        if ":" in _include(written) and not _undefined(code)
    ]


def test_the_own_store_block_is_a_self_contained_section() -> None:
    assert ("stores.md", "examples/store_recipes.py:protocol") in {
        (page, include) for page, include, _ in _sections()
    }


@pytest.mark.parametrize(
    ("page", "include", "code"),
    _sections(),
    ids=[f"{page}-{include.rsplit(':', 1)[1]}" for page, include, _ in _sections()],
)
def test_a_self_contained_block_runs_as_copied(
    page: str, include: str, code: str, tmp_path: Path
) -> None:
    for name, written in BESIDE.get((page, include), {}).items():
        (tmp_path / name).write_text(_rendered(written))
    done = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=code,
        cwd=tmp_path,
        env=subprocess_env(str(ROOT)),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, f"{page} ({include}) failed as copied:\n{done.stderr[-3000:]}"
