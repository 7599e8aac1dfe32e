"""How users call cached functions and methods, as type checkers must see it.

Checked by mypy --strict and pyright (tests/decorator/test_typing.py), never run. Each
line marked as wrong is a mistake a checker must report; every other line
must check clean.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import assert_type

from asyncache import DecisionCache, cached_prediction

cache = DecisionCache()


@dataclasses.dataclass(frozen=True)
class Decision:
    label: str
    score: float


@cached_prediction(cache)
async def classify(text: str, threshold: float = 0.5) -> Decision:
    return Decision(text, threshold)


class Model:
    fingerprint = "triage-v3"

    @cached_prediction(cache)
    async def predict(self, text: str, k: int = 1) -> Decision:
        return Decision(text * k, 1.0)

    @cached_prediction(cache, offload="thread")
    def predict_sync(self, text: str) -> list[float]:
        return [float(len(text))]


async def main() -> None:
    model = Model()
    assert_type(await classify("a"), Decision)
    assert_type(await classify("a", threshold=0.7), Decision)
    assert_type(classify.key("a"), bytes)
    assert_type(await model.predict("a"), Decision)
    assert_type(await model.predict("a", k=2), Decision)
    assert_type(await model.predict_sync("a"), list[float])
    assert_type(model.predict.key("a"), bytes)
    assert_type(await model.predict.uncached("a"), Decision)
    assert_type(await Model.predict(model, "a"), Decision)
    await model.predict(1)  # wrong: an int for text
    await model.predict()  # wrong: text is missing
    await model.predict("a", 2, 3)  # wrong: one argument too many
    await classify(b"a")  # wrong: bytes for text
    print((await model.predict("a")).labl)  # wrong: no such attribute


@cached_prediction(cache)
async def tokens(prompt: str, temperature: float = 0.0) -> AsyncIterator[str]:
    yield prompt


class Chat:
    fingerprint = "chat-v1"

    @cached_prediction(cache)
    async def stream(self, prompt: str) -> AsyncIterator[Decision]:
        yield Decision(prompt, 1.0)


async def streams() -> None:
    chat = Chat()
    async for token in tokens("a", temperature=0.5):
        assert_type(token, str)
    async for decision in chat.stream("a"):
        assert_type(decision, Decision)
    assert_type(tokens.key("a"), bytes)
    assert_type(chat.stream.key("a"), bytes)
    async for fresh in chat.stream.uncached("a"):
        assert_type(fresh, Decision)
    tokens(1)  # wrong: an int for prompt
    chat.stream("a", "b")  # wrong: one argument too many
