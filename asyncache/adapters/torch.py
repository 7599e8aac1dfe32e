"""TorchModel: a PyTorch module as a thread-safe batch predictor with a fingerprint.

The fingerprint is derived from the module's class and the bytes of its state
dict as served (after the dtype cast), so a retrained or re-quantized model
starts a fresh set of decisions. ``fingerprint="..."`` pins it instead, which
lets a GPU fp16 model, a CPU fp32 model and an ONNX export share one cache.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import ConfigurationError
from .model import new_digest

try:
    import torch
    from torch import nn
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("TorchModel needs: pip install 'asyncache-ml[torch]'") from exc

__all__ = ["TorchModel", "state_dict_digest"]

Preprocess = Callable[[Sequence[Any]], Any]
Postprocess = Callable[[Any, Sequence[Any]], list[Any]]


class TorchModel:
    """Wraps an ``nn.Module``: ``predict_batch(items)`` runs one forward pass per batch.

    ``preprocess(items)`` builds the module's input: a tensor (called as
    ``module(x)``), a tuple or list (``module(*x)``) or a mapping
    (``module(**x)``). Tensors in it are moved to ``device``, and floating ones
    cast to ``dtype``. ``postprocess(outputs, items)`` turns the output into one
    answer per item. Forward passes are serialized by a lock: a CPU pass already
    spreads over torch's intra-op threads, and one pass at a time keeps a GPU's
    memory bounded; pre- and post-processing run outside the lock.

    Args:
        module: the model; moved to ``device`` and ``dtype`` in place and put in
            eval mode.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``... or a ``torch.device``.
        dtype: the floating-point type of the weights (``torch.float32``,
            ``torch.float16``, ``torch.bfloat16``).
        preprocess: items -> module input; by default the items are stacked
            into one tensor.
        postprocess: (outputs, items) -> one answer per item; by default the
            rows of the output tensor as Python lists.
        fingerprint: pins the fingerprint; derived from the weights when omitted.

    Raises:
        ConfigurationError: ``device`` names an accelerator this machine lacks.
    """

    def __init__(
        self,
        module: nn.Module,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        preprocess: Preprocess | None = None,
        postprocess: Postprocess | None = None,
        fingerprint: str | None = None,
    ) -> None:
        if not dtype.is_floating_point:
            raise ConfigurationError(f"dtype must be a floating-point type, not {dtype}")
        self.device = _check_device(device)
        self.dtype = dtype
        self.module = module.to(device=self.device, dtype=dtype).eval()
        self._preprocess = preprocess or _stack
        self._postprocess = postprocess or _rows
        self._pinned = fingerprint
        self._derived: str | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        name = type(self.module).__qualname__
        return f"TorchModel({name}, device={str(self.device)!r}, dtype={self.dtype})"

    @property
    def fingerprint(self) -> str:
        """``torch:<class>:<digest of the state dict>``, or the pinned value.

        Computed on first use (it reads every weight once) and kept.
        """
        if self._pinned is not None:
            return self._pinned
        if self._derived is None:
            digest = state_dict_digest(self.module)
            self._derived = f"torch:{type(self.module).__qualname__}:{digest}"
        return self._derived

    def predict_batch(self, items: Sequence[Any]) -> list[Any]:
        """One answer per item, from a single forward pass; safe from any thread.

        Raises:
            ValueError: ``postprocess`` returned a different number of answers.
        """
        if not items:
            return []
        batch = self._place(self._preprocess(items))
        with torch.inference_mode():
            with self._lock:
                if isinstance(batch, Mapping):
                    outputs = self.module(**batch)
                elif isinstance(batch, tuple | list):
                    outputs = self.module(*batch)
                else:
                    outputs = self.module(batch)
            answers = self._postprocess(outputs, items)
        if len(answers) != len(items):
            raise ValueError(f"postprocess returned {len(answers)} answers for {len(items)} items")
        return answers

    def _place(self, value: Any) -> Any:
        """Move tensors to the device; floating tensors take the model's dtype."""
        if isinstance(value, torch.Tensor):
            dtype = self.dtype if value.is_floating_point() else None
            return value.to(device=self.device, dtype=dtype, non_blocking=True)
        if isinstance(value, Mapping):
            return {name: self._place(item) for name, item in value.items()}
        if isinstance(value, tuple | list):
            return type(value)(self._place(item) for item in value)
        return value


