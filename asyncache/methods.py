"""Cached methods: how an instance binds, and what it puts in the key.

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
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cache import DecisionCache

__all__ = ["CachedMethod", "MethodWarning", "Receiver"]

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

    async def uncached(self, *args: Any, **kwargs: Any) -> Any:
        """Run the method without reading or writing the cache."""
        return await self.func.uncached(*self.args, *args, **kwargs)  # type: ignore[attr-defined]


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
