"""The many-keys path of the engine: one ``get_many``, one compute, one ``add_many``.

``DecisionCache.get_or_compute_many`` and ``.many()`` of a batched prediction
come here. A batch removes its duplicate keys, reads them in one call, then,
with no ``await`` in between, claims every missing key that has no flight,
computes all of those in one model call and stores them in one ``add_many``;
only then does it wait on the flights other callers own. Claiming before
waiting is what keeps two batches from waiting on each other (see
``asyncache.engine._flights``).

The features of the one-key path hold here too: a sampled hit is audited
(each item alone), shadow mode computes every item and serves nothing from the
store, and with leases a batch computes only the keys whose lease it took,
then waits for (or takes over) the keys other processes compute. Freshness
too: an item past its ttl within stale-while-revalidate is served and
refreshed alone (``Engine.serve_stale``); one within stale-if-error is
computed with the batch, replaces its entry, and is the item's answer if its
computation fails; a cached error is that item's error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..codec import Decoded
from ..errors import DecodeError
from ..stores.protocol import Entry
from ._flights import Flight, copy_for_caller
from ._freshness import ErrorHit, StaleHit
from ._guard import new_request

if TYPE_CHECKING:
    from ._engine import Engine

__all__ = ["BatchCompute", "get_or_compute_many"]

BatchCompute = Callable[[list[int]], Awaitable[Sequence[Any]]]


async def get_or_compute_many(
    engine: Engine,
    keys: Sequence[bytes],
    compute: BatchCompute,
    inputs: Sequence[Any] | None = None,
) -> list[Any]:
    """``DecisionCache.get_or_compute_many``: see there."""
    new_request()
    count = len(keys)
    item_inputs: Sequence[Any] = inputs if inputs is not None else [None] * count
    stats = engine.stats
    mode = engine.mode
    if mode == "off":
        stats.bypassed += count
        return _raise_item_errors(list(await compute(list(range(count)))))
    first: dict[bytes, int] = {}
    uses: dict[bytes, int] = {}
    for index, key in enumerate(keys):
        first.setdefault(key, index)
        uses[key] = uses.get(key, 0) + 1
    unique = list(first)
    if mode == "record":
        return await _record(engine, keys, unique, first, compute, item_inputs)
    entries = await engine.guard.call("get_many", lambda: engine.store.get_many(unique))
    found_entries = dict(zip(unique, entries or [None] * len(unique), strict=True))
    if mode == "shadow":
        return await _shadow(engine, keys, unique, first, found_entries, compute, item_inputs)
    found: dict[bytes, Any] = {}
    stale: dict[bytes, StaleHit] = {}
    for key in unique:
        entry = found_entries[key]
        if entry is not None:
            try:
                found[key] = engine.hit(key, entry, uses=uses[key], audited=True)
            except DecodeError as exc:
                if mode == "replay":  # nothing is deleted: the error says what is wrong
                    stats.corrupt += 1
                    raise await engine.refusal(key, item_inputs[first[key]], exc) from None
                await engine.discard_corrupt(key, exc)
                continue
            except StaleHit as found_stale:
                index = first[key]
                if found_stale.revalidate:
                    single = _single(compute, index)
                    found[key] = engine.serve_stale(
                        key, found_stale, single, item_inputs[index], uses=uses[key]
                    )
                else:
                    stale[key] = found_stale
                continue
            except ErrorHit as cached:
                stats.error_hits += uses[key]
                found[key] = cached.error
                continue
            if engine.sampler is not None:
                single = _single(compute, first[key])
                engine.sampler.sample(key, entry.value, single, item_inputs[first[key]])
    missing = [key for key in unique if key not in found]
    if mode == "replay" and missing:
        stats.misses += sum(uses[key] for key in missing)
        raise await engine.refusal(missing[0], item_inputs[first[missing[0]]])
    stats.misses += sum(uses[key] for key in missing)
    # Claim every unclaimed key before awaiting anything: never wait on our own keys.
    flights = engine.flights
    own: list[bytes] = []
    own_flights: list[Flight[Any]] = []
    theirs: list[tuple[bytes, Flight[Any]]] = []
    for key in missing:
        flight = flights.get(key) if engine.coalesce else None
        if flight is not None:
            stats.coalesced += 1
            theirs.append((key, flight))
            continue
        flight = flights.claim(key) if engine.coalesce else Flight()
        own.append(key)
        own_flights.append(flight)
    replacing = {key: hit.entry.value for key, hit in stale.items()}
    if own:
        work = _fly(
            engine, own, own_flights, [first[k] for k in own], compute, item_inputs, replacing
        )
        if engine.coalesce:
            flights.start(own, own_flights, work)
        else:
            await work
    outcomes: dict[bytes, Flight[Any]] = {}
    for key, flight in zip(own, own_flights, strict=True):
        await flight.wait(None)
        outcomes[key] = flight
    retry: list[bytes] = []
    for key, flight in theirs:
        done = await flight.wait(engine.coalesce_timeout)
        if not done:
            stats.coalesce_timeouts += 1
        if done and flight.shared and not isinstance(flight.error, asyncio.CancelledError):
            outcomes[key] = flight
        else:
            retry.append(key)
    if retry:
        # Their owners were too slow or refused to share: compute these ourselves.
        alone = [Flight[Any]() for _ in retry]
        await _fly(engine, retry, alone, [first[k] for k in retry], compute, item_inputs, replacing)
        outcomes.update(zip(retry, alone, strict=True))
    for key, hit in stale.items():
        # stale_if_error: a failed item is answered with its stale decision.
        if outcomes[key].error is not None and hit.usable():
            stats.stale_if_error_hits += uses[key]
            found[key] = hit.value
    # Values other callers also hold (flights this batch followed) are copied.
    shared = {key for key, _ in theirs}
    return _answers(keys, found, shared, lambda key: _outcome(outcomes[key]))


async def _fly(
    engine: Engine,
    keys: list[bytes],
    flights: list[Flight[Any]],
    indices: list[int],
    compute: BatchCompute,
    inputs: Sequence[Any],
    replacing: dict[bytes, bytes],
) -> None:
    """Compute the items of ``keys`` and finish their flights: under leases when leases are on.

    With leases, the keys whose lease this process took (or could not ask
    for: a store failure) are computed in one call; decisions that appeared
    meanwhile are adopted; keys another process holds are waited for after
    that, each under the one-key lease rules (take over a lease that died).
    """
    leases = engine.leases
    if leases is None:
        await _compute(engine, keys, flights, indices, compute, inputs, replacing)
        return
    starts = await asyncio.gather(*(leases.begin(key, replacing.get(key)) for key in keys))
    now: list[int] = []
    held: list[int] = []
    for position, (key, flight, start) in enumerate(zip(keys, flights, starts, strict=True)):
        if start.entry is not None:
            try:
                flight.set_result(engine.adopt(key, start.entry))
                engine.flights.release(key, flight)
                continue
            except DecodeError:
                pass
        (held if start.held else now).append(position)
    try:
        if now:
            await _compute(
                engine,
                [keys[p] for p in now],
                [flights[p] for p in now],
                [indices[p] for p in now],
                compute,
                inputs,
                replacing,
            )
    finally:
        await asyncio.gather(*(leases.finish(keys[p], starts[p].token) for p in now))
    if held:
        await asyncio.gather(
            *(
                _wait_held(engine, keys[p], flights[p], indices[p], compute, inputs, replacing)
                for p in held
            )
        )


async def _wait_held(
    engine: Engine,
    key: bytes,
    flight: Flight[Any],
    index: int,
    compute: BatchCompute,
    inputs: Sequence[Any],
    replacing: dict[bytes, bytes],
) -> None:
    """Finish ``flight`` with another process's decision on ``key``, or compute it alone."""
    assert engine.leases is not None
    single = _single(compute, index)
    stale = replacing.get(key)

    async def work() -> Any:
        result, seconds = await engine.timed(single)
        return await engine.store_result(
            key, result, inputs=inputs[index], compute_seconds=seconds, replacing=stale
        )

    try:
        value = await engine.leases.run(key, work, lambda entry: engine.adopt(key, entry), stale)
    except asyncio.CancelledError:
        raise
    except BaseException as exc:
        flight.set_error(exc)
    else:
        flight.set_result(value)
    finally:
        engine.flights.release(key, flight)


