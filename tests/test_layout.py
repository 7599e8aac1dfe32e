"""The package's layout, read from its source with ``ast``: the rules DESIGN.md sets.

- No import circles between modules (imports inside functions and under
  ``TYPE_CHECKING`` count: they are circles that only happen later).
- No ``from X import _name`` across modules, and no reads of another module's
  underscore attributes: parts talk through public names.
- No import of another package's private (underscore) module: a room's
  underscore modules are its own, and other rooms go through its ``__init__``.
- The core (``asyncache/`` outside ``middleware``, ``adapters``, ``demo``,
  ``cli``, ``testing`` and the stores that need a driver) imports only orjson,
  anyio and the standard library.
- The house: at most 12 modules at the package root; the engine, the decorator
  and every store in rooms of their own. A module is as long as its concept:
  there is no line cap.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "asyncache"
# Parts of the package that bind to the outside world, and so may import it.
OUTER = ("middleware", "adapters", "demo", "cli", "testing", "__main__")
# Stores that bind to a driver: outer rooms inside ``stores/``.
OUTER_STORES = ("sqlite", "redis")
CORE_THIRD_PARTY = {"orjson", "anyio", "sniffio"}
# Underscore names of other libraries that are their documented API.
FOREIGN_UNDERSCORE = {
    "_asdict",
    "_exit",
    "_fields",
    "_getframe",
    "_make",
    "_replace",
    "_field_defaults",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def resolve(module: str, node: ast.ImportFrom) -> str:
    """The absolute module an ``ImportFrom`` names."""
    if node.level == 0:
        return node.module or ""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def imports_of(module: str, *, top_level_only: bool = False) -> list[tuple[str, ast.AST]]:
    """Every module ``module`` imports, wherever the import statement is (or only
    those that run when the module is imported: not inside a function)."""
    tree = ast.parse(MODULES[module].read_text())
    found: list[tuple[str, ast.AST]] = []
    nodes = ast.walk(tree) if not top_level_only else _outside_functions(tree)
    for node in nodes:
        if isinstance(node, ast.Import):
            found.extend((alias.name, node) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = resolve(module, node)
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                found.append((submodule if submodule in MODULES else target, node))
    return found


def _outside_functions(tree: ast.AST) -> list[ast.AST]:
    found: list[ast.AST] = []
    pending = [tree]
    while pending:
        node = pending.pop()
        found.append(node)
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                pending.append(child)
    return found


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module in MODULES:
        graph[module] = {
            target for target, _ in imports_of(module) if target in MODULES and target != module
        }
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_the_checker_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_there_are_no_import_circles() -> None:
    assert cycles(import_graph()) == []


def test_no_module_imports_another_modules_underscore_names() -> None:
    offenders = [
        f"{module}: from {resolve(module, node)} import {alias.name}"
        for module in MODULES
        for node in ast.walk(ast.parse(MODULES[module].read_text()))
        if isinstance(node, ast.ImportFrom) and node.module != "__future__"
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]
    assert offenders == []


def private_reads(source: str) -> list[str]:
    """Underscore attributes read off something other than ``self``/``cls`` that this
    module does not define itself."""
    tree = ast.parse(source)
    defined: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            defined.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            defined.add(node.value)  # __slots__ entries
    reads = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and node.attr not in defined
            and node.attr not in FOREIGN_UNDERSCORE
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            reads.append(f"{ast.unparse(node)} (line {node.lineno})")
    return reads


def test_the_private_read_checker_sees_one() -> None:
    assert private_reads("def f(cache):\n    return cache._stats\n") == ["cache._stats (line 2)"]
    assert private_reads("class A:\n    _x = 1\n\ndef f(a):\n    return a._x\n") == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_reads_another_modules_underscore_members(module: str) -> None:
    assert private_reads(MODULES[module].read_text()) == []


def is_outer(module: str) -> bool:
    parts = module.split(".")
    if len(parts) < 2:
        return False
    return parts[1] in OUTER or (parts[1] == "stores" and parts[2:3] in ([s] for s in OUTER_STORES))


def is_core(module: str) -> bool:
    return not is_outer(module)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if is_core(m)))
def test_the_core_imports_only_orjson_anyio_and_the_standard_library(module: str) -> None:
    allowed = CORE_THIRD_PARTY | set(sys.stdlib_module_names)

    def outside(found: list[tuple[str, ast.AST]]) -> set[str]:
        return {t.partition(".")[0] for t, _ in found if not t.startswith("asyncache")} - allowed

    assert outside(imports_of(module, top_level_only=True)) == set()
    # Inside a function only, once the caller's own values or devices need them: numpy for
    # a numpy value handed to the key or codec; torch or onnxruntime to count CUDA devices
    # for a DeviceOffload the caller put on one; trio when the caller runs on it.
    assert outside(imports_of(module)) <= {"numpy", "torch", "onnxruntime", "trio"}
    # The core reaches the outer rooms only through the store registry's strings.
    assert not any(
        is_outer(target) for target, _ in imports_of(module) if target.startswith("asyncache.")
    )


def foreign_private(module: str, targets: list[str]) -> list[str]:
    """The ``targets`` that are underscore modules of a package ``module`` is not in."""
    found = []
    for target in targets:
        parts = target.split(".")
        for depth, part in enumerate(parts):
            if part.startswith("_") and not part.startswith("__"):
                owner = ".".join(parts[:depth])
                if not module.startswith(owner + "."):
                    found.append(target)
                break
    return found


def test_the_private_module_checker_sees_one() -> None:
    assert foreign_private("asyncache.cache", ["asyncache.engine._engine"]) == [
        "asyncache.engine._engine"
    ]
    assert foreign_private("asyncache.engine._many", ["asyncache.engine._engine"]) == []
    assert foreign_private("asyncache.engine.__init__", ["asyncache.engine._engine"]) == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_another_packages_private_module(module: str) -> None:
    # A package's __init__ is inside the package it names.
    inside = module + ".__init__" if MODULES[module].name == "__init__.py" else module
    assert foreign_private(inside, [target for target, _ in imports_of(module)]) == []


def test_the_house_has_its_rooms() -> None:
    root = [p.stem for p in PACKAGE.glob("*.py")]
    assert len(root) <= 12, sorted(root)
    for room in ("engine", "decorator", "stores", "stores/sqlite", "stores/redis"):
        assert (PACKAGE / room / "__init__.py").is_file(), room
    gone = {"meanings", "unshared", "parts", "storing", "recent", "rebuild", "many"}
    assert gone.isdisjoint(root)