def state_dict_digest(module: nn.Module) -> str:
    """Hex digest of a module's state dict: every entry's name, dtype, shape and bytes.

    Quantized modules keep more than tensors there: ``quantize_dynamic``'s
    packed parameters are tuples of a quantized weight and a bias beside a
    ``torch.dtype``, and other quantized modules keep TorchScript objects
    (hashed through their ``__getstate__``). Each is hashed by what it holds, so
    the same weights quantized the same way always give the same digest.

    Raises:
        TypeError: an entry holds something that has no stable bytes; pin
            ``fingerprint=`` instead.
    """
    hasher = new_digest()
    for name, value in sorted(module.state_dict().items()):
        _digest_value(hasher, name, value)
    return hasher.hexdigest()


def _digest_value(hasher: Any, name: str, value: Any) -> None:
    """Hash one state-dict value (a tensor, or what quantized modules keep) under ``name``."""
    if isinstance(value, torch.Tensor):
        tensor = value.detach().to("cpu")
        if tensor.is_quantized:
            # The integers and the affine map back to reals: the quantized weight's meaning.
            hasher.update(f"{name}\0quantized\0{tensor.qscheme()}\0".encode())
            if tensor.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric):
                hasher.update(f"{tensor.q_scale()!r}\0{tensor.q_zero_point()}\0".encode())
            else:
                hasher.update(f"{tensor.q_per_channel_axis()}\0".encode())
                _digest_value(hasher, f"{name}.scales", tensor.q_per_channel_scales())
                _digest_value(hasher, f"{name}.zero_points", tensor.q_per_channel_zero_points())
            tensor = tensor.int_repr()
        elif tensor.layout != torch.strided:
            tensor = tensor.to_dense()
        flat = tensor.contiguous().reshape(-1)
        header = f"{name}\0{str(flat.dtype).removeprefix('torch.')}\0{tuple(tensor.shape)}\0"
        hasher.update(header.encode())
        # Viewed as bytes, so bfloat16 (which NumPy lacks) hashes like any dtype.
        hasher.update(flat.view(torch.uint8).numpy().data)
    elif isinstance(value, tuple | list):
        hasher.update(f"{name}\0{type(value).__name__}\0{len(value)}\0".encode())
        for index, item in enumerate(value):
            _digest_value(hasher, f"{name}.{index}", item)
    elif isinstance(value, Mapping):
        hasher.update(f"{name}\0mapping\0{len(value)}\0".encode())
        for field in sorted(value, key=str):
            _digest_value(hasher, f"{name}.{field}", value[field])
    elif value is None or isinstance(value, bool | int | float | str | torch.dtype):
        hasher.update(f"{name}\0{type(value).__name__}\0{value!r}\0".encode())
    elif isinstance(value, torch.ScriptObject) and hasattr(value, "__getstate__"):
        _digest_value(hasher, f"{name}.state", value.__getstate__())
    else:
        raise TypeError(
            f"cannot fingerprint state-dict entry {name!r} of type {type(value).__name__}; "
            "pass fingerprint= to TorchModel"
        )


def _check_device(device: str | torch.device) -> torch.device:
    try:
        chosen = torch.device(device)
    except RuntimeError as exc:
        raise ConfigurationError(f"invalid torch device {device!r}: {exc}") from exc
    if chosen.type == "cuda":
        if not torch.cuda.is_available():
            build = "built without CUDA" if torch.version.cuda is None else "no GPU is visible"
            raise ConfigurationError(
                f"device={str(device)!r} needs a CUDA GPU, but torch {torch.__version__} "
                f"reports none ({build}); use device='cpu'"
            )
        count = torch.cuda.device_count()
        if chosen.index is not None and chosen.index >= count:
            raise ConfigurationError(f"device={str(device)!r}, but only {count} GPU(s) are visible")
    elif chosen.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigurationError("device='mps' needs Apple's Metal backend, which is unavailable")
    return chosen


def _stack(items: Sequence[Any]) -> torch.Tensor:
    if all(isinstance(item, torch.Tensor) for item in items):
        return torch.stack(list(items))
    return torch.as_tensor(items)


def _rows(outputs: Any, items: Sequence[Any]) -> list[Any]:
    if not isinstance(outputs, torch.Tensor):
        raise TypeError(
            f"the module returned {type(outputs).__name__}; pass postprocess= to turn it "
            "into one answer per item"
        )
    rows: list[Any] = outputs.detach().to("cpu").tolist()
    return rows
