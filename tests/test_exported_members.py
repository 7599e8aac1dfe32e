"""The public API: ``asyncache.__all__`` is exactly what the package exports, sorted.

The import time target (< 50 ms over a bare interpreter) is measured by
``benchmarks/hit_path.py``, not asserted here: timing is not behaviour.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types

import asyncache

# Public despite the underscores.
DUNDERS = {"__version__"}
# Optional dependencies the core must never import (STYLE.md: optional parts
# are imported from their own module).
OPTIONAL = (
    "torch",
    "onnxruntime",
    "onnx",
    "numpy",
    "redis",
    "starlette",
    "fastapi",
    "uvicorn",
    "httpx",
    "pydantic",
    "tokenizers",
    "prometheus_client",
    "opentelemetry",
)


def _ruff_order(name: str) -> tuple[int, str]:
    """RUF022's isort-style order: CONSTANTS, then Classes, then everything else."""
    if name.isupper() and len(name) > 1:
        return 0, name
    if name[:1].isupper():
        return 1, name
    return 2, name


def test_all_is_sorted_and_has_no_duplicates() -> None:
    assert asyncache.__all__ == sorted(asyncache.__all__, key=_ruff_order)
    assert len(set(asyncache.__all__)) == len(asyncache.__all__)


def test_all_is_exactly_the_public_names() -> None:
    public = {
        name
        for name in dir(asyncache)
        if (not name.startswith("_") or name in DUNDERS)
        and not isinstance(getattr(asyncache, name), types.ModuleType)
    }
    assert public == set(asyncache.__all__)


def test_every_exported_name_resolves_to_asyncache_code() -> None:
    for name in asyncache.__all__:
        value = getattr(asyncache, name)
        if isinstance(value, type) or callable(value):
            assert value.__module__.startswith("asyncache"), name
    assert isinstance(asyncache.__version__, str)
    assert isinstance(asyncache.KEY_VERSION, str)


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from asyncache import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(asyncache.__all__)


def test_import_asyncache_pulls_in_no_optional_dependency() -> None:
    probe = (
        "import json, sys\n"
        "import asyncache\n"
        f"print(json.dumps(sorted(m for m in {OPTIONAL!r} if m in sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(done.stdout) == []


def test_the_public_api_is_usable_without_optional_dependencies() -> None:
    # A miss and a hit through the decorator, in a fresh interpreter, still import nothing.
    probe = (
        "import asyncio, json, sys\n"
        "from asyncache import DecisionCache, cached_prediction\n"
        "cache = DecisionCache()\n"
        "@cached_prediction(cache)\n"
        "async def f(text: str) -> dict:\n"
        "    return {'label': text}\n"
        "async def main():\n"
        "    assert await f('a') == await f('a') == {'label': 'a'}\n"
        "    assert cache.stats()['hits'] == 1\n"
        "asyncio.run(main())\n"
        f"print(json.dumps(sorted(m for m in {OPTIONAL!r} if m in sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(done.stdout) == []
