"""What a refresh computes with: a snapshot of the call's inputs (engine/_calls.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from asyncache.engine import Call, ItemsCall, snapshot


class Model:
    """Not data: shared as it is, never copied."""


@dataclasses.dataclass
class Request:
    labels: list[str]
    model: Any


def test_a_snapshot_copies_data_and_shares_the_rest() -> None:
    model = Model()
    labels = ["refund", "billing"]
    array = np.arange(3)
    request = Request(labels, model)
    taken = snapshot(({"labels": labels}, [array], request, model, "text", bytearray(b"ab")))
    labels.append("spam")
    array[0] = 9
    request.labels.append("ham")
    assert taken[0] == {"labels": ["refund", "billing"]}
    assert taken[1][0].tolist() == [0, 1, 2]
    assert taken[2].labels == ["refund", "billing"] and taken[2].model is model
    assert taken[3] is model
    assert taken[5] == bytearray(b"ab") and taken[5] is not taken[0]


async def test_a_detached_call_computes_with_the_arguments_as_they_were() -> None:
    seen: list[Any] = []

    async def run(self: Model, items: list[int]) -> int:
        seen.append(self)
        return sum(items)

    model = Model()
    items = [1, 2]
    call = Call(run, (model, items), {})
    detached = call.detached()
    items.append(100)
    assert await detached() == 3
    assert await call() == 103
    assert seen == [model, model]

    async def batch(given: list[list[int]]) -> list[int]:
        return [sum(each) for each in given]

    listed = [[1], [2, 3]]
    frozen = ItemsCall(batch, listed).detached()
    listed[1].clear()
    assert await frozen([0, 1]) == [1, 5]
