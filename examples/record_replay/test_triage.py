"""Tests of code that calls a model, run against recorded decisions (see conftest.py)."""

import pytest
from triage import Queue, Triage, triage

import asyncache


@pytest.mark.parametrize(
    ("ticket", "expected"),
    [
        ("Where is my parcel? I need it ASAP", Triage(Queue.SHIPPING, urgent=True)),
        ("Please send the invoice for order 1234", Triage(Queue.BILLING, urgent=False)),
        ("I want a refund!", Triage(Queue.BILLING, urgent=True)),
    ],
)
async def test_tickets_go_to_their_queue(ticket: str, expected: Triage) -> None:
    assert await triage(ticket) == expected  # a Triage, as the model returned it


async def test_the_model_never_runs() -> None:
    import triage as module

    await triage("How do I change my password?")
    assert module.model_calls == 0


async def test_a_ticket_never_recorded_fails_loudly() -> None:
    with pytest.raises(asyncache.ReplayMiss, match="triage"):
        await triage("a ticket nobody recorded")
