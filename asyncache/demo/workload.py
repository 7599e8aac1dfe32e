"""The demo's traffic: Zipf-distributed repeats, bursts and a few bypasses.

Real prediction traffic is skewed: a few requests are very common, most are
rare. A Zipf draw over a pool of distinct requests reproduces that; bursts of
identical concurrent requests reproduce a hot item appearing at once on many
clients; ``Cache-Control: no-store`` requests show the bypass path.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from .client import LoadClient, server_timing_ms

__all__ = ["Outcome", "Request", "build_workload", "percentile", "send_all"]

# Support-desk messages: the "state" a decision is made about.
_OPENINGS = (
    "Hi, I ordered {item} last week and",
    "Hello team,",
    "Quick question about {item}:",
    "This is the third time I am writing:",
    "Good morning, regarding order #{order},",
)
_BODIES = (
    "it arrived broken and I want my money back.",
    "the package still has not arrived and tracking shows nothing.",
    "I was charged twice for the same order.",
    "can I change the delivery address before it ships?",
    "the {item} stopped working after two days, please help.",
    "I love it, thanks for the fast delivery!",
    "how do I reset the password on my account?",
    "please cancel my subscription immediately.",
    "is there a discount if I buy three of them?",
    "your courier left it in the rain and now it is ruined.",
)
_ITEMS = ("a kettle", "headphones", "a desk lamp", "running shoes", "a phone case", "a backpack")
# Question ids from the decision model's bank (asyncache.demo.minilm).
QUESTION_SETS = (
    ["refund", "human"],
    ["delivery", "cancel"],
    ["billing", "refund"],
    ["login"],
    ["discount", "cancel", "human"],
)


@dataclass(frozen=True)
class Request:
    """One request the client sends: its body and whether it asks to bypass."""

    body: dict[str, Any]
    bypass: bool = False
    burst: int = 0  # requests that share a burst id are sent together


@dataclass
class Outcome:
    """What the client saw for one request."""

    status: str  # the X-Cache value: hit, miss, shared, bypass, disabled
    seconds: float  # the client's round trip
    ok: bool
    server_ms: float | None = None  # the server's own time, from its Server-Timing


@dataclass
class Tally:
    outcomes: list[Outcome] = field(default_factory=list)

    def latencies(self, *statuses: str) -> list[float]:
        return [o.seconds for o in self.outcomes if o.status in statuses and o.ok]

    def server_seconds(self, *statuses: str) -> list[float]:
        """The server's time for these outcomes (Server-Timing), in seconds."""
        return [
            o.server_ms / 1000
            for o in self.outcomes
            if o.status in statuses and o.ok and o.server_ms is not None
        ]


def _distinct_requests(count: int, rng: random.Random) -> list[dict[str, Any]]:
    pool: list[dict[str, Any]] = []
    seen: set[str] = set()
    while len(pool) < count:
        item = rng.choice(_ITEMS)
        state = " ".join(
            (
                rng.choice(_OPENINGS).format(item=item, order=rng.randint(1000, 9999)),
                rng.choice(_BODIES).format(item=item),
            )
        )
        questions = rng.choice(QUESTION_SETS)
        marker = state + "|".join(questions)
        if marker not in seen:
            seen.add(marker)
            pool.append({"state": state, "questions": list(questions)})
    return pool


def build_workload(
    total: int,
    *,
    distinct: int = 120,
    zipf_s: float = 1.1,
    burst_every: int = 50,
    burst_size: int = 16,
    bypass_share: float = 0.03,
    seed: int = 7,
) -> list[Request]:
    """``total`` requests: Zipf repeats over ``distinct`` bodies, bursts and bypasses."""
    rng = random.Random(seed)
    bursts = total // burst_every if burst_every else 0
    pool = _distinct_requests(distinct + bursts + 1, rng)
    weights = [1.0 / (rank**zipf_s) for rank in range(1, distinct + 1)]
    fresh = iter(pool[distinct:])  # bursts are of requests nobody asked before
    requests: list[Request] = []
    burst_id = 0
    while len(requests) < total:
        if burst_every and len(requests) % burst_every == burst_every - 1:
            burst_id += 1
            body = next(fresh)
            size = min(burst_size, total - len(requests))
            requests.extend(Request(body, burst=burst_id) for _ in range(size))
            continue
        body = rng.choices(pool[:distinct], weights)[0]
        requests.append(Request(body, bypass=rng.random() < bypass_share))
    return requests[:total]


async def send_all(
    client: LoadClient,
    path: str,
    requests: list[Request],
    *,
    concurrency: int,
    advance: Callable[[int], None] | None = None,
) -> Tally:
    """Send every request with ``concurrency`` in flight all along; bursts go out together.

    ``concurrency`` senders each take the next request as soon as their last one is
    answered (as wrk's connections do), so the load never drains between waves. A
    sender that takes a burst sends all of its requests at once (the client needs
    connections for them beside the steady load).
    """
    tally = Tally()
    outcomes = tally.outcomes
    units: list[Request | list[Request]] = []
    index = 0
    while index < len(requests):
        request = requests[index]
        if request.burst:
            group = [r for r in requests[index : index + 64] if r.burst == request.burst]
            units.append(group)
            index += len(group)
        else:
            units.append(request)
            index += 1
    queue = iter(units)
    bypass_headers = {"cache-control": "no-store"}
    clock = time.perf_counter

    async def one(request: Request) -> None:
        body = orjson.dumps(request.body)
        server_ms = None
        started = clock()
        try:
            response = await client.post_json(
                path, body, bypass_headers if request.bypass else None
            )
            ok = response.status == 200
            status = response.headers.get("x-cache", "none")
            server_ms = server_timing_ms(response.headers)
        except Exception:
            ok, status = False, "error"
        outcomes.append(Outcome(status, clock() - started, ok, server_ms))
        if advance is not None:
            advance(1)

    async def sender() -> None:
        for unit in queue:  # shared: each unit goes to exactly one sender
            if isinstance(unit, list):
                await asyncio.gather(*(one(r) for r in unit))
            else:
                await one(unit)

    await asyncio.gather(*(sender() for _ in range(min(concurrency, len(units)) or 1)))
    return tally


def percentile(values: list[float], share: float) -> float | None:
    """The ``share`` quantile (0..1) of ``values``; ``None`` when there are none."""
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(share * 100) - 1]
