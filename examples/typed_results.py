"""Typed results and cached methods: what a caller gets is what the annotation says."""

import asyncio
import dataclasses
import datetime
import enum
import uuid
from typing import NamedTuple

from asyncache import DecisionCache, cached_prediction


class Label(enum.Enum):
    SPAM = "spam"
    HAM = "ham"


class Span(NamedTuple):
    start: int
    end: int


@dataclasses.dataclass(frozen=True)
class Decision:
    label: Label
    score: float
    evidence: tuple[Span, ...]
    decided_at: datetime.datetime
    request: uuid.UUID


cache = DecisionCache()
REQUEST = uuid.UUID(int=42)
NOON = datetime.datetime(2026, 1, 1, 12, tzinfo=datetime.UTC)


@cached_prediction(cache, ignore=("request",))
async def classify(text: str, request: uuid.UUID = REQUEST) -> Decision:
    spans = tuple(Span(i, i + 4) for i in range(len(text)) if text.startswith("free", i))
    return Decision(Label.SPAM if spans else Label.HAM, 0.9, spans, NOON, request)


class Classifier:
    """Two instances holding different models never share a decision."""

    def __init__(self, revision: str, threshold: float) -> None:
        self.revision = revision
        self.threshold = threshold

    def __cache_fingerprint__(self) -> dict[str, object]:
        return {"model": "spam", "revision": self.revision, "threshold": self.threshold}

    @cached_prediction(cache)
    async def predict(self, text: str) -> Label:
        return Label.SPAM if len(text) * 0.1 > self.threshold else Label.HAM


class Opaque:
    """A class asyncache has no stored form for."""

    def __init__(self, words: list[str]) -> None:
        self.words = words


async def main() -> None:
    miss = await classify("free money, free")
    hit = await classify("free money, free")
    print(f"miss: {type(miss).__name__} {miss.label} {miss.evidence}")
    print(f"hit:  {type(hit).__name__} {hit.label} equal: {hit == miss}")
    print(f"hits: {cache.stats()['hits']}")

    strict, lenient = Classifier("r1", threshold=1.0), Classifier("r1", threshold=0.5)
    text = "hi there"
    print(f"strict: {await strict.predict(text)}, lenient: {await lenient.predict(text)}")

    try:

        @cached_prediction(cache)
        async def tokenize(text: str) -> Opaque:
            return Opaque(text.split())

    except TypeError as exc:
        print(f"TypeError: {str(exc)[:60]}...")

    @cached_prediction(cache, encode=lambda o: o.words, decode=Opaque)
    async def tokenize_with_hooks(text: str) -> Opaque:
        return Opaque(text.split())

    tokens = await tokenize_with_hooks("a b c")
    again = await tokenize_with_hooks("a b c")
    print(f"hooks: {type(tokens).__name__} {tokens.words} then {type(again).__name__}")
    await cache.aclose()


asyncio.run(main())
