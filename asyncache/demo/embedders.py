"""Sentence embedders for all-MiniLM-L6-v2: texts in, unit-norm vectors out.

Each embedder is a ``PredictionModel`` whose ``predict_batch(texts)`` returns
one ``float32`` vector of 384 numbers per text: ``torch_embedder`` runs the
packaged weights through ``BertEncoder``, ``onnx_embedder`` runs a file that
``model_files.build`` wrote. Both tokenize with ``TextTokenizer``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..adapters.model import PredictionModel
from ..errors import ConfigurationError

try:
    import numpy as np
    from tokenizers import Tokenizer
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("MiniLMDecider needs: pip install 'asyncache-ml[onnx]' (or [torch])") from exc

__all__ = ["TextTokenizer", "onnx_embedder", "torch_embedder"]


class TextTokenizer:
    """Texts -> padded ``int64`` ids and attention masks (thread-safe: no state changes)."""

    def __init__(self, path: Path, max_length: int) -> None:
        self.tokenizer = Tokenizer.from_file(str(path))
        self.tokenizer.enable_truncation(max_length)
        # The packaged tokenizer pads every text to 128 tokens; pad to the batch's longest.
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

    def __call__(self, texts: Sequence[str]) -> tuple[Any, Any]:
        encodings = self.tokenizer.encode_batch(list(texts))
        ids = np.array([encoding.ids for encoding in encodings], dtype=np.int64)
        mask = np.array([encoding.attention_mask for encoding in encodings], dtype=np.int64)
        return ids, mask


def torch_embedder(source: Path, device: str, dtype: str, max_length: int) -> PredictionModel:
    """A ``TorchModel`` over the Hugging Face directory ``source``.

    ``dtype`` names a ``torch`` dtype (``"float32"``, ``"bfloat16"``, ...);
    the vectors come back as ``float32`` on the CPU whatever it is.
    """
    # Imported here, not above: the ONNX backends must work without torch.
    import torch

    from ..adapters.torch import TorchModel
    from .bert import BertEncoder

    tokenize = TextTokenizer(source / "tokenizer.json", max_length)

    def preprocess(texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        ids, mask = tokenize(texts)
        return torch.from_numpy(ids), torch.from_numpy(mask)

    def postprocess(outputs: torch.Tensor, texts: Sequence[str]) -> list[Any]:
        return list(outputs.to("cpu", torch.float32).numpy())

    return TorchModel(
        BertEncoder.from_pretrained(source),
        device=device,
        dtype=getattr(torch, dtype),
        preprocess=preprocess,
        postprocess=postprocess,
    )


def onnx_embedder(
    path: Path, tokenizer: Path, device: str, max_length: int, threads: int | None
) -> PredictionModel:
    """An ``OnnxModel`` over the exported file ``path``.

    Raises:
        ConfigurationError: ``device`` is neither ``"cpu"`` nor ``"cuda[:N]"``.
    """
    from ..adapters.onnx import OnnxModel

    tokenize = TextTokenizer(tokenizer, max_length)

    def preprocess(texts: Sequence[str]) -> dict[str, Any]:
        ids, mask = tokenize(texts)
        return {"input_ids": ids, "attention_mask": mask}

    def postprocess(outputs: list[Any], texts: Sequence[str]) -> list[Any]:
        return list(outputs[0])

    if device == "cpu":
        providers: tuple[Any, ...] = ("CPUExecutionProvider",)
    elif device.startswith("cuda"):
        index = int(device.partition(":")[2] or 0)
        providers = (("CUDAExecutionProvider", {"device_id": index}), "CPUExecutionProvider")
    else:
        raise ConfigurationError(f"device must be 'cpu' or 'cuda[:N]' for ONNX, not {device!r}")
    return OnnxModel(
        path,
        providers=providers,
        intra_op_threads=threads,
        preprocess=preprocess,
        postprocess=postprocess,
    )
