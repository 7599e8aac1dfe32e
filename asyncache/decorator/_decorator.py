"""``@cached_prediction``: cache an async prediction function by its arguments."""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Literal,
    ParamSpec,
    Protocol,
    Self,
    TypeVar,
    overload,
)

from ..cache import DecisionCache
from ..engine import MISS, Call, Freshness, judged_as, overridden
from ..errors import DecodeError, ReplayMiss
from ..keys import KeyBuilder, RecentKeys
from ..stores import entries_of
from ..tags import DECISION_TAGS, Tagging, push_tags, tag_source, tagging
from ._binding import Binder, CachedMethod
from ._returns import Rebuild, caller_names, rebuilder, streams
from ._streaming import streamed

if TYPE_CHECKING:
    from ..offload import Offload
    from ._batching import BatchedPrediction

__all__ = [
    "BoundPrediction",
    "BoundStream",
    "CachedPrediction",
    "CachedStream",
    "Decorator",
    "cached_prediction",
]

P = ParamSpec("P")
P2 = ParamSpec("P2")
R = TypeVar("R")
S = TypeVar("S")
R_co = TypeVar("R_co", covariant=True)


class BoundPrediction(Protocol[P, R_co]):
    """A cached method bound to its instance (``obj.predict``): ``self`` is passed for you."""

    cache: DecisionCache
    namespace: str

    async def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co: ...

    def key(self, *args: P.args, **kwargs: P.kwargs) -> bytes:
        """The 16-byte cache key this call would use."""
        ...

    async def uncached(self, *args: P.args, **kwargs: P.kwargs) -> R_co:
        """Run the method without reading or writing the cache."""
        ...


class CachedPrediction(Protocol[P, R_co]):
    """What ``@cached_prediction`` returns: the function, cached, with helpers.

    On a class it is a method: ``obj.predict`` is a ``BoundPrediction`` without ``self``.
    """

    cache: DecisionCache
    namespace: str
    __wrapped__: Callable[..., Any]

    async def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co: ...

    def key(self, *args: P.args, **kwargs: P.kwargs) -> bytes:
        """The 16-byte cache key this call would use."""
        ...

    async def uncached(self, *args: P.args, **kwargs: P.kwargs) -> R_co:
        """Run the function without reading or writing the cache."""
        ...

    @overload
    def __get__(self, instance: None, owner: type[Any], /) -> Self: ...
    @overload
    def __get__(
        self: CachedPrediction[Concatenate[S, P2], R_co], instance: S, owner: Any = None, /
    ) -> BoundPrediction[P2, R_co]: ...


