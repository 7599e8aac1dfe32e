"""Filling and reading stores from a test's setup, whatever the store."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from asyncache.stores import open_store

if TYPE_CHECKING:
    from redis.asyncio import Redis


def fill(url: str, entries: Sequence[tuple[bytes, bytes, float | None]]) -> None:
    """Add ``(key, value, expires_at)`` entries to the store at ``url``, one ``add`` each.

    Sync, for fixtures of tests that then run a command on the store (the CLI).
    """

    async def adding() -> None:
        store = open_store(url)
        try:
            for key, value, expires_at in entries:
                await store.add(key, value, expires_at)
        finally:
            await store.aclose()

    asyncio.run(adding())


async def command_calls(*clients: Redis) -> dict[str, int]:
    """Calls per command since the last ``CONFIG RESETSTAT``, summed over ``clients``' servers."""
    totals: dict[str, int] = {}
    for client in clients:
        for name, stat in (await client.info("commandstats")).items():
            command = name.removeprefix("cmdstat_")
            totals[command] = totals.get(command, 0) + stat["calls"]
    return totals
