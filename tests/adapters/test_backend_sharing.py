"""One cache for every backend: torch fp32 decides, ONNX fp32 and int8 replay over one SQLite file.

The key holds no device, precision or backend, so once every backend gives
the same pinned fingerprint (and namespace), the first decision stored is the
one all of them serve. Backends that keep their derived fingerprints do not
share: their arithmetic differs, and so may a close answer.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from asyncache import DecisionCache, cached_prediction
from asyncache.offload import ThreadOffload

from ..conftest_models import require_model_stack

pytestmark = pytest.mark.model

PINNED = "minilm-support-questions-v1"
NAMESPACE = "support.decide"
QUESTIONS = ["refund", "cancel", "delivery", "billing", "discount"]


@pytest.fixture(autouse=True, scope="module")
def _model_stack() -> None:
    require_model_stack()


def _requests() -> list[tuple[str, list[str]]]:
    from asyncache.demo.minilm import EXAMPLE_STATES

    return [(state, QUESTIONS) for state in EXAMPLE_STATES]


class Counted:
    """A decider's ``predict_batch``, counting the items it is asked to compute."""

    def __init__(self, decider: Any) -> None:
        self.decider = decider
        self.items = 0
        self.lock = threading.Lock()

    def __call__(self, items: list[Any]) -> list[Any]:
        with self.lock:
            self.items += len(items)
        result: list[Any] = self.decider.predict_batch(items)
        return result


async def _decide(
    path: Path, decider: Any, *, fingerprint: str | None = PINNED
) -> tuple[list[Any], Counted, dict[str, Any]]:
    """Answer every request through a fresh cache over the SQLite file at ``path``."""
    from asyncache.stores.sqlite import SQLiteStore

    model = Counted(decider)
    async with (
        DecisionCache(SQLiteStore(path)) as cache,
        ThreadOffload(1) as offload,
    ):
        predict = cached_prediction(
            cache,
            batch=True,
            namespace=NAMESPACE,
            fingerprint=fingerprint or decider.fingerprint,
            offload=offload,
        )(model)
        answers = await predict.many(_requests())
        return answers, model, cache.stats()


def _answers(results: Sequence[Sequence[dict[str, Any]]]) -> list[list[bool]]:
    return [[answer["answer"] for answer in result] for result in results]


async def test_onnx_fp32_and_int8_replay_the_decisions_torch_stored(
    tmp_path: Path, minilm_torch: Any, minilm_onnx: Any, minilm_int8: Any
) -> None:
    path = tmp_path / "decisions.db"
    count = len(_requests())

    stored, torch_model, torch_stats = await _decide(path, minilm_torch)
    assert torch_model.items == count
    assert torch_stats["stores"] == count and torch_stats["hits"] == 0

    for decider in (minilm_onnx, minilm_int8):
        replayed, model, stats = await _decide(path, decider)
        assert replayed == stored  # the same answers and the same scores, to the bit
        assert model.items == 0  # the backend never ran
        assert stats["hits"] == count and stats["misses"] == 0

    # Alone, int8 arithmetic gives other scores: the replay above served torch's decision.
    alone = minilm_int8.predict_batch(_requests())
    assert alone != stored
    # The answers themselves agree here; the table in benchmarks/backend_sharing.py says where not.
    assert _answers(minilm_onnx.predict_batch(_requests())) == _answers(stored)


async def test_backends_with_their_own_fingerprints_do_not_share(
    tmp_path: Path, minilm_torch: Any, minilm_int8: Any
) -> None:
    path = tmp_path / "decisions.db"
    count = len(_requests())
    assert minilm_torch.fingerprint != minilm_int8.fingerprint
    await _decide(path, minilm_torch, fingerprint=None)
    computed, model, stats = await _decide(path, minilm_int8, fingerprint=None)
    assert model.items == count  # no decision of torch's was served to int8
    assert stats["hits"] == 0
    assert computed == minilm_int8.predict_batch(_requests())
