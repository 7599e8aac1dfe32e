"""One cache for every backend: torch computes a decision, ONNX fp32 and int8 replay it.

The three MiniLM backends answer the same yes/no questions with slightly
different arithmetic. Pinned to one fingerprint, they share one set of
decisions: whichever computes first, every backend replays that answer.
The ONNX files are built on first use (no network) into $ASYNCACHE_MODEL_DIR
or ~/.cache/asyncache/minilm.
"""

import asyncio

from asyncache import DecisionCache, cached_prediction
from asyncache.demo.minilm import MiniLMDecider
from asyncache.offload import aclose_default_offloads
from asyncache.stores.sqlite import SQLiteStore

# Pin the fingerprint only after checking that the backends agree on your traffic;
# put the version of your question bank in it.
FINGERPRINT = "minilm-support-v1"
STATE = "Hi, my blender stopped working after a week. I'd like my money back please."
QUESTIONS = ["refund", "cancel", "human"]


def replica(backend: str) -> tuple[MiniLMDecider, DecisionCache, object]:
    """One service replica: a backend, and a cache over the shared SQLite file."""
    decider = MiniLMDecider(backend, fingerprint=FINGERPRINT)
    cache = DecisionCache(SQLiteStore("decisions.sqlite"), fingerprint=decider.fingerprint)

    # onnxruntime and torch release the GIL: a thread keeps the event loop free.
    @cached_prediction(cache, namespace="support-triage", offload="thread")
    def answer(state: str, questions: list[str]) -> list[dict]:
        return decider.predict(state, questions)

    return decider, cache, answer


async def main() -> None:
    replicas = {backend: replica(backend) for backend in ("torch", "onnx", "onnx-int8")}
    for backend, (decider, cache, answer) in replicas.items():
        served = await answer(STATE, QUESTIONS)
        alone = decider.predict(STATE, QUESTIONS)
        how = "replayed" if cache.stats()["hits"] else "computed"
        print(
            f"{backend:9} {how:8} answers {[a['answer'] for a in served]} "
            f"refund score {served[0]['score']:+.4f}; alone: {alone[0]['score']:+.4f}"
        )

    # Unpinned, each backend derives its own fingerprint and keeps its own decisions.
    derived = {backend: MiniLMDecider(backend).fingerprint for backend in ("onnx", "onnx-int8")}
    print("derived fingerprints differ:", derived["onnx"] != derived["onnx-int8"])
    for _, cache, _ in replicas.values():
        await cache.aclose()
    await aclose_default_offloads()


asyncio.run(main())
