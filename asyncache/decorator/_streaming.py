"""``@cached_prediction`` on a function that streams its result (an LLM's tokens).

An async generator function, or an async function annotated to return an
``AsyncIterator`` (awaited, it gives the stream), is one decision made of
chunks: the engine's stream door (``asyncache.engine.cached_stream``) replays a
hit, shares a miss live with identical concurrent callers and stores the whole
stream once it ended normally. Here the call is keyed like any other and each
chunk is rebuilt into the element type of the annotation (``AsyncIterator[T]``,
``AsyncGenerator[T, None]``), so a miss, a follower, a hit and a disabled cache
hand out chunks of the same types.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

from ..cache import DecisionCache
from ..engine import Call, Freshness, cached_stream
from ..errors import ReplayMiss
from ..keys import KeyBuilder
from ..tags import DECISION_TAGS, Tagging, tag_source
from ._binding import Binder
from ._returns import Rebuild

__all__ = ["streamed"]


def streamed(
    fn: Callable[..., Any],
    cache: DecisionCache,
    binder: Binder[Any],
    *,
    name: str,
    key: Callable[..., Any] | None,
    scope: Callable[..., Any] | None,
    tags: Callable[..., Any] | None,
    builder: KeyBuilder,
    encode: Callable[[Any], Any] | None,
    rebuild: Rebuild | None,
    awaited: bool,
    pace: bool,
    max_chunks: int,
    freshness: Freshness | None = None,
) -> Callable[..., Any]:
    """The cached form of a streaming ``fn``: it streams as ``fn`` does.

    Args:
        awaited: ``fn`` is an async function returning the stream (the cached one is
            too); otherwise it is an async generator function.
        encode: turns each chunk into what is stored (``encode=``).
        rebuild: turns each chunk, fresh or stored, into the declared chunk type.
        pace: replay hits over the time their stream took to produce.
        max_chunks: past this many chunks a stream is not stored.
        freshness: the function's own freshness settings (the cache's when ``None``).
    """
    engine = cache.engine

    async def run(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        stream = (await fn(*args, **kwargs)) if awaited else fn(*args, **kwargs)
        try:
            async for chunk in stream:
                yield chunk if encode is None else encode(chunk)
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()

    def produce(args: Any, kwargs: Any) -> Callable[[], AsyncIterator[Any]]:
        # A Call: a refresh detaches it from what the caller does with its arguments later.
        return Call(run, args, kwargs)

    async def chunks(
        cache_key: bytes, inputs: Any, args: Any, kwargs: Any, marks: Tagging
    ) -> AsyncGenerator[Any, None]:
        # The stream's flight starts in the context of its first step, so its decision
        # carries the tags set here (``asyncache.tags``).
        token = DECISION_TAGS.set({cache_key: marks})
        try:
            async with aclosing(_chunks(cache_key, inputs, args, kwargs)) as inner:
                async for chunk in inner:
                    yield chunk
        finally:
            with contextlib.suppress(ValueError):  # stepped from another task: its own context
                DECISION_TAGS.reset(token)

    async def _chunks(
        cache_key: bytes, inputs: Any, args: Any, kwargs: Any
    ) -> AsyncGenerator[Any, None]:
        flow = cached_stream(
            engine,
            cache_key,
            produce(args, kwargs),
            inputs,
            rebuild=rebuild,
            pace=pace,
            max_chunks=max_chunks,
            freshness=freshness,
            namespace=name,
        )
        try:
            async with aclosing(flow):
                async for chunk in flow:
                    yield chunk
        except ReplayMiss as miss:
            raise miss.named(name) from None  # the engine knows the key, not the function

    def start(args: Any, kwargs: Any) -> AsyncIterator[Any]:
        # Keyed when called, as a generator's arguments are bound when it is called.
        inputs = key(*args, **kwargs) if key is not None else binder.bind(args, kwargs)
        where = scope(*args, **kwargs) if scope is not None else None
        cache_key = builder.key(inputs, where)
        if where is None and tags is None:
            return _chunks(cache_key, inputs, args, kwargs)
        marks = Tagging(cache.namespace, scope=where, source=tag_source(tags, args, kwargs))
        return chunks(cache_key, inputs, args, kwargs, marks)

    if awaited:

        @functools.wraps(fn)
        async def stream_later(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            return start(args, kwargs)

        return stream_later

    @functools.wraps(fn)
    def stream_now(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        return start(args, kwargs)

    return stream_now