async def _compute(
    engine: Engine,
    keys: list[bytes],
    flights: list[Flight[Any]],
    indices: list[int],
    compute: BatchCompute,
    inputs: Sequence[Any],
    replacing: dict[bytes, bytes],
) -> None:
    """Compute the items at ``indices`` in one call, store them in one ``add_many``
    and finish each item's flight with the decision that won.

    Items whose stale entry the store still holds (``replacing``) replace it
    one by one instead; failed items of ``cache_errors`` types are remembered.
    """
    table = engine.flights
    try:
        results, share = await _run(engine, compute, indices)
    except asyncio.CancelledError:
        raise
    except BaseException as exc:
        # Remembered before the callers hear of it: their next call must find it.
        await _remember_errors(engine, [(key, exc) for key in keys], replacing)
        for key, flight in zip(keys, flights, strict=True):
            table.release(key, flight)
            flight.set_error(exc)
        return
    pending: list[tuple[bytes, bytes, float | None]] = []
    waiting: list[tuple[Flight[Any], Any]] = []
    await _remember_errors(
        engine,
        [(k, r) for k, r in zip(keys, results, strict=True) if isinstance(r, BaseException)],
        replacing,
    )
    for key, flight, index, result in zip(keys, flights, indices, results, strict=True):
        table.release(key, flight)
        if isinstance(result, BaseException):
            flight.set_error(result)
            continue
        stale = replacing.get(key)
        if stale is not None:
            flight.set_result(
                await engine.store_result(
                    key, result, inputs=inputs[index], compute_seconds=share, replacing=stale
                )
            )
            continue
        prepared = engine.prepare(key, result, inputs[index], share)
        if prepared is None:
            flight.set_result(result)
            continue
        pending.append((key, *prepared))
        waiting.append((flight, result))
    if not pending:
        return
    added = await engine.guard.call("add_many", lambda: engine.store.add_many(pending))
    winners: list[Entry | None] = list(added) if added else [None] * len(pending)
    for (key, value, _), (flight, result), entry in zip(pending, waiting, winners, strict=True):
        try:
            flight.set_result(engine.winner(key, value, entry, result))
        except Exception as exc:  # another process's cached error won the add
            flight.set_error(exc)


