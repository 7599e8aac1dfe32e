"""TorchModel over small real modules: batching, fingerprints, threads, devices."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.support import IN_CI, import_error_without

if not IN_CI:  # under CI a missing torch must fail, not skip
    pytest.importorskip("torch")

import torch

from asyncache.adapters.model import PredictionModel
from asyncache.adapters.torch import TorchModel, state_dict_digest
from asyncache.errors import ConfigurationError

CUDA = torch.cuda.is_available()


def linear(seed: int = 0) -> Any:
    torch.manual_seed(seed)
    return torch.nn.Linear(4, 3)


class Recorder(torch.nn.Module):
    """Doubles its input and records how it was called."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(2.0))
        self.guard = threading.Lock()
        self.active = 0
        self.most_active = 0
        self.inference_mode: list[bool] = []

    def forward(self, x: Any, *, offset: Any = None) -> Any:
        with self.guard:
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        self.inference_mode.append(torch.is_inference_mode_enabled())
        time.sleep(0.002)  # widen the window in which two unserialized calls would overlap
        out = x * self.scale + (0 if offset is None else offset)
        with self.guard:
            self.active -= 1
        return out


def test_predict_batch_answers_each_item_in_order() -> None:
    module = linear()
    model = TorchModel(module)
    items = [[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 0.0], [-1.0, 0.5, 2.0, 1.0]]
    answers = model.predict_batch(items)
    with torch.no_grad():
        expected = module(torch.tensor(items)).tolist()
    assert answers == expected
    assert model.predict_batch([]) == []
    assert isinstance(model, PredictionModel)


def test_runs_in_inference_mode_and_unpacks_mappings_and_tuples() -> None:
    recorder = Recorder()
    as_kwargs = TorchModel(
        recorder,
        preprocess=lambda items: {"x": torch.tensor(items), "offset": torch.tensor(1.0)},
    )
    assert as_kwargs.predict_batch([1.0, 2.0]) == [3.0, 5.0]
    as_args = TorchModel(recorder, preprocess=lambda items: (torch.tensor(items),))
    assert as_args.predict_batch([4.0]) == [8.0]
    assert recorder.inference_mode == [True, True]


def test_postprocess_gets_outputs_and_items_and_must_answer_each_item() -> None:
    model = TorchModel(
        linear(),
        postprocess=lambda out, items: [
            (item[0], len(row)) for item, row in zip(items, out, strict=True)
        ],
    )
    assert model.predict_batch([[1.0] * 4, [2.0] * 4]) == [(1.0, 3), (2.0, 3)]
    short = TorchModel(linear(), postprocess=lambda out, items: [0])
    with pytest.raises(ValueError, match="1 answers for 2 items"):
        short.predict_batch([[1.0] * 4, [2.0] * 4])


