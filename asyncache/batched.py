"""``Batched``: what ``@cached_prediction(batch=True)`` returns, its calls through the engine.

``await f(item)`` goes through the one-key path (its miss joins a micro-batch),
``await f.many(items)`` through the many-keys path; both rebuild what callers
get into the declared item type (``asyncache.rebuild``) and name the function
in a ``ReplayMiss``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from .errors import DecodeError, ReplayMiss
from .rebuild import rebuild_each

if TYPE_CHECKING:
    from .cache import DecisionCache

__all__ = ["Batched", "Batcher"]


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
    ) -> None:
        functools.update_wrapper(self, fn)
        self._rebuild = rebuild
        self.cache = cache
        self.namespace = namespace
        self.batcher = batcher
        self._key_of = key_of
        self._inputs = key
        self._scope = scope

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
            await self.cache.engine.discard_corrupt(key, DecodeError(why))
        return [rebuild(value) for value in await self._values(listed, keys, single)]

    async def _values(self, listed: list[Any], keys: list[bytes], single: bool) -> list[Any]:
        try:
            if single:
                submit, item = self.batcher.submit, listed[0]
                return [await self.cache.get_or_compute(keys[0], lambda: submit(item), item)]
            run_many = self.batcher.run_many

            async def compute(indices: list[int]) -> list[Any]:
                return await run_many([listed[index] for index in indices])

            return await self.cache.get_or_compute_many(keys, compute, listed)
        except ReplayMiss as miss:
            raise miss.named(self.namespace) from None

    async def uncached(self, item: Any, /) -> Any:
        results = await self.batcher.run_many([item])
        if isinstance(results[0], BaseException):
            raise results[0]
        return results[0] if self._rebuild is None else self._rebuild(results[0])

    async def aclose(self) -> None:
        await self.batcher.aclose()
