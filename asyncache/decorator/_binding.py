"""Binding a call's arguments to the signature (the inputs a cached call is keyed by), and methods.

Cached methods: how an instance binds, and what it puts in the key.

A method's receiver is keyed by what identifies its model, never by its
identity alone: ``__cache_fingerprint__`` (an attribute, or a method that
returns it), else ``fingerprint`` (what every adapter in ``asyncache.adapters``
exposes), else the ``fingerprint`` of its ``model`` attribute (a service holding
an adapter). Two instances holding different models then never share a decision,
and two processes holding the same model do. An instance that offers neither
is keyed by a token of its own (its decisions are never shared, not even with
the next process), and its class gets one warning naming the two ways to say
what is meant: ``key=`` or ``ignore=("self",)``.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import os
import warnings
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, ParamSpec

__all__ = ["Binder", "CachedMethod", "MethodWarning", "Receiver", "dict_maker"]

P = ParamSpec("P")

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def dict_maker(
    names: tuple[str, ...], ignored: Iterable[str], receiver: Receiver | None = None
) -> Callable[..., dict[str, Any]]:
    """``make(*args)``: the inputs of a call that passed every parameter positionally.

    Generated, as dataclasses and namedtuple generate code, because a dict
    display costs half of ``dict(zip(names, args))`` and this runs on every hit.
    The names come from a signature, so they are identifiers.
    """
    params = ", ".join(f"_{index}" for index in range(len(names)))
    items = ", ".join(
        f"{name!r}: _receiver(_{i})" if i == 0 and receiver is not None else f"{name!r}: _{i}"
        for i, name in enumerate(names)
        if name not in ignored
    )
    namespace: dict[str, Any] = {"_receiver": receiver}
    exec(f"def make({params}):\n    return {{{items}}}\n", namespace)
    make: Callable[..., dict[str, Any]] = namespace["make"]
    return make


class Binder(Generic[P]):
    """Binds a call's arguments to the signature with defaults applied.

    ``inspect.Signature.bind`` costs microseconds; a hit should not. For
    signatures without ``*args``/``**kwargs`` the common calls take a fast
    path; anything unusual (and every error) goes through ``bind`` so the
    messages are Python's own.
    """

    def __init__(self, fn: Callable[..., Any], ignore: Iterable[str]) -> None:
        # A method's receiver is keyed by its model's fingerprint (asyncache.decorator._binding).
        self.receiver: Receiver | None = None
        self.signature = inspect.signature(fn)
        params = list(self.signature.parameters.values())
        ignored = set(ignore)
        unknown = ignored - {p.name for p in params}
        if unknown:
            raise ValueError(f"ignore names no parameter of {fn.__qualname__}: {sorted(unknown)}")
        self.method = bool(
            params and params[0].name in ("self", "cls") and params[0].kind in _POSITIONAL
        )
        if self.method and params[0].name == "cls":
            ignored.add("cls")  # a class method's class: its fingerprint is the cache's
        elif self.method and "self" not in ignored:
            self.receiver = Receiver(fn.__qualname__)
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
        self.make = (
            dict_maker(self.positional, ignored, self.receiver) if every_positional else None
        )

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
                if self.receiver is not None:
                    inputs["self"] = self.receiver(inputs["self"])
                return inputs
        return self._slow(args, kwargs)

    def _slow(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        inputs = dict(bound.arguments)
        for name in self.ignored:
            inputs.pop(name, None)
        if self.receiver is not None and "self" in inputs:
            inputs["self"] = self.receiver(inputs["self"])
        return inputs


if TYPE_CHECKING:
    from ..cache import DecisionCache


_ABSENT: Any = object()


class MethodWarning(UserWarning):
    """A cached method's instance says nothing about its model: its calls are not shared."""


class Receiver:
    """``receiver(instance)``: what a method's ``self`` contributes to the key.

    Args:
        where: the method's qualified name, for the warning.
    """

    def __init__(self, where: str) -> None:
        self.where = where
        self._warned: set[type] = set()
        self._dunder: dict[type, bool] = {}
        self._tokens: dict[int, str] = {}
        self._salt = os.urandom(8).hex()
        self._count = itertools.count()

    def __call__(self, instance: Any) -> Any:
        kind = type(instance)
        dunder = self._dunder.get(kind)
        if dunder is None:
            # A class says __cache_fingerprint__ in its body; asked once per class, it saves
            # a failing attribute lookup on every call of the classes that do not.
            dunder = self._dunder[kind] = hasattr(kind, "__cache_fingerprint__")
        found = instance.__cache_fingerprint__ if dunder else None
        if found is None:
            found = getattr(instance, "fingerprint", _ABSENT)
        if found is _ABSENT or found is None:
            # A service holding an adapter (self.model = OnnxModel(...)): the model's.
            found = getattr(getattr(instance, "model", None), "fingerprint", _ABSENT)
        if found is not _ABSENT and found is not None:
            return found() if callable(found) else found
        return ["\x00instance", self._token(instance)]

    def _token(self, instance: Any) -> str:
        ident = id(instance)
        token = self._tokens.get(ident)
        if token is not None:
            return token
        kind = type(instance)
        if kind not in self._warned:
            self._warned.add(kind)
            warnings.warn(
                f"{kind.__qualname__} has no fingerprint, so the cached calls of "
                f"{self.where} are keyed by instance and never shared (not across "
                "instances, not across processes). Give it a __cache_fingerprint__ "
                "(or fingerprint) attribute naming its model, pass key= to say what "
                'identifies a call, or ignore=("self",) to share every instance\'s decisions',
                MethodWarning,
                stacklevel=2,
            )
        token = f"{self._salt}:{next(self._count)}"
        try:
            weakref.finalize(instance, self._tokens.pop, ident, None)
        except TypeError:
            pass  # not weak-referenceable: the token lives as long as this process
        self._tokens[ident] = token
        return token


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

    def uncached(self, *args: Any, **kwargs: Any) -> Any:
        """Run the method without reading or writing the cache.

        What the method returns, as it returns it: a coroutine to await, or the stream
        of an async generator method to iterate.
        """
        return self.func.uncached(*self.args, *args, **kwargs)  # type: ignore[attr-defined]


class CachedMethod:
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
