"""``@cached_prediction``: cache an async prediction function by its arguments."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, Literal, ParamSpec, Protocol, TypeVar, overload

from .cache import DecisionCache
from .engine import MISS
from .recent import RecentKeys

if TYPE_CHECKING:
    from .microbatch import BatchedPrediction
    from .offload import Offload

__all__ = ["CachedPrediction", "cached_prediction"]

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class CachedPrediction(Protocol[P, R_co]):
    """What ``@cached_prediction`` returns: the function, cached, with helpers."""

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


def _dict_maker(names: tuple[str, ...], ignored: Iterable[str]) -> Callable[..., dict[str, Any]]:
    """``make(*args)``: the inputs of a call that passed every parameter positionally.

    Generated, as dataclasses and namedtuple generate code, because a dict
    display costs half of ``dict(zip(names, args))`` and this runs on every hit.
    The names come from a signature, so they are identifiers.
    """
    params = ", ".join(f"_{index}" for index in range(len(names)))
    items = ", ".join(f"{name!r}: _{i}" for i, name in enumerate(names) if name not in ignored)
    namespace: dict[str, Any] = {}
    exec(f"def make({params}):\n    return {{{items}}}\n", namespace)
    make: Callable[..., dict[str, Any]] = namespace["make"]
    return make


class _Binder(Generic[P]):
    """Binds a call's arguments to the signature with defaults applied.

    ``inspect.Signature.bind`` costs microseconds; a hit should not. For
    signatures without ``*args``/``**kwargs`` the common calls take a fast
    path; anything unusual (and every error) goes through ``bind`` so the
    messages are Python's own.
    """

    def __init__(self, fn: Callable[..., Any], ignore: Iterable[str]) -> None:
        self.signature = inspect.signature(fn)
        params = list(self.signature.parameters.values())
        ignored = set(ignore)
        unknown = ignored - {p.name for p in params}
        if unknown:
            raise ValueError(f"ignore names no parameter of {fn.__qualname__}: {sorted(unknown)}")
        # A method's receiver identifies no decision; the fingerprint says which model.
        self.method = bool(
            params and params[0].name in ("self", "cls") and params[0].kind in _POSITIONAL
        )
        if self.method:
            ignored.add(params[0].name)
        self.ignored = tuple(ignored)
        self.simple = all(p.kind in _POSITIONAL or p.kind is p.KEYWORD_ONLY for p in params)
        self.positional = tuple(p.name for p in params if p.kind in _POSITIONAL)
        self.keyword = frozenset(
            p.name for p in params if p.kind is not inspect.Parameter.POSITIONAL_ONLY
        )
        self.defaults = {p.name: p.default for p in params if p.default is not p.empty}
        self.count = len(params)
        # The commonest call passes every parameter positionally: ``make(*args)``.
        every_positional = self.simple and len(self.positional) == self.count
        self.make = _dict_maker(self.positional, ignored) if every_positional else None

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        if not kwargs and len(args) == self.count and self.make is not None:
            return self.make(*args)
        if self.simple and len(args) <= len(self.positional):
            inputs = dict(self.defaults)
            inputs.update(zip(self.positional, args, strict=False))
            if kwargs:
                given = self.positional[: len(args)]
                if any(name not in self.keyword or name in given for name in kwargs):
                    return self._slow(args, kwargs)
                inputs.update(kwargs)
            if len(inputs) == self.count:
                for name in self.ignored:
                    del inputs[name]
                return inputs
        return self._slow(args, kwargs)

    def _slow(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        inputs = dict(bound.arguments)
        for name in self.ignored:
            inputs.pop(name, None)
        return inputs


@overload
def cached_prediction(
    cache: DecisionCache,
    *,
    namespace: str | None = ...,
    key: Callable[..., Any] | None = ...,
    scope: Callable[..., Any] | None = ...,
    fingerprint: str | dict[str, Any] | None = ...,
    offload: str | Offload | None = ...,
    batch: Literal[True],
    max_batch_size: int = ...,
    max_wait_ms: float = ...,
    max_concurrent_batches: int | None = ...,
) -> Callable[[Callable[[list[Any]], Any]], BatchedPrediction[Any, Any]]: ...


@overload
def cached_prediction(
    cache: DecisionCache,
    *,
    namespace: str | None = ...,
    ignore: Iterable[str] = ...,
    key: Callable[..., Any] | None = ...,
    scope: Callable[..., Any] | None = ...,
    fingerprint: str | dict[str, Any] | None = ...,
    offload: None = ...,
) -> Callable[[Callable[P, Awaitable[R]]], CachedPrediction[P, R]]: ...


@overload
def cached_prediction(
    cache: DecisionCache,
    *,
    namespace: str | None = ...,
    ignore: Iterable[str] = ...,
    key: Callable[..., Any] | None = ...,
    scope: Callable[..., Any] | None = ...,
    fingerprint: str | dict[str, Any] | None = ...,
    offload: str | Offload,
) -> Callable[[Callable[P, R]], CachedPrediction[P, R]]: ...


def cached_prediction(
    cache: DecisionCache,
    *,
    namespace: str | None = None,
    ignore: Iterable[str] = (),
    key: Callable[..., Any] | None = None,
    scope: Callable[..., Any] | None = None,
    fingerprint: str | dict[str, Any] | None = None,
    offload: str | Offload | None = None,
    batch: bool = False,
    max_batch_size: int = 64,
    max_wait_ms: float = 5.0,
    max_concurrent_batches: int | None = None,
) -> Callable[[Callable[P, Any]], Any]:
    """Cache a prediction function's results by its arguments.

    ``f(1)`` and ``f(x=1)`` share a key: arguments are bound to the signature
    with defaults applied. A first parameter named ``self`` or ``cls`` is left
    out of the key (the fingerprint identifies the model).

    Args:
        cache: the ``DecisionCache`` that holds the decisions.
        namespace: names the function in keys; ``module.qualname`` by default.
            Pin it to keep decisions across a rename.
        ignore: parameters left out of the key (a logger, a request id).
        key: ``key(*args, **kwargs)`` returns what identifies the call, used
            instead of the bound arguments.
        scope: ``scope(*args, **kwargs)`` returns the tenant or principal;
            entries never cross scopes.
        fingerprint: overrides the cache's fingerprint for this function.
        offload: where a sync function runs on a miss: ``"thread"``,
            ``"process"`` or an ``Offload``. Hits never touch it.
        batch: the function takes a list of items and returns one result per
            item; callers ``await f(item)`` and concurrent misses share one
            call (micro-batching), ``await f.many(items)`` answers a list.
            ``key(item)`` and ``scope(item)`` then take one item.
        max_batch_size: with ``batch``, the most items in one call.
        max_wait_ms: with ``batch``, the longest a miss waits for others.
        max_concurrent_batches: with ``batch``, batches running at once;
            the offload's ``max_workers`` by default.

    Raises:
        TypeError: a sync function without ``offload``.
        ValueError: ``ignore`` names a parameter the function does not have.
    """
    if batch:
        if ignore:
            raise ValueError("ignore= does not apply with batch=True: use key=lambda item: ...")
        from .microbatch import batched_prediction

        def decorate_batch(fn: Callable[..., Any]) -> BatchedPrediction[Any, Any]:
            return batched_prediction(
                fn,
                cache,
                namespace=namespace,
                key=key,
                scope=scope,
                fingerprint=fingerprint,
                offload=offload,
                max_batch_size=max_batch_size,
                max_wait_ms=max_wait_ms,
                max_concurrent_batches=max_concurrent_batches,
            )

        return decorate_batch

    def decorate(fn: Callable[P, Any]) -> CachedPrediction[P, Any]:
        is_async = inspect.iscoroutinefunction(fn)
        if not is_async and offload is None:
            raise TypeError(
                f"{fn.__qualname__} is not async: pass offload='thread' (GIL-releasing work such "
                "as onnxruntime or torch), offload='process' (pure-Python work) or an Offload"
            )
        run: Callable[..., Awaitable[Any]]
        if is_async:
            run = fn
        else:
            from .offload import resolve_offload

            pool = resolve_offload(offload)

            async def run(*args: Any, **kwargs: Any) -> Any:
                return await pool.run(fn, *args, **kwargs)

        binder: _Binder[P] = _Binder(fn, ignore)
        name = namespace or f"{fn.__module__}.{fn.__qualname__}"
        builder = cache.key_builder(name, fingerprint)
        get_or_compute = cache.engine.get_or_compute

        def make_key(*args: Any, **kwargs: Any) -> bytes:
            inputs = key(*args, **kwargs) if key is not None else binder.bind(args, kwargs)
            return builder.key(inputs, scope(*args, **kwargs) if scope is not None else None)

        hit_now = cache.engine.hit_now
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
                return await get_or_compute(cache_key, lambda: run(*args, **kwargs), inputs)

        else:

            @functools.wraps(fn)
            async def wrapper(*args: Any, **kwargs: Any) -> Any:
                inputs = key(*args, **kwargs) if key is not None else binder.bind(args, kwargs)
                where = scope(*args, **kwargs) if scope is not None else None
                cache_key = builder.key(inputs, where)
                value = hit_now(cache_key)
                if value is not MISS:
                    return value
                return await get_or_compute(cache_key, lambda: run(*args, **kwargs), inputs)

        async def uncached(*args: Any, **kwargs: Any) -> Any:
            return await run(*args, **kwargs)

        wrapper.cache = cache  # type: ignore[attr-defined]
        wrapper.namespace = name  # type: ignore[attr-defined]
        wrapper.key = make_key  # type: ignore[attr-defined]
        wrapper.uncached = uncached  # type: ignore[attr-defined]
        if binder.method:
            # obj.predict.key(x) must pass obj along, which a plain function's
            # attributes cannot: methods get a descriptor that binds all three.
            return _CachedMethod(wrapper)  # type: ignore[return-value]
        return wrapper  # type: ignore[return-value]

    return decorate


class _BoundPrediction(functools.partial[Any]):
    """A cached method bound to its instance: calls, ``key`` and ``uncached`` pass it on."""

    @property
    def cache(self) -> DecisionCache:
        return self.func.cache  # type: ignore[attr-defined, no-any-return]

    @property
    def namespace(self) -> str:
        return self.func.namespace  # type: ignore[attr-defined, no-any-return]

    def key(self, *args: Any, **kwargs: Any) -> bytes:
        """The 16-byte cache key this call would use."""
        return self.func.key(*self.args, *args, **kwargs)  # type: ignore[attr-defined, no-any-return]

    async def uncached(self, *args: Any, **kwargs: Any) -> Any:
        """Run the method without reading or writing the cache."""
        return await self.func.uncached(*self.args, *args, **kwargs)  # type: ignore[attr-defined]


class _CachedMethod:
    """``@cached_prediction`` on a method: binds like a function, helpers included."""

    def __init__(self, wrapper: Callable[..., Any]) -> None:
        self._wrapper = wrapper
        functools.update_wrapper(self, wrapper)
        self.cache: DecisionCache = wrapper.cache  # type: ignore[attr-defined]
        self.namespace: str = wrapper.namespace  # type: ignore[attr-defined]
        self.key: Callable[..., bytes] = wrapper.key  # type: ignore[attr-defined]
        self.uncached: Callable[..., Awaitable[Any]] = wrapper.uncached  # type: ignore[attr-defined]
        mark = getattr(inspect, "markcoroutinefunction", None)  # Python 3.12+
        if mark is not None:
            mark(self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._wrapper(*args, **kwargs)

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return _BoundPrediction(self._wrapper, instance)
