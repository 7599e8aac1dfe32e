"""The code under test: support tickets triaged by a model, through the cache.

ASYNCACHE_MODE and ASYNCACHE_STORE_URL decide what the cache does: live in
production, record once where the model runs, replay in CI where it does not.
"""

import dataclasses
import enum

from asyncache import DecisionCache, cached_prediction


class Queue(enum.Enum):
    BILLING = "billing"
    SHIPPING = "shipping"
    OTHER = "other"


@dataclasses.dataclass(frozen=True)
class Triage:
    queue: Queue
    urgent: bool


cache = DecisionCache.from_env(fingerprint="triage-model-v1")
model_calls = 0


@cached_prediction(cache)
async def triage(ticket: str) -> Triage:
    global model_calls
    model_calls += 1  # stands for a forward pass: a GPU, a paid API, minutes of CPU
    text = ticket.lower()
    if "refund" in text or "invoice" in text:
        queue = Queue.BILLING
    elif "parcel" in text or "delivery" in text:
        queue = Queue.SHIPPING
    else:
        queue = Queue.OTHER
    return Triage(queue, urgent="asap" in text or "!" in text)
