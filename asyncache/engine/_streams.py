"""Streamed decisions: one decision made of chunks, shared live while it is produced.

An async generator under ``@cached_prediction`` is one decision whose value
is the list of its chunks. ``cached_stream`` is the stream door: it hands the
engine's one pipeline (``Engine.get_or_compute`` with ``stream=``) a
``_StreamDoor``, which answers each outcome with a flow of chunks:

- a caller that finds the key's run live reads its ``Broadcast`` from the
  first chunk: the chunks so far at once, then each new one as it is produced;
- a hit replays the stored chunks with their boundaries (at the recorded pace,
  when asked); a stale one is replayed while one refresh collects the whole
  stream again;
- a miss hangs a ``Broadcast`` on the key's flight and runs the generator as
  the flight's computation: each chunk goes to the broadcast, every caller
  sharing the flight (the one that started it included) reads it at its own
  pace, and no caller that stops reading stops the others. When the generator
  ends normally its chunks are the result the engine stores, as any decision
  (ttl and ``admit`` judge the list of chunks, ``max_entry_bytes``, first
  decision wins, leases, audits);
- the other modes run the same computation (shadow compares the whole stream,
  record replaces it, off stores nothing).

A stream that raises hands its error to every reader after the chunks it
had, and stores nothing. When no reader is left before the end, the
generator is stopped (its task cancelled; the generator is closed) and
nothing is stored.

Memory is bounded: every chunk is kept while the stream may still be stored,
up to ``max_entry_bytes`` and ``max_chunks``, and the generator runs at its
own pace. Past either the stream is not stored, nobody may join it, chunks
are dropped once every reader has them, and the generator is paced by its
slowest reader, one chunk ahead (``Broadcast.push``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from contextlib import aclosing, contextmanager
from typing import TYPE_CHECKING, Any

import orjson

from .._runtime import cancelled, is_cancellation, sleep, spawn
from ..errors import DecodeError, ReplayMiss
from ..stores.protocol import Entry
from ._broadcast import Broadcast, Reader
from ._calls import detached
from ._engine import MISS, Unshared
from ._flights import Flight, copy_for_caller, error_for_caller
from ._freshness import Freshness, StaleHit, overridden
from ._leases import LeaseLost, lease_lost
from ._trust import judged_as

if TYPE_CHECKING:
    from ._engine import Engine

__all__ = ["ChunkFraming", "cached_stream", "chunk_bytes"]

Produce = Callable[[], AsyncIterator[Any]]
_IMMUTABLE = frozenset({str, bytes, int, float, bool, type(None)})
# The piece that ends a stream of chunks (a chunk may be anything, None included).
_END: Any = object()
# The tasks that run streams' flights for their leaders (held, so that none is collected).
_RUNNING: set[asyncio.Task[Any]] = set()


class ChunkFraming:
    """The decorator's pieces (``Framing``): chunks, each pacing the generator; the end."""

    __slots__ = ("abort", "broadcast")

    def __init__(self) -> None:
        self.abort: Callable[[], object] | None = None
        """Stops the generator (set while it runs): nobody reads any more."""
        self.broadcast: Broadcast | None = None

    def paced(self, piece: Any) -> bool:
        # While every chunk is kept (bounded by the keep limits) the generator runs at its
        # own pace, so a slow caller neither slows it nor delays the store; past them,
        # its slowest reader paces it.
        broadcast = self.broadcast
        return piece is not _END and broadcast is not None and not broadcast.keep

    def final(self, piece: Any) -> bool:
        return piece is _END