class BoundStream(Protocol[P, R_co]):
    """A cached streaming method bound to its instance: ``self`` is passed for you."""

    cache: DecisionCache
    namespace: str

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[R_co]: ...

    def key(self, *args: P.args, **kwargs: P.kwargs) -> bytes:
        """The 16-byte cache key this call would use."""
        ...

    def uncached(self, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[R_co]:
        """Stream from the method without reading or writing the cache."""
        ...


class CachedStream(Protocol[P, R_co]):
    """What ``@cached_prediction`` returns for an async generator function: it streams
    the same chunks (a miss live, a hit replayed), with the helpers of a cached function."""

    cache: DecisionCache
    namespace: str
    __wrapped__: Callable[..., Any]

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[R_co]: ...

    def key(self, *args: P.args, **kwargs: P.kwargs) -> bytes:
        """The 16-byte cache key this call would use."""
        ...

    def uncached(self, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[R_co]:
        """Stream from the function without reading or writing the cache."""
        ...

    @overload
    def __get__(self, instance: None, owner: type[Any], /) -> Self: ...
    @overload
    def __get__(
        self: CachedStream[Concatenate[S, P2], R_co], instance: S, owner: Any = None, /
    ) -> BoundStream[P2, R_co]: ...


class Decorator(Protocol):
    """``cached_prediction(cache, ...)``: decorates an async function or an async generator."""

    @overload
    def __call__(self, fn: Callable[P, AsyncIterator[R]], /) -> CachedStream[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, Awaitable[R]], /) -> CachedPrediction[P, R]: ...


@overload
def cached_prediction(
    cache: DecisionCache,
    *,
    namespace: str | None = ...,
    key: Callable[..., Any] | None = ...,
    scope: Callable[..., Any] | None = ...,
    tags: Callable[..., Any] | None = ...,
    fingerprint: str | dict[str, Any] | None = ...,
    offload: str | Offload | None = ...,
    encode: Callable[[Any], Any] | None = ...,
    decode: Callable[[Any], Any] | None = ...,
    batch: Literal[True],
    max_batch_size: int = ...,
    max_wait_ms: float = ...,
    max_concurrent_batches: int | None = ...,
    stale_while_revalidate: float | None = ...,
    stale_if_error: float | None = ...,
    jitter: float | None = ...,
    cache_errors: tuple[type[BaseException], ...] | None = ...,
    error_ttl: float | None = ...,
) -> Callable[[Callable[[list[Any]], Any]], BatchedPrediction[Any, Any]]: ...


@overload
def cached_prediction(
    cache: DecisionCache,
    *,
    namespace: str | None = ...,
    ignore: Iterable[str] = ...,
    key: Callable[..., Any] | None = ...,
    scope: Callable[..., Any] | None = ...,
    tags: Callable[..., Any] | None = ...,
    fingerprint: str | dict[str, Any] | None = ...,
    offload: None = ...,
    encode: Callable[[Any], Any] | None = ...,
    decode: Callable[[Any], Any] | None = ...,
    stale_while_revalidate: float | None = ...,
    stale_if_error: float | None = ...,
    jitter: float | None = ...,
    cache_errors: tuple[type[BaseException], ...] | None = ...,
    error_ttl: float | None = ...,
    pace: bool = ...,
    max_chunks: int = ...,
) -> Decorator: ...


@overload
def cached_prediction(
    cache: DecisionCache,
    *,
    namespace: str | None = ...,
    ignore: Iterable[str] = ...,
    key: Callable[..., Any] | None = ...,
    scope: Callable[..., Any] | None = ...,
    tags: Callable[..., Any] | None = ...,
    fingerprint: str | dict[str, Any] | None = ...,
    offload: str | Offload,
    encode: Callable[[Any], Any] | None = ...,
    decode: Callable[[Any], Any] | None = ...,
    stale_while_revalidate: float | None = ...,
    stale_if_error: float | None = ...,
    jitter: float | None = ...,
    cache_errors: tuple[type[BaseException], ...] | None = ...,
    error_ttl: float | None = ...,
) -> Callable[[Callable[P, R]], CachedPrediction[P, R]]: ...


def cached_prediction(
    cache: DecisionCache,
    *,
    namespace: str | None = None,
    ignore: Iterable[str] = (),
    key: Callable[..., Any] | None = None,
    scope: Callable[..., Any] | None = None,
    tags: Callable[..., Any] | None = None,
    fingerprint: str | dict[str, Any] | None = None,
    offload: str | Offload | None = None,
    encode: Callable[[Any], Any] | None = None,
    decode: Callable[[Any], Any] | None = None,
    batch: bool = False,
    max_batch_size: int = 64,
    max_wait_ms: float = 5.0,
    max_concurrent_batches: int | None = None,
    stale_while_revalidate: float | None = None,
    stale_if_error: float | None = None,
    jitter: float | None = None,
    cache_errors: tuple[type[BaseException], ...] | None = None,
    error_ttl: float | None = None,
    pace: bool = False,
    max_chunks: int = 10_000,
) -> Callable[[Callable[P, Any]], Any]:
    """Cache a prediction function's results by its arguments.

    ``f(1)`` and ``f(x=1)`` share a key: arguments are bound to the signature
    with defaults applied. On a method, ``self`` is keyed by its model's
    fingerprint (``__cache_fingerprint__`` or ``fingerprint``), so two instances
    holding different models never share a decision (see ``asyncache.decorator._binding``);
    a first parameter named ``cls`` is left out of the key.

    An async generator function (or an async function annotated to return an
    ``AsyncIterator``) is cached as one decision made of chunks: a miss streams
    live to its caller and to identical concurrent callers, a hit replays the
    chunks, and the whole stream is stored once it ended normally (see the
    decorator docs, "Streams").

    A result comes back with the type the return annotation declares, on a
    miss, a hit and with the cache disabled alike: dataclasses, NamedTuples,
    tuples, enums, datetimes, UUIDs, pydantic models, NumPy arrays, nested in
    lists and dicts (``asyncache.decorator._returns``).

    Args:
        cache: the ``DecisionCache`` that holds the decisions.
        namespace: names the function in keys; ``module.qualname`` by default.
            Pin it to keep decisions across a rename.
        ignore: parameters left out of the key (a logger, a request id);
            ``ignore=("self",)`` shares decisions across a method's instances.
        key: ``key(*args, **kwargs)`` returns what identifies the call, used
            instead of the bound arguments.
        scope: ``scope(*args, **kwargs)`` returns the tenant or principal;
            entries never cross scopes. A scope's decisions can be forgotten
            together (``cache.forget(scope=...)``).
        tags: ``tags(*args, **kwargs)`` (with ``batch``, ``tags(item)``), sync
            or async, returns the tags (strings) stored with the call's
            decision, so that ``cache.forget(tags=[...])`` drops it. Called
            only when a decision is written.
        fingerprint: overrides the cache's fingerprint for this function.
        offload: where a sync function runs on a miss: ``"thread"``,
            ``"process"`` or an ``Offload``. Hits never touch it.
        encode: ``encode(result)`` turns a result into what is stored (plain
            JSON, NumPy arrays, bytes), for a type asyncache cannot rebuild.
            Needs ``decode``.
        decode: ``decode(stored)`` turns what was stored back into the result;
            used instead of the return annotation, on every call.
        batch: the function takes a list of items and returns one result per
            item; callers ``await f(item)`` and concurrent misses share one
            call (micro-batching), ``await f.many(items)`` answers a list.
            ``key(item)`` and ``scope(item)`` then take one item.
        max_batch_size: with ``batch``, the most items in one call.
        max_wait_ms: with ``batch``, the longest a miss waits for others.
        max_concurrent_batches: with ``batch``, batches running at once;
            the offload's ``max_workers`` by default.
        stale_while_revalidate: this function's own window (the cache's when
            ``None``): seconds after the ttl a stale decision is served while
            one refresh runs.
        stale_if_error: this function's own stale-if-error window.
        jitter: this function's own ttl jitter (a fraction).
        cache_errors: exception types of this function that are remembered.
        error_ttl: seconds this function's cached errors live.
        pace: on a streamed result (an async generator), replay a hit over the
            time the stream took to produce, spread evenly, instead of at once.
        max_chunks: on a streamed result, past this many chunks the stream is
            not stored (its readers still get it all).

    Raises:
        TypeError: a sync function without ``offload``, or a return annotation
            whose stored form cannot be rebuilt (pass ``encode=``/``decode=``).
        ValueError: ``ignore`` names a parameter the function does not have,
            or ``encode`` is given without ``decode``.
    """
    if encode is not None and decode is None:
        raise ValueError("encode= needs decode=, which turns what encode returned back")
    policy = _own_freshness(
        cache,
        stale_while_revalidate=stale_while_revalidate,
        stale_if_error=stale_if_error,
        jitter=jitter,
        cache_errors=cache_errors,
        error_ttl=error_ttl,
    )
    if batch:
        if ignore:
            raise ValueError("ignore= does not apply with batch=True: use key=lambda item: ...")
        from ._batching import batched_prediction

        def decorate_batch(fn: Callable[..., Any]) -> BatchedPrediction[Any, Any]:
            rebuild = decode or rebuilder(fn, item=True, localns=caller_names())
            return batched_prediction(
                fn,
                cache,
                namespace=namespace,
                key=key,
                scope=scope,
                tags=tags,
                fingerprint=fingerprint,
                offload=offload,
                max_batch_size=max_batch_size,
                max_wait_ms=max_wait_ms,
                max_concurrent_batches=max_concurrent_batches,
                encode=encode,
                rebuild=rebuild,
                freshness=policy,
            )

        return decorate_batch

    def decorate(fn: Callable[P, Any]) -> CachedPrediction[P, Any]:
        if streams(fn):
            return _streamed(fn, caller_names())  # type: ignore[no-any-return]
        is_async = inspect.iscoroutinefunction(fn)
        if not is_async and offload is None:
            raise TypeError(
                f"{fn.__qualname__} is not async: pass offload='thread' (GIL-releasing work such "
                "as onnxruntime or torch), offload='process' (pure-Python work) or an Offload"
            )
        rebuild = decode or rebuilder(fn, localns=caller_names())
        run: Callable[..., Awaitable[Any]]
        if is_async:
            run = fn
        else:
            from ..offload import resolve_offload

            pool = resolve_offload(offload)

            async def run(*args: Any, **kwargs: Any) -> Any:
                return await pool.run(fn, *args, **kwargs)

        raw = run
        if encode is not None:

            async def run(*args: Any, **kwargs: Any) -> Any:
                return encode(await raw(*args, **kwargs))

        binder: Binder[P] = Binder(fn, ignore)
        name = namespace or f"{fn.__module__}.{fn.__qualname__}"
        builder = cache.key_builder(name, fingerprint)
        wrapper = _wrap(fn, cache, binder, run, name, key, scope, tags, builder, policy)

        def make_key(*args: Any, **kwargs: Any) -> bytes:
            inputs = key(*args, **kwargs) if key is not None else binder.bind(args, kwargs)
            return builder.key(inputs, scope(*args, **kwargs) if scope is not None else None)

        if rebuild is not None:
            wrapper = _typed(fn, wrapper, rebuild, cache, make_key, name)

        async def uncached(*args: Any, **kwargs: Any) -> Any:
            return await raw(*args, **kwargs)

        wrapper.cache = cache  # type: ignore[attr-defined]
        wrapper.namespace = name  # type: ignore[attr-defined]
        wrapper.key = make_key  # type: ignore[attr-defined]
        wrapper.uncached = uncached  # type: ignore[attr-defined]
        if binder.method:
            # obj.predict.key(x) must pass obj along, which a plain function's
            # attributes cannot: methods get a descriptor that binds all three.
            return CachedMethod(wrapper)  # type: ignore[return-value]
        return wrapper  # type: ignore[return-value]

    def _streamed(fn: Callable[P, Any], localns: Any) -> Any:
        if offload is not None:
            raise TypeError(
                f"{fn.__qualname__} streams its result (an async generator): it runs on the "
                "event loop, so offload= does not apply; offload its steps inside it instead"
            )
        awaited = not inspect.isasyncgenfunction(fn)
        rebuild = decode or rebuilder(fn, chunk=True, localns=localns)
        binder: Binder[P] = Binder(fn, ignore)
        name = namespace or f"{fn.__module__}.{fn.__qualname__}"
        builder = cache.key_builder(name, fingerprint)
        wrapper = streamed(
            fn,
            cache,
            binder,
            name=name,
            key=key,
            scope=scope,
            tags=tags,
            builder=builder,
            encode=encode,
            rebuild=rebuild,
            awaited=awaited,
            pace=pace,
            freshness=policy,
            max_chunks=max_chunks,
        )

        def make_key(*args: Any, **kwargs: Any) -> bytes:
            inputs = key(*args, **kwargs) if key is not None else binder.bind(args, kwargs)
            return builder.key(inputs, scope(*args, **kwargs) if scope is not None else None)

        wrapper.cache = cache  # type: ignore[attr-defined]
        wrapper.namespace = name  # type: ignore[attr-defined]
        wrapper.key = make_key  # type: ignore[attr-defined]
        wrapper.uncached = fn  # type: ignore[attr-defined]
        if binder.method:
            return CachedMethod(wrapper)
        return wrapper

    return decorate


def _wrap(
    fn: Callable[..., Any],
    cache: DecisionCache,
    binder: Binder[Any],
    run: Callable[..., Awaitable[Any]],
    name: str,
    key: Callable[..., Any] | None,
    scope: Callable[..., Any] | None,
    tags: Callable[..., Any] | None,
    builder: KeyBuilder,
    policy: Freshness | None,
) -> Callable[..., Awaitable[Any]]:
    """The cached function: the hit path without another coroutine, the rest in the engine."""
    engine = cache.engine
    get_or_compute = engine.get_or_compute
    hit_now = engine.hit_now

    async def compute(cache_key: bytes, inputs: Any, args: Any, kwargs: Any) -> Any:
        # The function's own freshness settings, for the flight this call may start.
        token = None if policy is None else overridden.set(policy)
        # Its own audit window (asyncache.engine._trust), when the cache keeps them.
        judged = None if engine.trust is None else judged_as.set(name)
        try:
            return await get_or_compute(cache_key, Call(run, args, kwargs), inputs)
        except ReplayMiss as miss:
            raise miss.named(name) from None  # the engine knows the key, not the function
        finally:
            if token is not None:
                overridden.reset(token)
            if judged is not None:
                judged_as.reset(judged)

    if key is None and scope is None:
        make = binder.make if binder.make is not None else dict
        count = binder.count if binder.make is not None else -1
        bind = binder.bind
        key_of = RecentKeys(builder).key  # builder.key, hot inputs' keys remembered

        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            # The commonest call binds with one generated dict display; the rest go
            # through bind.
            if len(args) == count and not kwargs:
                inputs = make(*args)
            else:
                inputs = bind(args, kwargs)
            cache_key = key_of(inputs)
            # A hit in memory is answered here, without another coroutine.
            value = hit_now(cache_key)
            if value is not MISS:
                return value
            if tags is None:
                if policy is None and engine.trust is None:
                    # compute's work without its coroutine: nothing of the function's to set.
                    try:
                        return await get_or_compute(cache_key, Call(run, args, kwargs), inputs)
                    except ReplayMiss as miss:
                        raise miss.named(name) from None
                return await compute(cache_key, inputs, args, kwargs)
            # What this call stores carries its tags (``asyncache.tags``): a hit never asks.
            marks = Tagging(cache.namespace, source=tag_source(tags, args, kwargs))
            token = push_tags({cache_key: marks})
            try:
                return await compute(cache_key, inputs, args, kwargs)
            finally:
                DECISION_TAGS.reset(token)

    else:

        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            inputs = key(*args, **kwargs) if key is not None else binder.bind(args, kwargs)
            where = scope(*args, **kwargs) if scope is not None else None
            cache_key = builder.key(inputs, where)
            value = hit_now(cache_key)
            if value is not MISS:
                return value
            if where is None and tags is None:
                return await compute(cache_key, inputs, args, kwargs)
            # What this call stores counts against its scope's budget in a memory store,
            # and carries its tags and scope (``asyncache.tags``) so that it can be forgotten.
            marks = Tagging(cache.namespace, scope=where, source=tag_source(tags, args, kwargs))
            with entries_of(where), tagging({cache_key: marks}):
                return await compute(cache_key, inputs, args, kwargs)

    return wrapper


def _own_freshness(cache: DecisionCache, **given: Any) -> Freshness | None:
    """A function's freshness settings: the cache's with those it gives, or ``None``.

    Raises:
        ValueError, TypeError: as ``DecisionCache`` for the same settings.
    """
    chosen = {name: value for name, value in given.items() if value is not None}
    if not chosen:
        return None
    policy = Freshness.checked(**{**cache.freshness._asdict(), **chosen})
    engine = cache.engine
    # Its cached errors must read back as themselves wherever the cache meets them.
    engine.more_errors += tuple(t for t in policy.cache_errors if t not in engine.revivable)
    return policy


def _typed(
    fn: Callable[..., Any],
    plain: Callable[..., Awaitable[Any]],
    rebuild: Rebuild,
    cache: DecisionCache,
    make_key: Callable[..., bytes],
    name: str,
) -> Callable[..., Awaitable[Any]]:
    """``plain``, its answers rebuilt into the declared type (only functions that need it).

    A stored decision that no longer fits the type (a field added to the
    dataclass since it was stored) is a corrupt entry: deleted, counted, and
    computed again (in replay, a ``ReplayMiss`` saying so); a fresh result
    that does not fit its annotation raises.
    """

    @functools.wraps(fn)
    async def typed(*args: Any, **kwargs: Any) -> Any:
        value = await plain(*args, **kwargs)
        try:
            return rebuild(value)
        except Exception as exc:
            if not cache.enabled:
                raise  # the function's own result: nothing stored to blame
            stale = DecodeError(f"the stored decision does not fit the return type: {exc!r}")
            try:
                await cache.engine.discard_corrupt(make_key(*args, **kwargs), stale)
            except ReplayMiss as miss:
                raise miss.named(name) from None
        return rebuild(await plain(*args, **kwargs))

    return typed