async def _remember_errors(
    engine: Engine, failed: list[tuple[bytes, BaseException]], replacing: dict[bytes, bytes]
) -> None:
    """Store the failures of ``cache_errors`` types, except where a stale entry is kept."""
    for key, error in failed:
        if key not in replacing and engine.policy().caches(error):
            await engine.remember_error(key, error)


async def _shadow(
    engine: Engine,
    keys: Sequence[bytes],
    unique: list[bytes],
    first: dict[bytes, int],
    entries: dict[bytes, Entry | None],
    compute: BatchCompute,
    inputs: Sequence[Any],
) -> list[Any]:
    """Shadow mode: compute every item, compare with the stored ones, serve only fresh ones."""
    auditor = engine.auditor
    assert auditor is not None  # made with mode="shadow"
    indices = [first[key] for key in unique]
    results, share = await _run(engine, compute, indices)
    fresh: dict[bytes, Any] = dict(zip(unique, results, strict=True))
    pending: list[tuple[bytes, bytes, float | None]] = []
    for key, index in zip(unique, indices, strict=True):
        result = fresh[key]
        if isinstance(result, BaseException):
            continue
        stored = await _decoded(engine, key, entries[key])
        auditor.judge_shadow(key, inputs[index], stored, result)
        if stored is None:
            prepared = engine.prepare(key, result, inputs[index], share)
            if prepared is not None:
                pending.append((key, *prepared))
    if pending:
        await engine.guard.call("add_many", lambda: engine.store.add_many(pending))
    return _answers(keys, fresh, set(), fresh.__getitem__)


