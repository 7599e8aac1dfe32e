"""OnnxModel: an onnxruntime session as a thread-safe batch predictor with a fingerprint.

The fingerprint is derived from the model's bytes and its input/output
signature, so an fp32 export and its int8 quantization are different models
unless ``fingerprint="..."`` pins them to one set of decisions.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError
from .model import new_digest

try:
    import numpy as np
    import onnxruntime as ort
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("OnnxModel needs: pip install 'asyncache-ml[onnx]'") from exc

__all__ = ["OnnxModel"]

Provider = str | tuple[str, Mapping[str, Any]]
Preprocess = Callable[[Sequence[Any]], Mapping[str, Any]]
Postprocess = Callable[[list[Any], Sequence[Any]], list[Any]]

_NUMPY_TYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}
_GPU_HINT = {
    "CUDAExecutionProvider": "pip install onnxruntime-gpu (in place of onnxruntime)",
    "TensorrtExecutionProvider": "pip install onnxruntime-gpu, with TensorRT installed",
    "ROCMExecutionProvider": "an onnxruntime build with ROCm",
}


class OnnxModel:
    """Wraps an ONNX model: ``predict_batch(items)`` runs the session once per batch.

    ``InferenceSession.run`` is thread-safe, so calls from several threads run
    side by side, each using the session's intra-op thread pool.

    Args:
        path_or_bytes: the ``.onnx`` file or its bytes.
        providers: execution providers in order of preference, names or
            ``(name, options)`` pairs; ``("CUDAExecutionProvider",
            "CPUExecutionProvider")`` runs on the GPU and falls back to the CPU
            only for operators CUDA lacks.
        intra_op_threads: threads one operator may use; onnxruntime picks one
            per physical core when omitted.
        inter_op_threads: threads running independent operators side by side;
            giving it turns on onnxruntime's parallel execution mode.
        preprocess: items -> ``{input name: array}``; by default items that are
            mappings are stacked per input, and other items are stacked into the
            model's only input.
        postprocess: (outputs, items) -> one answer per item; by default the
            rows of the first output as Python lists.
        fingerprint: pins the fingerprint; derived from the model when omitted.
        spin: let onnxruntime's worker threads spin, waiting for more work,
            after each run. Off by default: spinning threads burn the cores
            that the event loop and the store's thread need to answer hits.

    Raises:
        ConfigurationError: a provider is not available in this onnxruntime
            build, or was available but failed to load (onnxruntime would
            otherwise fall back to the CPU silently).
    """

    def __init__(
        self,
        path_or_bytes: str | os.PathLike[str] | bytes,
        *,
        providers: Sequence[Provider] = ("CPUExecutionProvider",),
        intra_op_threads: int | None = None,
        inter_op_threads: int | None = None,
        preprocess: Preprocess | None = None,
        postprocess: Postprocess | None = None,
        fingerprint: str | None = None,
        spin: bool = False,
    ) -> None:
        names = [_provider_name(provider) for provider in providers]
        if not names:
            raise ConfigurationError("providers must name at least one execution provider")
        available = ort.get_available_providers()
        for name in names:
            if name not in available:
                hint = _GPU_HINT.get(name, "a build of onnxruntime that includes it")
                raise ConfigurationError(
                    f"{name} is not available in onnxruntime {ort.__version__} "
                    f"(available: {', '.join(available)}); it needs {hint}"
                )
        options = ort.SessionOptions()
        for pool in ("intra_op", "inter_op"):
            options.add_session_config_entry(f"session.{pool}.allow_spinning", "1" if spin else "0")
        if intra_op_threads is not None:
            options.intra_op_num_threads = _positive("intra_op_threads", intra_op_threads)
        if inter_op_threads is not None:
            options.inter_op_num_threads = _positive("inter_op_threads", inter_op_threads)
            options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
        if isinstance(path_or_bytes, bytes):
            source: str | bytes = path_or_bytes
            model_digest = hashlib.blake2b(path_or_bytes, digest_size=16).digest()
        else:
            source = os.fspath(path_or_bytes)
            with Path(source).open("rb") as file:
                model_digest = hashlib.file_digest(file, _blake2b16).digest()
        self.session = ort.InferenceSession(source, sess_options=options, providers=list(providers))
        active = self.session.get_providers()
        missing = [name for name in names if name not in active]
        if missing:
            raise ConfigurationError(
                f"onnxruntime could not load {', '.join(missing)} (active: {', '.join(active)});"
                " check the CUDA/cuDNN libraries it needs"
            )
        self.input_names = [node.name for node in self.session.get_inputs()]
        self._input_dtypes = {
            node.name: _NUMPY_TYPES.get(node.type) for node in self.session.get_inputs()
        }
        self.output_names = [node.name for node in self.session.get_outputs()]
        self._preprocess = preprocess or self._stack
        self._postprocess = postprocess or _rows
        self._derived = f"onnx:{self._signature_digest(model_digest)}"
        self._pinned = fingerprint

    def __repr__(self) -> str:
        return f"OnnxModel(inputs={self.input_names}, providers={self.providers})"

    @property
    def fingerprint(self) -> str:
        """``onnx:<digest of the model bytes and signature>``, or the pinned value."""
        return self._derived if self._pinned is None else self._pinned

    @property
    def providers(self) -> list[str]:
        """The execution providers the session runs on, in priority order."""
        providers: list[str] = self.session.get_providers()
        return providers

    def predict_batch(self, items: Sequence[Any]) -> list[Any]:
        """One answer per item, from a single ``session.run``; safe from any thread.

        Raises:
            ValueError: ``postprocess`` returned a different number of answers.
        """
        if not items:
            return []
        feed = dict(self._preprocess(items))
        outputs: list[Any] = self.session.run(None, feed)
        answers = self._postprocess(outputs, items)
        if len(answers) != len(items):
            raise ValueError(f"postprocess returned {len(answers)} answers for {len(items)} items")
        return answers

    def _signature_digest(self, model_digest: bytes) -> str:
        hasher = new_digest()
        hasher.update(model_digest)
        for kind, nodes in (("in", self.session.get_inputs()), ("out", self.session.get_outputs())):
            for node in nodes:
                hasher.update(f"{kind}\0{node.name}\0{node.type}\0{node.shape}\0".encode())
        return hasher.hexdigest()

    def _stack(self, items: Sequence[Any]) -> dict[str, Any]:
        """Stack items per input, in the input's declared type (Python floats are float64)."""
        if all(isinstance(item, Mapping) for item in items):
            columns = {name: [item[name] for item in items] for name in self.input_names}
        elif len(self.input_names) == 1:
            columns = {self.input_names[0]: list(items)}
        else:
            raise TypeError(
                f"the model has inputs {self.input_names}: give items as mappings of input "
                "name to array, or pass preprocess="
            )
        return {
            name: np.stack([np.asarray(value, dtype=self._input_dtypes[name]) for value in column])
            for name, column in columns.items()
        }


def _blake2b16() -> hashlib.blake2b:
    return hashlib.blake2b(digest_size=16)


def _provider_name(provider: Provider) -> str:
    return provider if isinstance(provider, str) else provider[0]


def _positive(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be a positive integer, not {value!r}")
    return value


def _rows(outputs: list[Any], items: Sequence[Any]) -> list[Any]:
    rows: list[Any] = np.asarray(outputs[0]).tolist()
    return rows
