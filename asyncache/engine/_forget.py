"""Forgetting: drop every decision with some tags, or stored under a scope, in one call.

The store does the work (``Forgetting``: its label index and tombstones;
``asyncache.tags`` says how the labels are made and why a computation that
began before a forget never stores afterwards). Here: the mode's say (replay
never writes), a store that cannot forget named in the error, and the count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..errors import ReplayRefused
from ..stores.protocol import Forgetting
from ..tags import forget_labels
from ._engine import Engine

__all__ = ["forget"]


async def forget(
    engine: Engine,
    namespace: str | None,
    tags: Iterable[str] = (),
    scope: Any = None,
    *,
    dry_run: bool = False,
    progress: Callable[[int, int], object] | None = None,
) -> int:
    """Drop every decision of ``namespace`` with any of ``tags`` or under ``scope``.

    Returns how many were dropped (with ``dry_run``: would be), and counts them
    in the ``forgotten`` stat.

    Raises:
        ValueError: neither tags nor a scope was given.
        TypeError: a tag is not a string, or the store cannot forget.
        ReplayRefused: the cache replays (``mode="replay"`` never writes).
        StoreError: the store failed; what it dropped so far stays dropped.
    """
    labels = forget_labels(namespace, tags, scope)
    if not labels:
        raise ValueError("forget() needs tags=[...], scope=..., or both")
    if engine.mode == "replay" and not dry_run:
        raise ReplayRefused(
            "replay: forget() would drop recorded decisions, and replay never writes; "
            "forget in mode='record' or 'live' (or pass dry_run=True to count)"
        )
    store = engine.store
    if not isinstance(store, Forgetting):
        raise TypeError(
            f"{type(store).__name__} cannot forget decisions by tag or scope: it has no "
            "forget(labels) (asyncache.stores.protocol.Forgetting); MemoryStore, "
            "SQLiteStore, RedisStore and TieredStore can"
        )
    dropped = await store.forget(labels, dry_run=dry_run, progress=progress)
    if not dry_run:
        engine.stats.forgotten += dropped
    return dropped
