"""The pools of docs/offload.md: threads, processes, your own, batches and shared backends."""

import asyncio
import json
import os
import sys

from asyncache import DecisionCache, ThreadOffload, cached_prediction


class Model:
    """Stands in for an onnxruntime or torch model: a sync, GIL-releasing predict."""

    fingerprint = "keyword-model-v1"

    def predict(self, texts: list[str]) -> list[str]:
        return ["shipping" if "parcel" in text else "other" for text in texts]

    def predict_batch(self, items: list[str]) -> list[str]:
        return self.predict(items)


model = Model()


async def threads() -> None:
    # --8<-- [start:thread]
    from asyncache import DecisionCache, ThreadOffload, cached_prediction

    cache = DecisionCache()
    pool = ThreadOffload(max_workers=2)

    @cached_prediction(cache, offload=pool)
    def classify(text: str) -> str:
        return model.predict([text])[0]  # onnxruntime / torch: releases the GIL

    label = await classify("my parcel never arrived")
    # --8<-- [end:thread]
    print("thread:", label, await classify("my parcel never arrived"), cache.stats()["hits"])
    await pool.aclose()


# --8<-- [start:protocol]
class InlineOffload:  # the Offload protocol: run(fn, *args, **kwargs) and aclose()
    """Runs the model on the event loop itself: only for models that take microseconds."""

    async def run(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        return fn(*args, **kwargs)

    async def aclose(self) -> None:
        pass


# --8<-- [end:protocol]


def shout(text: str) -> str:
    return text.upper()


async def own_pool() -> None:
    inline = cached_prediction(DecisionCache(), offload=InlineOffload())(shout)
    print("own pool:", await inline("refund"))


async def processes() -> None:
    # --8<-- [start:process]
    import models

    from asyncache import DecisionCache, ProcessOffload, cached_prediction

    cache = DecisionCache()
    pool = ProcessOffload(2, initializer=models.load, initargs=("forest.json",))
    score = cached_prediction(cache, offload=pool)(models.score)

    await pool.start()  # optional: load the model in every worker before traffic
    # --8<-- [end:process]
    print("process:", await score([1.0, 2.0]), await score([1.0, 2.0]), cache.stats()["hits"])
    await pool.aclose()


async def batches() -> None:
    cache = DecisionCache()
    pool = ThreadOffload(max_workers=1)
    item, items = "where is my parcel", ["parcel late", "hello", "parcel lost"]
    # --8<-- [start:batch]
    decide = cached_prediction(cache, batch=True, offload=pool, fingerprint=model.fingerprint)(
        model.predict_batch
    )
    answer = await decide(item)  # one item in, one result out
    answers = await decide.many(items)  # a whole list
    # --8<-- [end:batch]
    print("batch:", answer, answers)
    await pool.aclose()


async def shared_backends() -> None:
    cache = DecisionCache()
    gpu, cpu = ThreadOffload(max_workers=1), ThreadOffload(max_workers=1)
    torch_model, int8_model = Model(), Model()
    # --8<-- [start:shared]
    shared = dict(namespace="support.decide", fingerprint="minilm-support-v1")
    decide_torch = cached_prediction(cache, batch=True, offload=gpu, **shared)(
        torch_model.predict_batch
    )
    decide_int8 = cached_prediction(cache, batch=True, offload=cpu, **shared)(
        int8_model.predict_batch
    )
    # --8<-- [end:shared]
    await decide_torch("parcel lost")
    print("shared:", await decide_int8("parcel lost"), "hits:", cache.stats()["hits"])
    await asyncio.gather(gpu.aclose(), cpu.aclose())


async def main() -> None:
    await threads()
    await own_pool()
    await processes()
    await batches()
    await shared_backends()


if __name__ == "__main__":
    # models.py sits next to this script; worker processes import it by name.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    with open("forest.json", "w") as file:  # the "model" the workers load
        json.dump({"weights": [0.5, -1.0], "bias": 0.25}, file)
    asyncio.run(main())