def test_default_postprocess_needs_a_tensor() -> None:
    class Pair(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return x, x

    with pytest.raises(TypeError, match="pass postprocess="):
        TorchModel(Pair()).predict_batch([[1.0]])


def test_fingerprint_follows_the_weights_and_class() -> None:
    first = TorchModel(linear(seed=0)).fingerprint
    assert first.startswith("torch:Linear:")
    assert TorchModel(linear(seed=0)).fingerprint == first
    assert TorchModel(linear(seed=1)).fingerprint != first
    changed = linear(seed=0)
    with torch.no_grad():
        changed.bias[0] += 1e-6
    assert TorchModel(changed).fingerprint != first

    class Renamed(torch.nn.Linear):
        pass

    same_weights = Renamed(4, 3)
    same_weights.load_state_dict(linear(seed=0).state_dict())
    assert state_dict_digest(same_weights) == state_dict_digest(linear(seed=0))
    assert TorchModel(same_weights).fingerprint.startswith("torch:test_fingerprint_follows")
    assert TorchModel(same_weights).fingerprint != first


def test_fingerprint_follows_the_dtype_unless_pinned() -> None:
    fp32 = TorchModel(linear(), dtype=torch.float32)
    bf16 = TorchModel(linear(), dtype=torch.bfloat16)
    assert fp32.fingerprint != bf16.fingerprint
    assert bf16.predict_batch([[1.0, 0.0, 0.0, 0.0]])[0] == pytest.approx(
        fp32.predict_batch([[1.0, 0.0, 0.0, 0.0]])[0], abs=0.05
    )
    pinned = [
        TorchModel(linear(), dtype=d, fingerprint="clf@3") for d in (torch.float32, torch.bfloat16)
    ]
    assert [model.fingerprint for model in pinned] == ["clf@3", "clf@3"]


def int8(seed: int) -> Any:
    """A small MLP quantized the way deployments shrink one: dynamic int8 Linear layers."""
    torch.manual_seed(seed)
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    return torch.ao.quantization.quantize_dynamic(mlp, {torch.nn.Linear}, dtype=torch.qint8)


# torch deprecates its eager quantization API (and quantized tensor constructors) in
# favour of torchao; users still ship models made with it.
@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
def test_fingerprint_of_a_dynamic_int8_model() -> None:
    # Its state dict holds packed parameters: a (quantized weight, bias) tuple and a dtype.
    packed = [v for v in int8(0).state_dict().values() if not isinstance(v, torch.Tensor)]
    assert any(isinstance(v, tuple) for v in packed)
    model = TorchModel(int8(0))
    first = model.fingerprint
    assert first.startswith("torch:Sequential:")
    assert TorchModel(int8(0)).fingerprint == first  # deterministic
    assert TorchModel(int8(1)).fingerprint != first  # other weights
    assert state_dict_digest(int8(0)) != state_dict_digest(int8(1))
    source = torch.nn.Sequential(torch.nn.Linear(4, 8))
    float16 = torch.ao.quantization.quantize_dynamic(source, {torch.nn.Linear}, torch.float16)
    assert state_dict_digest(float16) != state_dict_digest(source)
    [row] = model.predict_batch([[1.0, 2.0, 3.0, 4.0]])
    assert len(row) == 3


def test_integer_inputs_keep_their_dtype() -> None:
    embedding = torch.nn.Embedding(10, 2)
    model = TorchModel(embedding, dtype=torch.float16, preprocess=lambda items: torch.tensor(items))
    rows = model.predict_batch([3, 7])
    assert len(rows) == 2
    assert embedding.weight.dtype == torch.float16


def test_forward_passes_are_serialized_across_threads() -> None:
    recorder = Recorder()
    model = TorchModel(recorder, preprocess=lambda items: torch.tensor(items))

    def call(value: float) -> list[Any]:
        return model.predict_batch([value, value + 0.5])

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(call, [float(i) for i in range(64)]))
    assert results == [[2.0 * i, 2.0 * i + 1.0] for i in range(64)]
    assert recorder.most_active == 1


def test_many_threads_get_their_own_answers() -> None:
    module = linear(seed=3)
    model = TorchModel(module)
    batches: list[Sequence[list[float]]] = [
        [[float(i), 1.0, -1.0, 0.5]] * (1 + i % 3) for i in range(40)
    ]
    with torch.no_grad():
        expected = [module(torch.tensor(batch)).tolist() for batch in batches]
    with ThreadPoolExecutor(max_workers=6) as pool:
        assert list(pool.map(model.predict_batch, batches)) == expected


def test_rejects_non_floating_dtypes_and_bad_devices() -> None:
    with pytest.raises(ConfigurationError, match="floating-point"):
        TorchModel(linear(), dtype=torch.int8)
    with pytest.raises(ConfigurationError, match="invalid torch device"):
        TorchModel(linear(), device="gpu0")


@pytest.mark.skipif(CUDA, reason="this machine has a CUDA GPU")
@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_cuda_without_a_gpu_is_a_clear_error(device: str) -> None:
    with pytest.raises(ConfigurationError, match="needs a CUDA GPU"):
        TorchModel(linear(), device=device)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_cuda_answers_like_the_cpu() -> None:
    items = [[1.0, 2.0, 3.0, 4.0], [-1.0, 0.5, 2.0, 1.0]]
    cpu = TorchModel(linear()).predict_batch(items)
    gpu = TorchModel(linear(), device="cuda")
    assert gpu.device.type == "cuda"
    for got, want in zip(gpu.predict_batch(items), cpu, strict=True):
        assert got == pytest.approx(want, abs=1e-4)
    half = TorchModel(linear(), device="cuda", dtype=torch.float16)
    for got, want in zip(half.predict_batch(items), cpu, strict=True):
        assert got == pytest.approx(want, abs=0.02)
    count = torch.cuda.device_count()
    with pytest.raises(ConfigurationError, match="GPU"):
        TorchModel(linear(), device=f"cuda:{count}")


def test_import_without_torch_names_the_extra() -> None:
    message = import_error_without("torch", "asyncache.adapters.torch")
    assert "pip install 'asyncache-ml[torch]'" in message
