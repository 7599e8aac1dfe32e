"""Your own model on torch and on ONNX Runtime, on a GPU when there is one, behind one cache."""

import asyncio

import numpy as np
import onnxruntime as ort
import torch
from onnx import TensorProto, helper, numpy_helper

from asyncache import DecisionCache, cached_prediction
from asyncache.adapters.onnx import OnnxModel
from asyncache.adapters.torch import TorchModel
from asyncache.offload import aclose_default_offloads

LABELS = ["setosa", "versicolor", "virginica"]
WEIGHT = np.array(
    [[0.4, 0.1, -0.6], [1.1, -0.2, -0.9], [-1.6, 0.3, 1.2], [-0.8, -0.5, 1.4]], dtype=np.float32
)
BIAS = np.array([0.2, 0.9, -1.1], dtype=np.float32)


def torch_model(fingerprint: str | None) -> TorchModel:
    layer = torch.nn.Linear(4, 3)
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(WEIGHT.T))
        layer.bias.copy_(torch.from_numpy(BIAS))
    device = "cuda" if torch.cuda.is_available() else "cpu"  # a GPU when this machine has one
    return TorchModel(layer, device=device, fingerprint=fingerprint)


def onnx_model(fingerprint: str | None) -> OnnxModel:
    # The same layer as an ONNX graph (y = x @ W + b), built without torch.
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["xw"]),
            helper.make_node("Add", ["xw", "b"], ["y"]),
        ],
        "iris",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(WEIGHT, "W"), numpy_helper.from_array(BIAS, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    # CUDA first when this onnxruntime build has it; otherwise the CPU.
    providers = [p for p in ("CUDAExecutionProvider",) if p in ort.get_available_providers()]
    return OnnxModel(
        model.SerializeToString(),
        providers=[*providers, "CPUExecutionProvider"],
        fingerprint=fingerprint,
    )


async def main() -> None:
    cache = DecisionCache()  # one cache (a MemoryStore here) for both backends
    runs = {"torch": 0, "onnx": 0}

    def predictor(name: str, model: TorchModel | OnnxModel):
        # The model's fingerprint goes into every key; batch=True turns concurrent
        # misses into one predict_batch call (one forward pass).
        @cached_prediction(
            cache, namespace="iris", fingerprint=model.fingerprint, batch=True, offload="thread"
        )
        def classify(items: list[list[float]]) -> list[str]:
            runs[name] += 1
            return [LABELS[int(np.argmax(row))] for row in model.predict_batch(items)]

        return classify

    # Pinned to one fingerprint: the two backends share decisions.
    torch_classify = predictor("torch", torch_model("iris-linear-v1"))
    onnx_classify = predictor("onnx", onnx_model("iris-linear-v1"))
    flowers = [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3], [5.9, 3.0, 4.2, 1.5]]

    print("torch:", await asyncio.gather(*(torch_classify(f) for f in flowers)))
    print("onnx: ", await asyncio.gather(*(onnx_classify(f) for f in flowers)))
    print("forward passes:", runs)

    # Unpinned, each derives one from its weights: different keys, no sharing.
    derived = [torch_model(None).fingerprint, onnx_model(None).fingerprint]
    print(
        "derived:", [f"{fp.rsplit(':', 1)[0]}:<digest>" for fp in derived], derived[0] != derived[1]
    )
    for classify in (torch_classify, onnx_classify):
        await classify.aclose()
    await cache.aclose()
    await aclose_default_offloads()


asyncio.run(main())
