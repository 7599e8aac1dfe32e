"""Record the decisions the tests replay. Run it once where the model is:

    ASYNCACHE_MODE=record ASYNCACHE_STORE_URL=sqlite:///decisions.sqlite python record.py

then commit decisions.sqlite beside the tests.
"""

import asyncio

import triage

TICKETS = [
    "Where is my parcel? I need it ASAP",
    "Please send the invoice for order 1234",
    "I want a refund!",
    "How do I change my password?",
]


async def main() -> None:
    for ticket in TICKETS:
        decision = await triage.triage(ticket)
        print(f"{ticket!r}: {decision.queue.value}{' (urgent)' if decision.urgent else ''}")
    print(f"mode: {triage.cache.mode}, model calls: {triage.model_calls}")
    await triage.cache.aclose()


asyncio.run(main())
