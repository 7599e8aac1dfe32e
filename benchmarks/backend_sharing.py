"""One cache for every backend: torch fp32 decides, ONNX fp32 and ONNX int8 replay.

Run: ``.venv/bin/python benchmarks/backend_sharing.py`` (``--quick`` for fewer
requests, ``--json PATH`` to write the table as JSON).

The MiniLM decision model (``asyncache.demo.minilm.MiniLMDecider``) answers
five yes/no support questions about each message. Three backends of the same
checkpoint serve it: torch fp32, ONNX fp32 and ONNX int8. Every backend's
cache opens the same SQLite file with the same pinned fingerprint and
namespace, as three machines of a mixed fleet would:

1. torch fp32 computes each request and stores it (a miss: model + store);
2. ONNX fp32, then ONNX int8, ask the same requests: every one is a hit that
   replays torch's decision, and their models never run.

The "alone" columns run each backend without the cache: how long its own
forward pass takes, and whether it would have given torch's answers. int8
arithmetic differs, so close calls can flip; over the shared file they cannot.
Times are medians per request, one request at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

# Importing _common also puts the checkout's root on sys.path, for asyncache.
from _common import table

PINNED = "minilm-support-questions-v1"
NAMESPACE = "support.decide"
QUESTIONS = ["refund", "cancel", "delivery", "billing", "discount"]

# Everyday support messages, some of them deliberately borderline.
STATES = (
    "Hi, my blender stopped working after a week. I'd like my money back please.",
    "I've been charged two times this month for one subscription. Fix it!",
    "My package was supposed to arrive on Monday and it's Thursday now.",
    "Please stop my membership, I'm moving abroad.",
    "Is there a coupon for first-time buyers?",
    "The tracking page hasn't updated in five days, where is my parcel?",
    "I returned the shoes last week; when will I see the money on my card?",
    "Why is my bill higher than last month? I didn't change anything.",
    "Can I pause my subscription instead of cancelling it?",
    "The courier left my box at the wrong address.",
    "Do you price match if I find it cheaper elsewhere?",
    "I don't want the yearly plan anymore, switch me back to monthly.",
    "The item I received is not what I ordered, what now?",
    "There's a $4.99 fee on my statement I never agreed to.",
    "Any chance of a discount if I buy three of these?",
    "Cancel the order I placed an hour ago, I ordered the wrong color.",
    "My order says delivered but there's nothing at my door.",
    "The product is fine but I changed my mind, can I send it back?",
    "I was promised 20% off and it didn't apply at checkout.",
    "Your app keeps charging me for a plan I downgraded.",
    "How long does shipping to Canada usually take?",
    "I'd like to close my account and delete my data.",
    "The headphones crackle in the left ear, I want a replacement or refund.",
    "Thanks, the replacement arrived today and works great!",
)


class Counted:
    """Calls a decider, counting the requests it had to compute."""

    def __init__(self, decider: Any) -> None:
        self.decider = decider
        self.computed = 0
        self.lock = threading.Lock()

    def __call__(self, state: str, questions: list[str]) -> Any:
        with self.lock:
            self.computed += 1
        return self.decider.predict(state, questions)


async def through_cache(path: Path, decider: Any) -> tuple[list[Any], list[float], Counted]:
    """Ask every request, one at a time, through a cache over the SQLite file at ``path``."""
    from asyncache import DecisionCache, cached_prediction
    from asyncache.offload import ThreadOffload
    from asyncache.stores.sqlite import SQLiteStore

    model = Counted(decider)
    results: list[Any] = []
    seconds: list[float] = []
    async with DecisionCache(SQLiteStore(path)) as cache, ThreadOffload(1) as offload:
        decide = cached_prediction(cache, namespace=NAMESPACE, fingerprint=PINNED, offload=offload)(
            model
        )
        for state in STATES:
            started = time.perf_counter()
            results.append(await decide(state, QUESTIONS))
            seconds.append(time.perf_counter() - started)
    return results, seconds, model


def alone(decider: Any) -> tuple[list[Any], list[float]]:
    """Each request through the backend's own forward pass, no cache."""
    decider.predict(STATES[0], QUESTIONS)  # warm-up
    results: list[Any] = []
    seconds: list[float] = []
    for state in STATES:
        started = time.perf_counter()
        results.append(decider.predict(state, QUESTIONS))
        seconds.append(time.perf_counter() - started)
    return results, seconds


def answers(results: list[Any]) -> list[bool]:
    return [answer["answer"] for result in results for answer in result]


def ms(seconds: list[float]) -> str:
    value = statistics.median(seconds) * 1000
    return f"{value:.3f} ms" if value < 1 else f"{value:.1f} ms"


async def measure(quick: bool) -> dict[str, Any]:
    from asyncache.demo.minilm import MiniLMDecider

    global STATES
    if quick:
        STATES = STATES[:8]
    deciders = {
        "PyTorch fp32": MiniLMDecider("torch"),
        "ONNX fp32": MiniLMDecider("onnx"),
        "ONNX int8": MiniLMDecider("onnx-int8"),
    }
    own = {name: alone(decider) for name, decider in deciders.items()}
    reference = answers(own["PyTorch fp32"][0])
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "decisions.db"
        stored: list[Any] | None = None
        for name, decider in deciders.items():
            results, seconds, model = await through_cache(path, decider)
            own_results, own_seconds = own[name]
            if stored is None:
                stored = results
                shared = f"{ms(seconds)}, computed and stored ({model.computed} misses)"
                same = "—"
            else:
                replayed = results == stored and model.computed == 0
                verdict = "replayed torch's decisions" if replayed else "DID NOT replay"
                shared = f"{ms(seconds)}, {verdict} ({model.computed} computed)"
                mine = answers(own_results)
                flips = sum(a != b for a, b in zip(mine, reference, strict=True))
                scores_equal = own_results == own["PyTorch fp32"][0]
                same = (
                    "yes, to the score"
                    if scores_equal
                    else "yes (other scores)"
                    if flips == 0
                    else f"no: {flips} of {len(mine)} answers differ"
                )
            rows.append([name, ms(own_seconds), same, shared])
    return {
        "description": (
            f"{len(STATES)} support messages x {len(QUESTIONS)} yes/no questions, all-MiniLM-L6-v2 "
            f"on this CPU; three caches over one SQLite file, fingerprint pinned to {PINNED!r}. "
            "Median time per request, one request at a time."
        ),
        "backends": {
            "title": "One cache for every backend",
            "columns": [
                "backend",
                "alone: forward pass",
                "alone: same answers as torch fp32?",
                "over one SQLite file",
            ],
            "rows": rows,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8 requests instead of 24")
    parser.add_argument("--json", metavar="PATH", help="also write the table as JSON")
    options = parser.parse_args(argv)
    result = asyncio.run(measure(options.quick))
    print(result["description"])
    print()
    print(table(result["backends"]["columns"], result["backends"]["rows"]))
    if options.json:
        Path(options.json).write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