async def cached_stream(
    engine: Engine,
    key: bytes,
    produce: Produce,
    inputs: Any = None,
    *,
    rebuild: Callable[[Any], Any] | None = None,
    pace: bool = False,
    max_chunks: int = 10_000,
    freshness: Freshness | None = None,
    namespace: str | None = None,
) -> AsyncGenerator[Any, None]:
    """The chunks of the decision for ``key``: replayed from the store, or produced live.

    Args:
        engine: the cache's engine.
        key: from a ``KeyBuilder``.
        produce: starts the generator; called at most once per flight.
        inputs: handed to the ``ttl`` and ``admit`` hooks (which judge the list of chunks).
        rebuild: turns each chunk into the type the caller expects; a stored
            stream whose chunks do not fit it is a corrupt entry.
        pace: replay a hit over the time its stream took to produce, evenly.
        max_chunks: past this many chunks a stream is not stored.
        freshness: the function's own freshness settings (the cache's when
            ``None``), for the computation this caller starts or refreshes.
        namespace: the audit window judging its hits (``asyncache.engine._trust``).

    Raises:
        ReplayMiss: ``mode="replay"`` and the store does not hold the stream (before
            the first chunk).
    """
    engine.stats.streams += 1
    door = _StreamDoor(engine, key, produce, rebuild, pace, max_chunks, freshness)
    # The engine takes the steps; this door answers each outcome with a flow of chunks.
    # Both settings hold only while it does (no chunk is yielded meanwhile): a refresh it
    # starts copies them (a run this caller leads starts later, in ``_StreamDoor.lead``).
    judged = None if namespace is None else judged_as.set(namespace)
    try:
        with _own(freshness):
            flow: AsyncGenerator[Any, None] = await engine.get_or_compute(
                key, door.compute, inputs, recompute=door.audit, stream=door
            )
    finally:
        if judged is not None:
            judged_as.reset(judged)
    async with aclosing(flow):
        async for chunk in flow:
            yield chunk


class _StreamDoor:
    """The stream door (``Live``): each outcome of the engine's lookup as a flow of chunks.

    A hit replays the stored chunks with their boundaries (at the recorded pace,
    when asked); a caller that finds the key's run live reads its ``Broadcast``
    from the first chunk; a miss runs the generator into a broadcast of its own,
    as its flight's computation.
    """

    passing = False  # a stream has no pass: every stream may be kept

    def __init__(
        self,
        engine: Engine,
        key: bytes,
        produce: Produce,
        rebuild: Callable[[Any], Any] | None,
        pace: bool,
        max_chunks: int,
        freshness: Freshness | None,
    ) -> None:
        self.engine = engine
        self.key = key
        self.produce = produce
        self.rebuild = rebuild
        self.pace = pace
        self.max_chunks = max_chunks
        self.freshness = freshness
        self.broadcast: Broadcast | None = None

    async def compute(self) -> Any:
        """The generator's run into this caller's broadcast: its chunks, when kept."""
        assert self.broadcast is not None
        return await _generate(self.engine, self.broadcast, self.produce)

    def audit(self) -> Awaitable[Any]:
        """An audit's run: the whole stream, read by nobody."""
        return _collect(self.engine, self.produce, self.max_chunks)()

    def refresh(self) -> Callable[[], Awaitable[Any]]:
        # One run collects the whole stream (bounded as a miss is), from the inputs as
        # they are now (the call has returned), and replaces the stale one.
        return _collect(self.engine, detached(self.produce), self.max_chunks)

    async def answer(self, value: Any, how: str, entry: Entry) -> Any:
        engine = self.engine
        chunks = await _rebuilt(engine, self.key, value, self.rebuild)
        if chunks is None:
            return MISS  # a chunk does not fit: counted as corrupt, dropped
        seconds = engine.seconds_of(self.key, entry) if self.pace else 0.0
        return _replay(engine, chunks, seconds)

    async def follow(self, flight: Flight[Any]) -> Any:
        broadcast: Broadcast = flight.stream
        return self._rebuilding(_read(broadcast, broadcast.join()))

    async def lead(
        self,
        start: Callable[[], Awaitable[Any]],
        *,
        listed: bool,
        stale: StaleHit | None = None,
    ) -> Any:
        return self._rebuilding(self._lead(start, listed))

    async def refuse(self, error: ReplayMiss) -> Any:
        raise error

    async def _lead(
        self, start: Callable[[], Awaitable[Any]], listed: bool
    ) -> AsyncGenerator[Any, None]:
        """Start the stream's computation and read it as its first caller."""
        engine = self.engine
        framing = ChunkFraming()
        # Past max_chunks chunks the stream stops being kept (the piece that ends a stream
        # of exactly max_chunks comes after its decision was taken).
        broadcast = self.broadcast = framing.broadcast = Broadcast(
            engine.max_entry_bytes, framing, joinable=listed, max_pieces=self.max_chunks
        )
        reader = broadcast.join(owner=True)
        # Taken off now, before this caller first awaits: an identical caller that runs
        # next finds the stream on the flight and reads it live. Its tasks store with the
        # function's settings.
        with _own(self.freshness):
            spawn(_run(engine, broadcast, start()), _RUNNING)
        async with aclosing(_read(broadcast, reader)) as chunks:
            async for chunk in chunks:
                yield chunk
        # The first caller's stream ends once what may be stored is stored, as a miss of a
        # plain function returns after its add (its last chunk came as soon as it was made).
        await broadcast.settled.wait()

    async def _rebuilding(self, flow: AsyncGenerator[Any, None]) -> AsyncGenerator[Any, None]:
        """``flow``'s chunks in the caller's type (a stored stream's were rebuilt already)."""
        rebuild = self.rebuild
        async with aclosing(flow):
            async for chunk in flow:
                yield chunk if rebuild is None else rebuild(chunk)


