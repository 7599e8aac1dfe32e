"""Trust: a model that silently changes, served by a plain cache, by audits, and under a bound.

Run: ``.venv/bin/python benchmarks/trust.py`` (``--json PATH`` to write the
table as JSON; ``--quick`` runs the same calls: the whole run takes seconds).

A deterministic model answers each of 2,000 inputs. 50,000 calls draw their
inputs from a seeded Zipf distribution (exponent 1.2), one after another on a
``MemoryStore``, the event loop given a turn between calls so that background
audits run as they would in a service. After the first 10,000 calls the model
silently changes its answer for 5% of the inputs: one in each 20 by popularity,
chosen with the same seed, so that they carry about 5% of the calls.
Three caches see the same calls:

- a plain cache;
- ``audit_rate=0.05``: a sample of hits is recomputed; a disagreement replaces
  the stored decision (compare-and-set);
- ``audit_rate=0.05, max_wrong_rate=0.01``: hits are served only while the
  95% upper bound of the audited wrong rate is at most 1%; otherwise each hit
  is computed, compared and repaired.

Reported: answers served after the change that differ from the model's
current answer, model calls (audits included) and the hit rate. The same runs
again with a model that never changes, for the hit rate after the first
1,000 calls. Goals, with the bound: wrong answers served after the change at
most 1% of the calls after it; model calls at most 15% of all calls; with an
unchanged model, a hit rate within 5 points of the plain cache's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from pathlib import Path
from typing import Any

# Importing _common also puts the checkout's root on sys.path, for asyncache.
from _common import machine

from asyncache import DecisionCache, MemoryStore, cached_prediction

INPUTS = 2_000
CALLS = 50_000
CHANGE_AT = 10_000
CHANGED_SHARE = 0.05
WARM_CALLS = 1_000
ZIPF = 1.2
SEED = 35
OTHER_SEEDS = (1, 2, 3, 4, 5)
"""Seeds the bound is run with again (other inputs, other changed inputs, other audits)."""

SETUPS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("plain cache", {}),
    ("audit_rate=0.05", {"audit_rate": 0.05}),
    ("audit_rate=0.05, max_wrong_rate=0.01", {"audit_rate": 0.05, "max_wrong_rate": 0.01}),
)


def workload(seed: int = SEED) -> tuple[list[int], frozenset[int]]:
    """The inputs of every call (Zipf over ``INPUTS``) and the inputs whose answer changes."""
    rng = random.Random(seed)
    weights = [1.0 / (rank + 1) ** ZIPF for rank in range(INPUTS)]
    order = list(range(INPUTS))
    rng.shuffle(order)  # which input is popular is not its number
    calls = rng.choices(order, weights=weights, k=CALLS)
    # One input in 20 at every level of popularity (a random one of each 20 by rank):
    # 5% of the inputs, carrying about 5% of the calls.
    step = round(1 / CHANGED_SHARE)
    changed = frozenset(order[start + rng.randrange(step)] for start in range(0, INPUTS, step))
    return calls, changed


async def run(
    settings: dict[str, Any],
    calls: list[int],
    changed: frozenset[int],
    *,
    changes: bool,
    seed: int = SEED,
) -> dict[str, Any]:
    """One cache through every call; what it served and what it cost."""
    state = {"calls": 0, "changed": False}
    random.seed(seed)  # which hits are audited: the same in every run

    def answer(x: int) -> int:
        base = (x * 7919) % 10
        return (base + 1) % 10 if state["changed"] and x in changed else base

    cache = DecisionCache(MemoryStore(), namespace="trust-bench", **settings)

    @cached_prediction(cache, namespace="model")
    async def model(x: int) -> int:
        state["calls"] += 1
        return answer(x)

    wrong_after = 0
    hits_at_warm = misses_at_warm = 0
    for index, x in enumerate(calls):
        if index == CHANGE_AT and changes:
            state["changed"] = True
        if index == WARM_CALLS:
            stats = cache.stats()
            hits_at_warm, misses_at_warm = stats["hits"], stats["misses"]
        served = await model(x)
        if state["changed"] and served != answer(x):
            wrong_after += 1
        await asyncio.sleep(0)  # background audits run between calls, as in a service
    for _ in range(20):  # the last audits land
        await asyncio.sleep(0)
    stats = cache.stats()
    trust = cache.trust().get("model")
    await cache.aclose()
    hits, misses = stats["hits"], stats["misses"]
    later = (hits - hits_at_warm) + (misses - misses_at_warm)
    return {
        "wrong_after": wrong_after,
        "model_calls": state["calls"],
        "hit_rate": hits / (hits + misses),
        "hit_rate_after_warm": (hits - hits_at_warm) / later,
        "audits": stats["audits"],
        "repairs": stats["repairs"],
        "doubt_computes": stats["doubt_computes"],
        "breaches": stats["breaches"],
        "wrong_rate_upper": None if trust is None else trust.upper,
    }


async def measure() -> dict[str, Any]:
    calls, changed = workload()
    after = CALLS - CHANGE_AT
    rows: list[dict[str, Any]] = []
    results: dict[str, dict[str, Any]] = {}
    steady: dict[str, dict[str, Any]] = {}
    for name, settings in SETUPS:
        results[name] = result = await run(settings, calls, changed, changes=True)
        steady[name] = await run(settings, calls, changed, changes=False)
        rows.append(
            {
                "cache": name,
                "wrong served after the change": result["wrong_after"],
                "share of calls after it": f"{result['wrong_after'] / after:.2%}",
                "model calls": result["model_calls"],
                "share of all calls": f"{result['model_calls'] / CALLS:.1%}",
                "hit rate": f"{result['hit_rate']:.1%}",
                "breaches": result["breaches"],
                "repairs": result["repairs"],
                "unchanged model: hit rate after 1,000 calls": (
                    f"{steady[name]['hit_rate_after_warm']:.1%}"
                ),
                "unchanged model: breaches": steady[name]["breaches"],
            }
        )
    bound = results[SETUPS[2][0]]
    plain = results[SETUPS[0][0]]
    goals = {
        "wrong served after the change <= 1% of the calls after it": (
            bound["wrong_after"] <= 0.01 * after
        ),
        "model calls <= 15% of all calls": bound["model_calls"] <= 0.15 * CALLS,
        "unchanged model: hit rate within 5 points of the plain cache's": (
            abs(
                steady[SETUPS[2][0]]["hit_rate_after_warm"]
                - steady[SETUPS[0][0]]["hit_rate_after_warm"]
            )
            <= 0.05
        ),
    }
    sweep: list[dict[str, Any]] = []
    for seed in OTHER_SEEDS:
        seed_calls, seed_changed = workload(seed)
        plain_wrong = (await run({}, seed_calls, seed_changed, changes=True, seed=seed))[
            "wrong_after"
        ]
        other = await run(SETUPS[2][1], seed_calls, seed_changed, changes=True, seed=seed)
        sweep.append(
            {
                "seed": seed,
                "plain cache: wrong after the change": f"{plain_wrong / after:.2%}",
                "with the bound: wrong after the change": f"{other['wrong_after'] / after:.2%}",
                "model calls": f"{other['model_calls'] / CALLS:.1%}",
                "breaches": other["breaches"],
            }
        )
    notes = [
        f"{CALLS:,} calls over {INPUTS:,} inputs (Zipf {ZIPF}, seed {SEED}); after "
        f"{CHANGE_AT:,} calls the model changes its answer for {CHANGED_SHARE:.0%} of the "
        f"inputs, which the plain cache then serves wrong on "
        f"{plain['wrong_after'] / after:.2%} of the calls; MemoryStore; {machine()}.",
        "Wrong: the answer served differs from the model's current answer. Model calls "
        "count misses, audits and doubt computes. The unchanged-model columns run the "
        "same calls with a model that never changes.",
        *(f"{goal}: {'pass' if ok else 'MISS'}" for goal, ok in goals.items()),
    ]
    return {
        "title": "Trust: a model that silently changes, beside a plain cache and audits alone",
        "command": "python benchmarks/trust.py",
        "side_by_side": {
            "title": f"Side by side (seed {SEED})",
            "columns": list(rows[0]),
            "rows": rows,
            "notes": notes,
        },
        "other_seeds": {
            "title": "With the bound, on other seeds",
            "columns": list(sweep[0]),
            "rows": sweep,
            "notes": [
                "The breaches, and with them the model calls, vary with which inputs "
                "changed and which hits were audited: each breach costs the calls computed "
                "in doubt, then the every-hit audits until the bound is under half the limit."
            ],
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the table as JSON here")
    parser.add_argument("--quick", action="store_true", help="the same run (it is quick)")
    args = parser.parse_args()
    document = asyncio.run(measure())
    if args.json is not None:
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    for part in ("side_by_side", "other_seeds"):
        table = document[part]
        print(table["title"])
        for row in table["rows"]:
            print(" | ".join(f"{column}: {value}" for column, value in row.items()))
        for note in table["notes"]:
            print("-", note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
