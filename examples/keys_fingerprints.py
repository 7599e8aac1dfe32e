"""Keys and fingerprints: what makes two calls share a decision, and what keeps them apart."""

import asyncio
import math

import numpy as np

from asyncache import cached_prediction, make_key


def key(inputs: object, fingerprint: str = "router-v1") -> str:
    return make_key("route", fingerprint, None, inputs).hex()


# Values that JSON would merge get different keys.
print("1 vs 1.0:        ", key({"x": 1}) != key({"x": 1.0}))
print("None vs NaN:     ", key({"x": None}) != key({"x": math.nan}))
print("'x' vs b'x':     ", key({"x": "x"}) != key({"x": b"x"}))
# A tuple and a list with the same items share a key (both are JSON arrays).
print("(1, 2) vs [1, 2]:", key({"x": (1, 2)}) == key({"x": [1, 2]}))
# Mapping order does not matter: object keys are sorted.
print("dict order:      ", key({"a": 1, "b": 2}) == key({"b": 2, "a": 1}))
# Arrays key on dtype, shape and a digest of their bytes.
vector = np.arange(6, dtype=np.float32)
print("float32 vs float64:", key({"x": vector}) != key({"x": vector.astype(np.float64)}))
print("shape (6,) vs (2, 3):", key({"x": vector}) != key({"x": vector.reshape(2, 3)}))
# The fingerprint is part of every key: a new model revision starts from an empty cache.
print("new fingerprint: ", key({"x": 1}) != key({"x": 1}, fingerprint="router-v2"))


class Session:
    """Not something a key can encode: the decorator refuses it instead of str()-ing it."""


# --8<-- [start:fingerprint]
from asyncache import DecisionCache

cache = DecisionCache(fingerprint={"model": "router", "revision": 7, "threshold": 0.8})
# --8<-- [end:fingerprint]


async def main() -> None:
    @cached_prediction(cache)
    async def route(text: str, session: Session) -> str:
        return "billing" if "invoice" in text else "support"

    try:
        await route("where is my invoice?", Session())
    except TypeError as exc:
        print("TypeError:", exc)

    # ignore= leaves the argument out of the key; key= says what identifies the call.
    @cached_prediction(cache, namespace="route", ignore=("session",))
    async def route_ignoring(text: str, session: Session) -> str:
        return "billing" if "invoice" in text else "support"

    @cached_prediction(cache, namespace="route", key=lambda text, session: {"text": text})
    async def route_keyed(text: str, session: Session) -> str:
        return "billing" if "invoice" in text else "support"

    print(await route_ignoring("where is my invoice?", Session()))
    print(await route_ignoring("where is my invoice?", Session()), "(a hit)")
    print("16-byte key:", route_ignoring.key("where is my invoice?", Session()).hex())
    # Same namespace, same identifying inputs: the two functions share one decision.
    print("key= call:", await route_keyed("where is my invoice?", Session()))
    print(
        "shared:",
        route_keyed.key("where is my invoice?", Session())
        == route_ignoring.key("where is my invoice?", Session()),
    )
    print("hits:", cache.stats()["hits"])
    await cache.aclose()


asyncio.run(main())
