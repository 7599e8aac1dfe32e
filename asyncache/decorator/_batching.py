"""Micro-batching: concurrent single-item misses gathered into one forward pass.

``@cached_prediction(cache, batch=True, max_batch_size=64, max_wait_ms=5)``
decorates a function that takes a list of items and returns one result per
item. Each ``await f(item)`` looks its key up first, so a hit never waits for a
batch; only misses are queued, and identical misses share one flight, so an
item is computed once however many callers ask for it. The queue is flushed
into one call when it holds ``max_batch_size`` items or when its oldest item
has waited ``max_wait_ms``; ``await f.many(items)`` answers a whole list with
one ``get_many`` and one computation of its misses.

A result slot that holds an exception instance fails only that item; a
function that raises fails every caller of that batch and no other.

``Batched``: what ``@cached_prediction(batch=True)`` returns, its calls through the engine.

``await f(item)`` goes through the one-key path (its miss joins a micro-batch),
``await f.many(items)`` through the many-keys path; both rebuild what callers
get into the declared item type (``asyncache.rebuild``) and name the function
in a ``ReplayMiss``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from ..engine import Call, Freshness, ItemsCall, failed_together, judged_as, overridden
from ..errors import DecodeError, OffloadError, ReplayMiss
from ..tags import Tagging, tag_source, tagging
from ._returns import rebuild_each

__all__ = ["Batched", "BatchedPrediction", "Batcher", "MicroBatcher", "batched_prediction"]

if TYPE_CHECKING:
    from ..cache import DecisionCache


class Batcher(Protocol):
    """What ``Batched`` needs of its ``MicroBatcher``."""

    async def submit(self, item: Any) -> Any: ...

    async def run_many(self, items: Sequence[Any]) -> list[Any]: ...

    async def aclose(self) -> None: ...


B = TypeVar("B", bound=Batcher)


class Batched(Generic[B]):
    """The callable ``batched_prediction`` returns (it implements ``BatchedPrediction``)."""

    __wrapped__: Callable[..., Any]

    def __init__(
        self,
        fn: Callable[..., Any],
        cache: DecisionCache,
        batcher: B,
        key_of: Callable[[Any, Any], bytes],
        namespace: str,
        key: Callable[[Any], Any] | None,
        scope: Callable[[Any], Any] | None,
        rebuild: Callable[[Any], Any] | None = None,
        freshness: Freshness | None = None,
        tags: Callable[[Any], Any] | None = None,
    ) -> None:
        functools.update_wrapper(self, fn)
        self._rebuild = rebuild
        self._freshness = freshness
        self.cache = cache
        self.namespace = namespace
        self.batcher = batcher
        self._key_of = key_of
        self._inputs = key
        self._scope = scope
        self._tags = tags

    def __repr__(self) -> str:
        return f"<batched prediction {self.namespace} {self.batcher!r}>"

    def key(self, item: Any, /) -> bytes:
        inputs = item if self._inputs is None else self._inputs(item)
        return self._key_of(inputs, None if self._scope is None else self._scope(item))

    async def __call__(self, item: Any, /) -> Any:
        return (await self._answer([item], single=True))[0]

    async def many(self, items: Iterable[Any], /) -> list[Any]:
        return await self._answer(list(items), single=False)

    async def _answer(self, listed: list[Any], *, single: bool) -> list[Any]:
        """A call (micro-batched) or ``many``, answers rebuilt into the declared type.

        Stored decisions that no longer fit the type (a field added since) are
        corrupt: deleted, counted and computed again.
        """
        keys = [self.key(item) for item in listed]
        values = await self._values(listed, keys, single)
        rebuild = self._rebuild
        if rebuild is None:
            return values
        rebuilt, stale = rebuild_each(rebuild, keys, values)
        if not stale:
            return rebuilt
        if not self.cache.enabled:
            raise next(iter(stale.values()))  # the function's own results do not fit
        for key, exc in stale.items():
            why = f"a stored decision does not fit the return type: {exc!r}"
            try:
                await self.cache.engine.discard_corrupt(key, DecodeError(why))
            except ReplayMiss as miss:  # replay deletes nothing: it says what is wrong
                raise miss.named(self.namespace) from None
        return [rebuild(value) for value in await self._values(listed, keys, single)]

    async def _values(self, listed: list[Any], keys: list[bytes], single: bool) -> list[Any]:
        if self._scope is not None or self._tags is not None:
            # What this call stores carries each item's tags and scope (``asyncache.tags``).
            namespace, scope, tags = self.cache.namespace, self._scope, self._tags
            marks = {
                key: Tagging(
                    namespace,
                    scope=None if scope is None else scope(item),
                    source=tag_source(tags, (item,), {}),
                )
                for key, item in zip(keys, listed, strict=True)
            }
            with tagging(marks):
                return await self._untagged(listed, keys, single)
        return await self._untagged(listed, keys, single)

    async def _untagged(self, listed: list[Any], keys: list[bytes], single: bool) -> list[Any]:
        # The function's own freshness settings, for what this call computes and stores.
        token = None if self._freshness is None else overridden.set(self._freshness)
        # Its own audit window (asyncache.engine._trust), when the cache keeps them.
        judged = None if self.cache.engine.trust is None else judged_as.set(self.namespace)
        try:
            if single:
                submit, item = self.batcher.submit, listed[0]
                return [await self.cache.get_or_compute(keys[0], Call(submit, (item,), {}), item)]
            compute = ItemsCall(self.batcher.run_many, listed)
            return await self.cache.get_or_compute_many(keys, compute, listed)
        except ReplayMiss as miss:
            raise miss.named(self.namespace) from None
        finally:
            if token is not None:
                overridden.reset(token)
            if judged is not None:
                judged_as.reset(judged)

    async def uncached(self, item: Any, /) -> Any:
        results = await self.batcher.run_many([item])
        if isinstance(results[0], BaseException):
            raise results[0]
        return results[0] if self._rebuild is None else self._rebuild(results[0])

    async def aclose(self) -> None:
        await self.batcher.aclose()


if TYPE_CHECKING:
    from ..cache import DecisionCache
    from ..offload import Offload


T = TypeVar("T")
R = TypeVar("R")
T_contra = TypeVar("T_contra", contravariant=True)


class MicroBatcher(Generic[T, R]):
    """Gathers items submitted concurrently into calls of one batch function.

    A batch is sent when it holds ``max_batch_size`` items, or when its oldest
    item has waited ``max_wait_ms`` and fewer than ``max_concurrent_batches``
    batches are running. While every slot is busy, items keep gathering, so a
    busy model gets larger batches instead of a queue of small ones.

    Args:
        run_batch: ``await run_batch(items)`` returns one result per item; an
            exception instance in a slot fails only that item.
        max_batch_size: most items in one call.
        max_wait_ms: longest an item waits for others before its batch is sent.
        max_concurrent_batches: batches running at once; ``None`` for no bound.
    """

    def __init__(
        self,
        run_batch: Callable[[list[T]], Awaitable[Sequence[R | BaseException]]],
        *,
        max_batch_size: int = 64,
        max_wait_ms: float = 5.0,
        max_concurrent_batches: int | None = None,
    ) -> None:
        if max_batch_size <= 0:
            raise ValueError("max_batch_size must be positive")
        if max_wait_ms < 0:
            raise ValueError("max_wait_ms must not be negative")
        if max_concurrent_batches is not None and max_concurrent_batches <= 0:
            raise ValueError("max_concurrent_batches must be positive or None")
        self.run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.max_wait = max_wait_ms / 1000.0
        self.max_concurrent_batches = max_concurrent_batches
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: list[tuple[T, asyncio.Future[R]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._due = False  # the oldest pending item has waited max_wait already
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self.batches = 0
        self.items = 0

    def __repr__(self) -> str:
        return (
            f"MicroBatcher(max_batch_size={self.max_batch_size}, "
            f"max_wait_ms={self.max_wait * 1000:g})"
        )

    async def submit(self, item: T) -> R:
        """Queue ``item`` for the next batch and return its result.

        Raises:
            OffloadError: the batcher is closed.
            BaseException: the batch raised, or the item's slot held an exception.
        """
        if self._closed:
            raise OffloadError(f"{self!r} is closed")
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            if self._pending or self._tasks:
                raise RuntimeError("a MicroBatcher serves one event loop at a time")
            self._loop = loop
            self._timer = None
            self._due = False
        future: asyncio.Future[R] = loop.create_future()
        self._pending.append((item, future))
        if len(self._pending) >= self.max_batch_size:
            self._flush()
        elif self._timer is None and not self._due:
            self._timer = loop.call_later(self.max_wait, self._expire)
        return await future

    async def run_many(self, items: Sequence[T]) -> list[R | BaseException]:
        """Run ``items`` now, in calls of at most ``max_batch_size``.

        Chunks run concurrently (the offload decides how many at a time); a
        chunk whose call raised fills its slots with that exception, so the
        other chunks' results are kept.
        """
        size = self.max_batch_size
        chunks = [list(items[start : start + size]) for start in range(0, len(items), size)]
        outcomes = await asyncio.gather(
            *(self.run_batch(chunk) for chunk in chunks), return_exceptions=True
        )
        results: list[R | BaseException] = []
        for chunk, outcome in zip(chunks, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                if isinstance(outcome, asyncio.CancelledError):
                    raise outcome
                if len(chunk) > 1:
                    failed_together(outcome)  # which item raised is unknown: cached for none
                results.extend([outcome] * len(chunk))
            else:
                results.extend(_checked(outcome, len(chunk)))
        self.batches += len(chunks)
        self.items += len(items)
        return results

    def _has_slot(self) -> bool:
        limit = self.max_concurrent_batches
        return limit is None or len(self._tasks) < limit

    def _expire(self) -> None:
        self._timer = None
        self._due = True
        self._flush()

    def _flush(self) -> None:
        """Send full batches, and a partial one when it is due, while slots are free."""
        while self._pending and self._has_slot():
            if len(self._pending) < self.max_batch_size and not self._due:
                break
            batch = self._pending[: self.max_batch_size]
            del self._pending[: self.max_batch_size]
            self._start(batch)
        if not self._pending:
            self._due = False
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _start(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        assert self._loop is not None
        task = self._loop.create_task(self._run(batch))
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        # Items that gathered while every slot was busy go now if they waited long enough.
        self._flush()

    async def _run(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        # A caller that gave up (its future is cancelled) needs no forward pass.
        live = [(item, future) for item, future in batch if not future.done()]
        if not live:
            return
        self.batches += 1
        self.items += len(live)
        try:
            results = _checked(await self.run_batch([item for item, _ in live]), len(live))
        except asyncio.CancelledError:
            for _, future in live:
                future.cancel()
            raise
        except BaseException as exc:
            if len(live) > 1:
                failed_together(exc)  # each caller's cache entry must not keep it
            for _, future in live:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, future), result in zip(live, results, strict=True):
            if future.done():
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)

    async def aclose(self) -> None:
        """Send what is queued now and wait for every running batch."""
        self._closed = True
        self._due = True
        self._flush()
        while self._tasks:
            await asyncio.wait(set(self._tasks))
            self._flush()


def _checked(results: Sequence[Any], count: int) -> list[Any]:
    if isinstance(results, str | bytes) or not isinstance(results, Iterable):
        raise TypeError(
            f"a batched function must return a list with one result per item, "
            f"not {type(results).__name__}"
        )
    checked = list(results)
    if len(checked) != count:
        raise ValueError(f"the batched function returned {len(checked)} results for {count} items")
    return checked


class BatchedPrediction(Protocol[T_contra, R]):
    """What ``@cached_prediction(batch=True)`` returns: one item in, one result out."""

    cache: DecisionCache
    namespace: str
    batcher: MicroBatcher[Any, Any]
    __wrapped__: Callable[..., Any]

    async def __call__(self, item: T_contra, /) -> R: ...

    async def many(self, items: Iterable[T_contra], /) -> list[R]:
        """Answer every item: hits from the store, misses in batches of ``max_batch_size``."""
        ...

    def key(self, item: T_contra, /) -> bytes:
        """The 16-byte cache key of ``item``."""
        ...

    async def uncached(self, item: T_contra, /) -> R:
        """Run the function on ``[item]`` without reading or writing the cache."""
        ...

    async def aclose(self) -> None:
        """Send queued items and wait for running batches."""
        ...


def _check_signature(fn: Callable[..., Any]) -> None:
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return  # builtins without a signature: trust the caller
    positional = [
        p
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    required = [
        p
        for p in parameters[1:]
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if not positional or required:
        raise TypeError(
            f"batch=True needs a function of one list of items, like predict(items) -> list; "
            f"{getattr(fn, '__qualname__', fn)!r} takes ({', '.join(p.name for p in parameters)})"
        )


def batched_prediction(
    fn: Callable[[list[Any]], Any],
    cache: DecisionCache,
    *,
    namespace: str | None = None,
    key: Callable[[Any], Any] | None = None,
    scope: Callable[[Any], Any] | None = None,
    tags: Callable[[Any], Any] | None = None,
    fingerprint: str | dict[str, Any] | None = None,
    offload: str | Offload | None = None,
    max_batch_size: int = 64,
    max_wait_ms: float = 5.0,
    max_concurrent_batches: int | None = None,
    encode: Callable[[Any], Any] | None = None,
    rebuild: Callable[[Any], Any] | None = None,
    freshness: Freshness | None = None,
) -> BatchedPrediction[Any, Any]:
    """Wrap a batch function so single-item callers share forward passes.

    The engine behind ``@cached_prediction(cache, batch=True, ...)``; see there
    for the options. ``key(item)``, ``scope(item)`` and ``tags(item)`` take one item. The ttl
    and admit hooks receive the item as their ``inputs``. ``encode(result)``
    turns each item's result into what is stored; ``rebuild(stored)`` turns
    what a caller gets back into the declared type (``asyncache.decorator._returns``).

    Raises:
        TypeError: ``fn`` does not take one list, or it is sync without ``offload``.
    """
    _check_signature(fn)
    is_async = inspect.iscoroutinefunction(fn)
    run_batch: Callable[[list[Any]], Awaitable[Any]]
    if is_async:
        run_batch = fn  # an async function paces itself: no bound unless asked
    else:
        if offload is None:
            raise TypeError(
                f"{getattr(fn, '__qualname__', fn)} is not async: pass offload='thread' "
                "(onnxruntime, torch), offload='process' (pure Python) or an Offload; the "
                "event loop must never run a forward pass"
            )
        from ..offload import resolve_offload  # only offloaded functions need it

        pool = resolve_offload(offload)

        async def run_batch(items: list[Any]) -> Any:
            return await pool.run(fn, items)

        if max_concurrent_batches is None:
            # One batch per worker: more would only queue inside the pool.
            max_concurrent_batches = getattr(pool, "max_workers", None)
    if encode is not None:
        computes = run_batch

        async def run_batch(items: list[Any]) -> Any:
            return [_encoded(encode, result) for result in await computes(items)]

    batcher: MicroBatcher[Any, Any] = MicroBatcher(
        run_batch,
        max_batch_size=max_batch_size,
        max_wait_ms=max_wait_ms,
        max_concurrent_batches=max_concurrent_batches,
    )
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__  # callable objects too
    name = namespace or f"{fn.__module__}.{qualname}"
    key_of = cache.key_builder(name, fingerprint).key
    return Batched(fn, cache, batcher, key_of, name, key, scope, rebuild, freshness, tags)


def _encoded(encode: Callable[[Any], Any], result: Any) -> Any:
    """One item's result, encoded; an item's error stays that item's error."""
    return result if isinstance(result, BaseException) else encode(result)
