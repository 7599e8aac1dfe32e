"""Micro-batching: concurrent single-item misses share one forward pass of a sync model."""

import asyncio
import threading
import time

import numpy as np

from asyncache import DecisionCache, ThreadOffload, cached_prediction

LABELS = ("billing", "shipping", "technical", "other")
# A toy linear model with untrained weights: its labels are arbitrary, and deterministic.
WEIGHTS = np.random.default_rng(0).standard_normal((256, len(LABELS))).astype(np.float32)
forward_passes: list[int] = []  # the batch size of each forward pass
lock = threading.Lock()


def features(text: str) -> np.ndarray:
    vector = np.zeros(256, dtype=np.float32)
    for word in text.lower().split():
        vector[sum(word.encode()) % 256] += 1.0
    return vector


cache = DecisionCache(fingerprint="intent-linear-v1")
pool = ThreadOffload(max_workers=2)  # onnxruntime and torch release the GIL: threads suffice


@cached_prediction(cache, batch=True, offload=pool, max_batch_size=16, max_wait_ms=5)
def classify(texts: list[str]) -> list[str]:
    """One forward pass for the whole batch: this is where a GPU earns its keep."""
    with lock:
        forward_passes.append(len(texts))
    time.sleep(0.02)  # stands in for a fixed per-pass cost (kernel launch, transfer)
    scores = np.stack([features(text) for text in texts]) @ WEIGHTS
    return [LABELS[int(index)] for index in scores.argmax(axis=1)]


async def main() -> None:
    texts = [f"ticket {i}: my invoice shows a double charge" for i in range(64)]

    # 64 concurrent distinct misses: gathered into batches of at most 16.
    labels = await asyncio.gather(*(classify(text) for text in texts))
    print(f"64 distinct calls -> {len(forward_passes)} forward passes of {forward_passes}")

    # The same 64 again: all hits, no forward pass.
    again = await asyncio.gather(*(classify(text) for text in texts))
    print("repeat: forward passes", len(forward_passes), "same answers:", again == labels)

    # 48 concurrent calls for 3 new texts: identical misses share a flight, so 3 items.
    forward_passes.clear()
    fresh = [f"parcel {i} never arrived" for i in range(3)]
    await asyncio.gather(*(classify(fresh[i % 3]) for i in range(48)))
    print("48 calls, 3 distinct ->", forward_passes)

    # many(): one lookup for the list, one computation of only its misses.
    forward_passes.clear()
    mixed = [*texts[:4], "the app crashes on login", "cannot reset my password"]
    print("many():", await classify.many(mixed), "computed:", forward_passes)

    stats = cache.stats()
    print({name: stats[name] for name in ("hits", "misses", "coalesced", "stores")})
    await classify.aclose()
    await pool.aclose()
    await cache.aclose()


asyncio.run(main())