async def _record(
    engine: Engine,
    keys: Sequence[bytes],
    unique: list[bytes],
    first: dict[bytes, int],
    compute: BatchCompute,
    inputs: Sequence[Any],
) -> list[Any]:
    """Record mode: compute every item, store each in place of what its key held.

    Raises:
        StoreError: the store did not take every decision (``Engine.replace``).
    """
    indices = [first[key] for key in unique]
    results, share = await _run(engine, compute, indices)
    pending: list[tuple[bytes, bytes, float | None]] = []
    fresh: dict[bytes, Any] = {}
    for key, index, result in zip(unique, indices, results, strict=True):
        fresh[key] = result
        if not isinstance(result, BaseException):
            prepared = engine.prepare(key, result, inputs[index], share)
            if prepared is not None:
                pending.append((key, *prepared))
    if pending:
        winners = await engine.replace(pending)  # raises when the store did not take them
        for (key, value, _), entry in zip(pending, winners, strict=True):
            fresh[key] = engine.winner(key, value, entry, fresh[key])
    return _answers(keys, fresh, set(), fresh.__getitem__)


async def _decoded(engine: Engine, key: bytes, entry: Entry | None) -> Decoded | None:
    """The stored decision a hit would have served; a corrupt one is dropped."""
    if entry is None:
        return None
    try:
        return engine.decode(key, entry.value)
    except DecodeError as exc:
        await engine.discard_corrupt(key, exc)
        return None


async def _run(
    engine: Engine, compute: BatchCompute, indices: list[int]
) -> tuple[list[Any], float]:
    """One model call on the items at ``indices``: their results, and each one's share of
    the seconds it took.

    Raises:
        ValueError: the model returned another number of results.
    """
    results, seconds = await engine.timed(lambda: compute(indices))
    listed = list(results)
    if len(listed) != len(indices):
        raise ValueError(f"the model returned {len(listed)} results for {len(indices)} items")
    return listed, seconds / max(len(indices), 1)


def _single(compute: BatchCompute, index: int) -> Callable[[], Awaitable[Any]]:
    """A one-key compute for the item at ``index`` (audits, lease takeovers)."""

    async def one() -> Any:
        results = list(await compute([index]))
        if len(results) != 1:
            raise ValueError(f"the model returned {len(results)} results for 1 item")
        if isinstance(results[0], BaseException):
            raise results[0]
        return results[0]

    return one


def _outcome(flight: Flight[Any]) -> Any:
    return flight.error if flight.error is not None else flight.value


def _answers(
    keys: Sequence[bytes],
    found: dict[bytes, Any],
    shared: set[bytes],
    outcome: Callable[[bytes], Any],
) -> list[Any]:
    """One answer per key, in order; the first failed item is raised.

    Values other callers also hold (``shared``) or that an earlier item of this
    batch received are copied: a caller may mutate what it gets.
    """
    results: list[Any] = []
    handed = set(shared)
    for key in keys:
        value = found[key] if key in found else outcome(key)
        if key in handed and not isinstance(value, BaseException):
            value = copy_for_caller(value)
        results.append(value)
        handed.add(key)
    return _raise_item_errors(results)


def _raise_item_errors(results: list[Any]) -> list[Any]:
    """``results``, unless an item failed: then the first failure is raised."""
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results
