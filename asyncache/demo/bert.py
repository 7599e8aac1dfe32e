"""A BERT sentence encoder built from packaged weights, and its ONNX export.

all-MiniLM-L6-v2 is a 6-layer BERT followed by mean pooling and L2
normalization (the sentence-transformers recipe). Building the forward pass here
keeps loading fast (no ``transformers`` import) and gives the ONNX exporter a
graph with no data-dependent Python branches, so the exported model answers
like the module at every batch size and sequence length.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

try:
    import torch
    import torch.nn.functional as F
    from safetensors.torch import load_file
    from torch import Tensor, nn
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the MiniLM torch backend needs: pip install 'asyncache-ml[torch]' safetensors"
    ) from exc

__all__ = ["BertEncoder", "export_onnx"]


class _Attention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dense = nn.Linear(hidden, hidden)

    def forward(self, x: Tensor, bias: Tensor) -> Tensor:
        batch, length, hidden = x.shape
        shape = (batch, length, self.heads, self.head_dim)
        q = self.query(x).view(shape).transpose(1, 2)
        k = self.key(x).view(shape).transpose(1, 2)
        v = self.value(x).view(shape).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + bias
        context = torch.matmul(scores.softmax(dim=-1), v)
        return self.dense(context.transpose(1, 2).reshape(batch, length, hidden))  # type: ignore[no-any-return]


class _Layer(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int, eps: float) -> None:
        super().__init__()
        self.attention = _Attention(hidden, heads)
        self.attention_norm = nn.LayerNorm(hidden, eps=eps)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.output = nn.Linear(intermediate, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: Tensor, bias: Tensor) -> Tensor:
        x = self.attention_norm(x + self.attention(x, bias))
        return self.output_norm(x + self.output(F.gelu(self.intermediate(x))))  # type: ignore[no-any-return]


class BertEncoder(nn.Module):
    """BERT with mean pooling and L2 normalization: token ids -> unit sentence vectors.

    ``forward(input_ids, attention_mask)`` takes two ``int64`` tensors of shape
    ``(batch, length)`` and returns ``(batch, hidden)`` vectors of norm 1.
    Token type ids are always 0 (one sentence per row).
    """

    def __init__(
        self,
        *,
        vocab_size: int,
        hidden_size: int,
        num_hidden_layers: int,
        num_attention_heads: int,
        intermediate_size: int,
        max_position_embeddings: int,
        type_vocab_size: int,
        layer_norm_eps: float,
    ) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size)
        self.position_embeddings = nn.Embedding(max_position_embeddings, hidden_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden_size)
        self.embeddings_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.layers = nn.ModuleList(
            _Layer(hidden_size, num_attention_heads, intermediate_size, layer_norm_eps)
            for _ in range(num_hidden_layers)
        )

    @classmethod
    def from_pretrained(cls, model_dir: str | Path) -> BertEncoder:
        """Load ``config.json`` and ``model.safetensors`` from a Hugging Face BERT directory.

        Raises:
            FileNotFoundError: a file is missing.
            KeyError: the weights do not match the configuration.
        """
        model_dir = Path(model_dir)
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        if config.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"unsupported activation {config['hidden_act']!r}")
        names = (
            "vocab_size hidden_size num_hidden_layers num_attention_heads intermediate_size"
            " max_position_embeddings type_vocab_size layer_norm_eps"
        ).split()
        encoder = cls(**{name: config[name] for name in names})
        weights = load_file(str(model_dir / "model.safetensors"))
        encoder.load_state_dict(_rename(weights, config["num_hidden_layers"]), strict=True)
        return encoder.eval()

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        length = input_ids.shape[1]
        positions = torch.arange(length, device=input_ids.device).unsqueeze(0)
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(torch.zeros_like(input_ids))
        )
        x = self.embeddings_norm(x)
        mask = attention_mask.to(x.dtype)
        # Padding gets the most negative value of the dtype, so softmax gives it no weight.
        bias = (1.0 - mask[:, None, None, :]) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, bias)
        weights = mask.unsqueeze(-1)
        pooled = (x * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
        return F.normalize(pooled, p=2.0, dim=-1)


def _rename(weights: dict[str, Tensor], layers: int) -> dict[str, Tensor]:
    """Map Hugging Face ``BertModel`` names onto ``BertEncoder``'s (the pooler is unused)."""
    renamed = {
        "word_embeddings.weight": weights["embeddings.word_embeddings.weight"],
        "position_embeddings.weight": weights["embeddings.position_embeddings.weight"],
        "token_type_embeddings.weight": weights["embeddings.token_type_embeddings.weight"],
        "embeddings_norm.weight": weights["embeddings.LayerNorm.weight"],
        "embeddings_norm.bias": weights["embeddings.LayerNorm.bias"],
    }
    parts = {
        "attention.query": "attention.self.query",
        "attention.key": "attention.self.key",
        "attention.value": "attention.self.value",
        "attention.dense": "attention.output.dense",
        "attention_norm": "attention.output.LayerNorm",
        "intermediate": "intermediate.dense",
        "output": "output.dense",
        "output_norm": "output.LayerNorm",
    }
    for index in range(layers):
        for ours, theirs in parts.items():
            for leaf in ("weight", "bias"):
                source = f"encoder.layer.{index}.{theirs}.{leaf}"
                renamed[f"layers.{index}.{ours}.{leaf}"] = weights[source]
    return renamed


def export_onnx(encoder: BertEncoder, path: str | Path, *, opset: int = 18) -> None:
    """Export ``encoder`` to one self-contained ONNX file with dynamic batch and length.

    Inputs are ``input_ids`` and ``attention_mask`` (``int64``, ``(batch, length)``);
    the output is ``embeddings`` (``float32``, ``(batch, hidden)``).
    """
    encoder = encoder.eval()
    example = (
        torch.ones((2, 8), dtype=torch.int64),
        torch.ones((2, 8), dtype=torch.int64),
    )
    batch = torch.export.Dim("batch")
    length = torch.export.Dim("length", max=512)
    dims: dict[str, Any] = {
        "input_ids": {0: batch, 1: length},
        "attention_mask": {0: batch, 1: length},
    }
    with warnings.catch_warnings():
        # The exporter warns about its own internals (deprecated pytree helpers,
        # axis renames); none of it concerns the exported graph.
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            encoder,
            example,
            input_names=["input_ids", "attention_mask"],
            output_names=["embeddings"],
            dynamic_shapes=dims,
            opset_version=opset,
            dynamo=True,
            external_data=False,
            verbose=False,
        )
    if program is None:  # pragma: no cover - dynamo=True always returns a program
        raise RuntimeError("torch.onnx.export returned no program")
    program.save(str(path), external_data=False)
