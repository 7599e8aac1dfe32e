"""OnnxModel over small ONNX graphs built here: batching, fingerprints, threads, providers."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.support import IN_CI, import_error_without

if not IN_CI:  # under CI a missing onnxruntime must fail, not skip
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from asyncache.adapters.model import PredictionModel
from asyncache.adapters.onnx import OnnxModel
from asyncache.errors import ConfigurationError

CUDA = "CUDAExecutionProvider" in ort.get_available_providers()


def affine(weight: Any, *, bias: float = 0.0, second_input: bool = False) -> bytes:
    """``y = x @ weight + bias`` (plus ``z`` when ``second_input``), with a dynamic batch axis."""
    weight = np.asarray(weight, dtype=np.float32)
    rows, cols = weight.shape
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", rows])]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"])]
    if second_input:
        inputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", cols]))
        nodes.append(helper.make_node("Add", ["xw", "z"], ["xwz"]))
    nodes.append(helper.make_node("Add", ["xwz" if second_input else "xw", "b"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "affine",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", cols])],
        [
            numpy_helper.from_array(weight, "W"),
            numpy_helper.from_array(np.full((cols,), bias, dtype=np.float32), "b"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    serialized: bytes = model.SerializeToString()
    return serialized


WEIGHT = np.arange(12, dtype=np.float32).reshape(4, 3) / 10


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "affine.onnx"
    path.write_bytes(affine(WEIGHT))
    return path


def test_predict_batch_answers_each_item_in_order(model_file: Path) -> None:
    model = OnnxModel(model_file)
    items = [[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 0.0], [-1.0, 0.5, 2.0, 1.0]]
    answers = model.predict_batch(items)
    np.testing.assert_allclose(answers, np.asarray(items, dtype=np.float32) @ WEIGHT, rtol=1e-6)
    assert isinstance(answers[0], list)
    assert model.predict_batch([]) == []
    assert model.input_names == ["x"]
    assert model.output_names == ["y"]
    assert model.providers == ["CPUExecutionProvider"]
    assert isinstance(model, PredictionModel)


def test_mapping_items_feed_every_input() -> None:
    model = OnnxModel(affine(WEIGHT, second_input=True))
    items = [{"x": [1.0, 0.0, 0.0, 0.0], "z": [1.0, 1.0, 1.0]}, {"x": [0.0] * 4, "z": [5.0] * 3}]
    np.testing.assert_allclose(model.predict_batch(items), [[1.0, 1.1, 1.2], [5.0] * 3], rtol=1e-6)
    with pytest.raises(TypeError, match="inputs \\['x', 'z'\\]"):
        model.predict_batch([[1.0] * 4])


def test_custom_pre_and_postprocess(model_file: Path) -> None:
    def preprocess(items: Any) -> dict[str, Any]:
        return {"x": np.array([[float(item)] * 4 for item in items], dtype=np.float32)}

    def postprocess(outputs: list[Any], items: Any) -> list[Any]:
        return [f"{item}:{row.sum():.1f}" for item, row in zip(items, outputs[0], strict=True)]

    model = OnnxModel(model_file, preprocess=preprocess, postprocess=postprocess)
    assert model.predict_batch([1, 2]) == ["1:6.6", "2:13.2"]
    short = OnnxModel(model_file, postprocess=lambda outputs, items: [])
    with pytest.raises(ValueError, match="0 answers for 1 items"):
        short.predict_batch([[1.0] * 4])


def test_fingerprint_follows_the_model_bytes(model_file: Path) -> None:
    from_path = OnnxModel(model_file).fingerprint
    assert from_path.startswith("onnx:")
    assert OnnxModel(model_file).fingerprint == from_path
    assert OnnxModel(model_file.read_bytes()).fingerprint == from_path
    assert OnnxModel(affine(WEIGHT, bias=1e-6)).fingerprint != from_path
    assert OnnxModel(affine(WEIGHT, second_input=True)).fingerprint != from_path


def test_pinned_fingerprint_is_shared(model_file: Path) -> None:
    models = [
        OnnxModel(model_file, fingerprint="affine@1"),
        OnnxModel(affine(WEIGHT * 2), fingerprint="affine@1"),
    ]
    assert [model.fingerprint for model in models] == ["affine@1", "affine@1"]


def _threads() -> set[str]:
    # Collect first: a session freed by a collection during the count would hide new threads.
    gc.collect()
    return set(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads through /proc")
def test_thread_settings_are_honored(model_file: Path) -> None:
    # onnxruntime starts n - 1 pool threads per session (the caller's thread is the n-th).
    grown = {}
    for intra in (1, 3):
        before = _threads()
        model = OnnxModel(model_file, intra_op_threads=intra)
        # The threads that were not there before: one an earlier test left ending meanwhile
        # must not hide one the session started.
        grown[intra] = len(_threads() - before)
        assert model.session.get_session_options().intra_op_num_threads == intra
        del model
    assert grown == {1: 0, 3: 2}
    before = _threads()
    parallel = OnnxModel(model_file, intra_op_threads=1, inter_op_threads=3)
    assert len(_threads() - before) == 2
    options = parallel.session.get_session_options()
    assert options.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    np.testing.assert_allclose(parallel.predict_batch([[1.0] * 4]), [WEIGHT.sum(axis=0)], rtol=1e-6)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_thread_settings_must_be_positive_integers(model_file: Path, bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="positive integer"):
        OnnxModel(model_file, intra_op_threads=bad)


def test_many_threads_share_one_session(model_file: Path) -> None:
    model = OnnxModel(model_file, intra_op_threads=1)
    batches = [[[float(i), 1.0, -1.0, 0.5]] * (1 + i % 4) for i in range(64)]
    expected = [np.asarray(batch, dtype=np.float32) @ WEIGHT for batch in batches]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(model.predict_batch, batches))
    for got, want in zip(results, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_unknown_or_empty_providers_are_clear_errors(model_file: Path) -> None:
    with pytest.raises(ConfigurationError, match="NoSuchExecutionProvider is not available"):
        OnnxModel(model_file, providers=("NoSuchExecutionProvider",))
    with pytest.raises(ConfigurationError, match="at least one"):
        OnnxModel(model_file, providers=())


@pytest.mark.skipif(CUDA, reason="this onnxruntime has the CUDA provider")
def test_cuda_provider_without_cuda_is_a_clear_error(model_file: Path) -> None:
    with pytest.raises(ConfigurationError, match="onnxruntime-gpu"):
        OnnxModel(model_file, providers=("CUDAExecutionProvider", "CPUExecutionProvider"))
    with pytest.raises(ConfigurationError, match="CUDAExecutionProvider is not available"):
        OnnxModel(model_file, providers=[("CUDAExecutionProvider", {"device_id": 0})])


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs onnxruntime's CUDA provider")
def test_cuda_provider_answers_like_the_cpu(model_file: Path) -> None:
    items = [[1.0, 2.0, 3.0, 4.0], [-1.0, 0.5, 2.0, 1.0]]
    cpu = OnnxModel(model_file).predict_batch(items)
    gpu = OnnxModel(model_file, providers=("CUDAExecutionProvider", "CPUExecutionProvider"))
    assert gpu.providers[0] == "CUDAExecutionProvider"
    assert gpu.fingerprint == OnnxModel(model_file).fingerprint
    np.testing.assert_allclose(gpu.predict_batch(items), cpu, atol=1e-5)


def test_import_without_onnxruntime_names_the_extra() -> None:
    message = import_error_without("onnxruntime", "asyncache.adapters.onnx")
    assert "pip install 'asyncache-ml[onnx]'" in message


def test_adapters_stay_out_of_the_core_import() -> None:
    script = (
        "import sys, asyncache, asyncache.adapters, asyncache.adapters.model\n"
        "print(sorted({'torch', 'onnxruntime', 'numpy', 'tokenizers'} & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