async def _rebuilt(
    engine: Engine, key: bytes, value: Any, rebuild: Callable[[Any], Any] | None
) -> list[Any] | None:
    """A stored decision's chunks, rebuilt into the caller's type; ``None`` (the entry
    counted as corrupt and dropped) when it is not a stream or a chunk does not fit."""
    try:
        if type(value) is not list:
            raise DecodeError("the stored decision is not a stream of chunks")
        if rebuild is not None:
            try:
                value = [rebuild(chunk) for chunk in value]
            except Exception as exc:
                raise DecodeError(f"a stored chunk does not fit the chunk type: {exc!r}") from exc
    except DecodeError as exc:
        await engine.discard_corrupt(key, exc)
        return None
    chunks: list[Any] = value
    return chunks


def _collect(engine: Engine, produce: Produce, max_chunks: int) -> Callable[[], Awaitable[Any]]:
    """A whole run of the stream for no reader (an audit, a refresh): its chunks, copied
    as they are yielded; past ``max_chunks`` or ``max_entry_bytes`` the generator is
    stopped and nothing is stored (``Unshared``), so memory stays bounded as on a miss."""

    async def collect() -> Any:
        chunks: list[Any] = []
        size = 0
        async with aclosing(_bare(produce)) as fresh:
            async for chunk in fresh:
                chunks.append(_kept(chunk))
                size += chunk_bytes(chunk)
                if len(chunks) > max_chunks or size > engine.max_entry_bytes:
                    engine.stats.too_large += 1
                    return Unshared(None)
        return chunks

    return collect


def _kept(chunk: Any) -> Any:
    """What is kept of a yielded chunk: a copy, unless it cannot change (a generator
    may refill one buffer and yield it again)."""
    return chunk if type(chunk) in _IMMUTABLE else copy_for_caller(chunk)


async def _replay(engine: Engine, chunks: list[Any], seconds: float) -> AsyncGenerator[Any, None]:
    engine.stats.stream_chunks += len(chunks)
    step = seconds / len(chunks) if chunks and seconds > 0 else 0.0
    due = time.perf_counter()
    for chunk in chunks:
        if step:
            # Against the schedule, not chunk by chunk: late wake-ups do not add up.
            due += step
            ahead = due - time.perf_counter()
            if ahead > 0:
                await sleep(ahead)
        yield chunk


async def _bare(produce: Produce) -> AsyncGenerator[Any, None]:
    """The generator's chunks, the generator closed on every way out."""
    generator = produce()
    try:
        async for chunk in generator:
            yield chunk
    finally:
        close = getattr(generator, "aclose", None)
        if close is not None:
            await close()


async def _read(broadcast: Broadcast, reader: Reader) -> AsyncGenerator[Any, None]:
    """The chunks of ``broadcast`` for ``reader``, live; its error after the chunks it had."""
    try:
        while True:
            index = reader.position - broadcast.base
            if index < len(broadcast.messages):
                chunk = broadcast.messages[index]
                broadcast.sent(reader)  # a generator paced by its readers may go on
                if chunk is _END:
                    return
                # Each caller gets its own copy of a chunk the others hold too.
                yield chunk if type(chunk) in _IMMUTABLE else copy_for_caller(chunk)
                continue
            if broadcast.ended:
                if broadcast.error is not None:
                    raise error_for_caller(broadcast.error, broadcast.traceback)
                return
            await broadcast.changed().wait()
    finally:
        broadcast.leave(reader)
        if not broadcast.complete and not any(each.active for each in broadcast.readers):
            # Nobody gets what the generator would produce next: stop it, store nothing.
            broadcast.stop_keeping()  # and let nobody join a stream that is stopping
            framing: ChunkFraming = broadcast.framing  # type: ignore[assignment]
            if framing.abort is not None:
                framing.abort()


