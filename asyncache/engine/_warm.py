"""Pre-warming: compute known requests before traffic asks for them.

A backlog, yesterday's traffic or an evaluation set can be computed ahead of
time, for instance on a GPU machine, so that CPU replicas sharing the store
replay the decisions. ``DecisionCache.warm`` runs a ``@cached_prediction``
function over the inputs with bounded concurrency.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Mapping, Sized
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._engine import Engine

__all__ = ["WarmSummary", "call_arguments", "warm"]

logger = logging.getLogger("asyncache")

# Failures kept (as one line each) for the summary: enough to diagnose, bounded for huge inputs.
_KEPT_ERRORS = 10


@dataclass
class WarmSummary:
    """What ``warm`` did so far; handed to the progress callback after each input.

    Attributes:
        computed: inputs the model ran for.
        cached: inputs whose decision was already stored.
        failed: inputs whose computation (or key) raised.
        total: how many inputs there are, when the iterable has a length.
        errors: the first few failures, one line each.
    """

    computed: int = 0
    cached: int = 0
    failed: int = 0
    total: int | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def done(self) -> int:
        """Inputs finished, whatever their outcome."""
        return self.computed + self.cached + self.failed


def call_arguments(item: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call one warm input stands for.

    A mapping is keyword arguments, a tuple or list is positional arguments,
    and anything else is the single positional argument.
    """
    if isinstance(item, Mapping):
        return (), dict(item)
    if isinstance(item, tuple | list):
        return tuple(item), {}
    return (item,), {}


async def _aiter(inputs: Iterable[Any] | AsyncIterable[Any]) -> AsyncIterator[Any]:
    if isinstance(inputs, AsyncIterable):
        async for item in inputs:
            yield item
    else:
        for item in inputs:
            yield item


async def warm(
    engine: Engine,
    function: Any,
    inputs: Iterable[Any] | AsyncIterable[Any],
    *,
    concurrency: int = 8,
    progress: Callable[[WarmSummary], Any] | None = None,
) -> WarmSummary:
    """Compute ``function`` for every input not yet stored; see ``DecisionCache.warm``."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency!r}")
    key_of = getattr(function, "key", None)
    if not callable(key_of) or getattr(function, "cache", None) is None:
        raise TypeError(
            "warm() needs a function decorated with @cached_prediction, "
            f"not {getattr(function, '__qualname__', type(function).__name__)}"
        )
    summary = WarmSummary(total=len(inputs) if isinstance(inputs, Sized) else None)
    items = _aiter(inputs)
    # One iterator shared by the workers: inputs are read as they are needed, never all at once.
    lock = asyncio.Lock()

    async def worker() -> None:
        while True:
            async with lock:
                try:
                    item = await anext(items)
                except StopAsyncIteration:
                    return
            try:
                args, kwargs = call_arguments(item)
                key = key_of(*args, **kwargs)
                if await engine.store_get(key) is not None:
                    summary.cached += 1
                else:
                    await function(*args, **kwargs)
                    summary.computed += 1
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                summary.failed += 1
                if len(summary.errors) < _KEPT_ERRORS:
                    summary.errors.append(f"{item!r:.80}: {type(exc).__name__}: {exc}")
            if progress is not None:
                progress(summary)

    async with asyncio.TaskGroup() as group:
        for _ in range(concurrency):
            group.create_task(worker())
    return summary
