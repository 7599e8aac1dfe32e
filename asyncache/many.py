"""The batch path of ``DecisionCache``: one ``get_many``, one compute, one ``add_many``.

``DecisionCache.get_or_compute_many`` delegates here. A batch removes its
duplicate keys, reads them in one call, then, with no ``await`` in between,
claims every missing key that has no flight, computes all of those in one
model call and stores them in one ``add_many``; only then does it wait on the
flights other callers own. Claiming before waiting is what keeps two batches
from waiting on each other (see ``asyncache.flight``).

From the cache this uses its settings, its counters (``_stats``), its flight
table (``_flights``), its store calls (``_guard``) and three steps of the
single-key path: ``_decode_hit``, ``_prepare`` and ``_winner``.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from .flight import Flight
from .stores.protocol import Entry

if TYPE_CHECKING:
    from .cache import DecisionCache

__all__ = ["get_or_compute_many"]

BatchCompute = Callable[[list[int]], Awaitable[Sequence[Any]]]


async def get_or_compute_many(
    cache: DecisionCache,
    keys: Sequence[bytes],
    compute: BatchCompute,
    inputs: Sequence[Any] | None = None,
) -> list[Any]:
    """``DecisionCache.get_or_compute_many``: see there."""
    count = len(keys)
    item_inputs: Sequence[Any] = inputs if inputs is not None else [None] * count
    stats = cache._stats
    if not cache.enabled:
        stats.bypassed += count
        return _raise_item_errors(list(await compute(list(range(count)))))
    first: dict[bytes, int] = {}
    uses: dict[bytes, int] = {}
    for index, key in enumerate(keys):
        first.setdefault(key, index)
        uses[key] = uses.get(key, 0) + 1
    unique = list(first)
    found: dict[bytes, Any] = {}
    entries = await cache._guard.call("get_many", lambda: cache.store.get_many(unique))
    for key, entry in zip(unique, entries or [None] * len(unique), strict=True):
        if entry is not None:
            decoded = await cache._decode_hit(key, entry, uses[key])
            if decoded is not None:
                found[key] = decoded.value
    missing = [key for key in unique if key not in found]
    stats.misses += sum(uses[key] for key in missing)
    # Claim every unclaimed key before awaiting anything: never wait on our own keys.
    flights = cache._flights
    own: list[bytes] = []
    own_flights: list[Flight[Any]] = []
    theirs: list[tuple[bytes, Flight[Any]]] = []
    for key in missing:
        flight = flights.get(key) if cache.coalesce else None
        if flight is not None:
            stats.coalesced += 1
            theirs.append((key, flight))
            continue
        flight = flights.claim(key) if cache.coalesce else Flight()
        own.append(key)
        own_flights.append(flight)
    if own:
        work = _fly_batch(cache, own, own_flights, [first[k] for k in own], compute, item_inputs)
        if cache.coalesce:
            flights.start(own, own_flights, work)
        else:
            await work
    outcomes: dict[bytes, Flight[Any]] = {}
    for key, flight in zip(own, own_flights, strict=True):
        await flight.wait(None)
        outcomes[key] = flight
    retry: list[bytes] = []
    for key, flight in theirs:
        done = await flight.wait(cache.coalesce_timeout)
        if not done:
            stats.coalesce_timeouts += 1
        if done and flight.shared and not isinstance(flight.error, asyncio.CancelledError):
            outcomes[key] = flight
        else:
            retry.append(key)
    if retry:
        # Their owners were too slow or refused to share: compute these ourselves.
        alone = [Flight[Any]() for _ in retry]
        await _fly_batch(cache, retry, alone, [first[k] for k in retry], compute, item_inputs)
        outcomes.update(zip(retry, alone, strict=True))
    results: list[Any] = []
    # Values other callers also hold (flights this batch followed) or that an earlier
    # item of this batch received are copied: a caller may mutate what it gets.
    handed: set[bytes] = {key for key, _ in theirs}
    for key in keys:
        if key in found:
            value: Any = found[key]
        else:
            flight = outcomes[key]
            value = flight.error if flight.error is not None else flight.value
        if key in handed and not isinstance(value, BaseException):
            value = copy.deepcopy(value)
        results.append(value)
        handed.add(key)
    return _raise_item_errors(results)


async def _fly_batch(
    cache: DecisionCache,
    keys: list[bytes],
    flights: list[Flight[Any]],
    indices: list[int],
    compute: BatchCompute,
    inputs: Sequence[Any],
) -> None:
    """Compute the items at ``indices`` in one call, store them in one ``add_many``
    and finish each item's flight with the decision that won."""
    table = cache._flights
    started = time.perf_counter()
    try:
        results = list(await compute(indices))
        if len(results) != len(indices):
            raise ValueError(f"the model returned {len(results)} results for {len(indices)} items")
    except asyncio.CancelledError:
        raise
    except BaseException as exc:
        for key, flight in zip(keys, flights, strict=True):
            table.release(key, flight)
            flight.set_error(exc)
        return
    seconds = time.perf_counter() - started
    if cache.on_compute is not None:
        cache.on_compute(seconds)
    share = seconds / max(len(indices), 1)
    pending: list[tuple[bytes, bytes, float | None]] = []
    waiting: list[tuple[Flight[Any], Any]] = []
    for key, flight, index, result in zip(keys, flights, indices, results, strict=True):
        table.release(key, flight)
        if isinstance(result, BaseException):
            flight.set_error(result)
            continue
        prepared = cache._prepare(key, result, inputs[index], share)
        if prepared is None:
            flight.set_result(result)
            continue
        pending.append((key, *prepared))
        waiting.append((flight, result))
    if not pending:
        return
    added = await cache._guard.call("add_many", lambda: cache.store.add_many(pending))
    winners: list[Entry | None] = list(added) if added else [None] * len(pending)
    for (key, value, _), (flight, result), entry in zip(pending, waiting, winners, strict=True):
        flight.set_result(cache._winner(key, value, entry, result))


def _raise_item_errors(results: list[Any]) -> list[Any]:
    """``results``, unless an item failed: then the first failure is raised."""
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results