@contextmanager
def _own(freshness: Freshness | None) -> Iterator[None]:
    """The function's own freshness settings, for the tasks started (synchronously) within.

    A task copies the context it is started in; the caller's own is left as it was.
    """
    if freshness is None:
        yield
        return
    token = overridden.set(freshness)
    try:
        yield
    finally:
        overridden.reset(token)


async def _run(engine: Engine, broadcast: Broadcast, outcome: Awaitable[Any]) -> None:
    """Wait for the stream's decision; hand what came without its generator to its readers."""
    try:
        value = await outcome
        if not broadcast.complete and type(value) is list:
            # The decision came without this generator: another caller's flight, or
            # another process's stream adopted under its lease.
            engine.stats.stream_chunks += len(value)
            for chunk in value:
                await broadcast.push(chunk)
            await broadcast.push(_END)
    except BaseException as exc:
        # Not raised on: whoever reads the stream gets it (this task has no caller).
        broadcast.fail(cancelled("the stream was stopped") if is_cancellation(exc) else exc)
    finally:
        broadcast.end()
        broadcast.settled.set()


async def _generate(engine: Engine, broadcast: Broadcast, produce: Produce) -> Any:
    """Run the generator into ``broadcast``; its chunks are the decision, when kept."""
    framing: ChunkFraming = broadcast.framing  # type: ignore[assignment]
    stats = engine.stats
    first = engine.leases is not None
    async with _Abortable(framing) as stopping:
        async with aclosing(_bare(produce)) as chunks:
            async for chunk in chunks:
                if first:
                    first = False
                    # Under a lease that ran out while the generator ran (a stalled loop),
                    # another process's stream may be stored: before this one hands out
                    # anything, every caller gets that one (docs/leases.md).
                    stored = await lease_lost()
                    if stored is not None:
                        raise LeaseLost(stored)
                stats.stream_chunks += 1
                # Kept as it was yielded: a generator may refill one buffer each time.
                await broadcast.push(_kept(chunk), chunk_bytes(chunk))
    if stopping.stopped:
        raise OSError("nobody reads the stream any more")  # trio: the scope caught it
    kept = broadcast.keep
    decision = list(broadcast.messages) if kept else None
    await broadcast.push(_END)
    if not kept:
        stats.too_large += 1  # its readers got all of it; it was too long to keep
        return Unshared(None)
    return decision


class _Abortable:
    """Lets the last reader that leaves stop the generator: cancels the flight's task
    (asyncio) or a scope around the generator (trio)."""

    def __init__(self, framing: ChunkFraming) -> None:
        self._framing = framing
        self._scope: Any = None
        self.stopped = False

    async def __aenter__(self) -> _Abortable:
        try:
            task = asyncio.current_task()
        except RuntimeError:
            task = None
        if task is not None:
            self._framing.abort = task.cancel
            return self
        import anyio  # here: only a loop other than asyncio's gets this far

        self._scope = anyio.CancelScope()
        self._scope.__enter__()
        self._framing.abort = self._scope.cancel
        return self

    async def __aexit__(self, *exc_info: Any) -> bool:
        self._framing.abort = None
        if self._scope is None:
            return False
        suppressed = bool(self._scope.__exit__(*exc_info))
        self.stopped = self._scope.cancelled_caught
        return suppressed


def chunk_bytes(chunk: Any) -> int:
    """About how many bytes ``chunk`` adds to a stored stream (the in-flight memory bound)."""
    kind = type(chunk)
    if kind is str or kind is bytes:
        return len(chunk)
    nbytes = getattr(chunk, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes  # a NumPy array
    try:
        return len(
            orjson.dumps(
                chunk, default=_plain, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
            )
        )
    except (TypeError, orjson.JSONEncodeError):
        return 64


def _plain(obj: Any) -> Any:
    dump = getattr(obj, "model_dump", None)  # a pydantic model
    if dump is not None:
        return dump(mode="json")
    if isinstance(obj, bytes | bytearray | memoryview):
        return len(obj) * "x"
    return repr(obj)
