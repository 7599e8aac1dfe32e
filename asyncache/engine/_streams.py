"""Streamed decisions: one decision made of chunks, shared live while it is produced.

An async generator under ``@cached_prediction`` is one decision whose value
is its chunks. ``cached_stream`` is the stream door onto the engine's one
path, an async generator itself:

- a hit replays the stored chunks with their boundaries (at the recorded pace
  when asked);
- a miss claims the key's flight in the engine's one flight table and hangs a
  ``ChunkStream`` on it. The generator runs in the flight's own task and
  appends each chunk; every caller sharing the flight, the one that started
  it included, reads the stream through a ``StreamReader`` of its own, so a
  follower that arrives late gets the chunks so far at once and then each new
  one as it comes, and no caller that stops reading stops the others;
- a stream that ended normally is stored whole, as one entry (``prepare``
  and ``add`` as for any decision: ttl, ``admit``, size, first decision
  wins); one that raised hands its error to every reader after the chunks it
  had, and stores nothing; when no reader is left, the generator is closed
  and nothing is stored.

Memory is bounded: every chunk is kept while the stream may still be stored
(up to ``max_entry_bytes`` and ``max_chunks``). Past either, the stream is no
longer stored, no caller may join it (it leaves the flight table: the next
one starts afresh), chunks are dropped once every reader has them, and the
generator is paced by its slowest reader, one chunk ahead.

The stored form is ``{"chunks": [...], "gaps": [...]}``: the chunks and the
seconds before each, for a replay at the recorded pace. Audits and shadow
mode compare the chunks only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

import orjson

from ..errors import DecodeError
from ..stores.protocol import Entry
from ._flights import Flight, copy_for_caller, error_for_caller
from ._runtime import Event, cancelled, is_cancellation, new_event

if TYPE_CHECKING:
    from ._engine import Engine

__all__ = ["ChunkStream", "StreamReader", "cached_stream", "chunk_bytes", "stored_chunks"]

Produce = Callable[[], AsyncIterator[Any]]
_IMMUTABLE = frozenset({str, bytes, int, float, bool, type(None)})


class StreamReader:
    """One caller's place in a ``ChunkStream``."""

    __slots__ = ("active", "position")

    def __init__(self, position: int) -> None:
        self.position = position
        """The index of the next chunk this caller gets."""
        self.active = True
        """False once this caller stopped reading (done, gone or cancelled)."""


class ChunkStream:
    """The chunks of one computation in flight, and what became of it.

    Args:
        keep_bytes: the most bytes of chunks kept (``max_entry_bytes``).
        keep_chunks: the most chunks kept.
        unlist: called once no caller may join any more (the flight leaves the table).
    """

    __slots__ = (
        "_changed",
        "_unlist",
        "abort",
        "base",
        "chunks",
        "complete",
        "ended",
        "error",
        "gaps",
        "keep",
        "keep_bytes",
        "keep_chunks",
        "readers",
        "size",
        "traceback",
    )

    def __init__(self, keep_bytes: int, keep_chunks: int, unlist: Callable[[], None]) -> None:
        self.chunks: list[Any] = []
        self.gaps: list[float] = []
        self.base = 0
        """The index of ``chunks[0]`` among all the chunks of the stream."""
        self.size = 0
        self.keep_bytes = keep_bytes
        self.keep_chunks = keep_chunks
        self.keep = True
        """Every chunk since the first is kept: the stream may be stored, and callers may join."""
        self.readers: list[StreamReader] = []
        self.complete = False
        """The generator ended normally: no chunk will follow (the stream may be being stored)."""
        self.ended = False
        """Nothing more will happen: complete and stored, failed, or stopped."""
        self.error: BaseException | None = None
        self.traceback: Any = None
        self._changed: Event = new_event()
        self._unlist = unlist
        self.abort: Callable[[], object] | None = None
        """Stops the generator's task (set while it runs)."""

    # -- readers -------------------------------------------------------------

    def join(self) -> StreamReader:
        """A reader from the first chunk on (only while ``keep``)."""
        reader = StreamReader(self.base)
        self.readers.append(reader)
        return reader

    def leave(self, reader: StreamReader) -> None:
        """``reader`` stops reading; when it was the last one, the generator is stopped."""
        if not reader.active:
            return
        reader.active = False
        self._trim()
        self._wake()
        if not self.complete and not self.ended and not any(r.active for r in self.readers):
            # Nobody gets what the generator would produce next: stop it, store nothing.
            self.stop_keeping()
            if self.abort is not None:
                self.abort()

    async def read(self, reader: StreamReader, *, copy: bool) -> AsyncGenerator[Any, None]:
        """The chunks for ``reader``, live; the stream's error after the chunks it had.

        Args:
            copy: hand out copies of mutable chunks (another caller holds the same ones).
        """
        try:
            while True:
                index = reader.position - self.base
                if index < len(self.chunks):
                    chunk = self.chunks[index]
                    reader.position += 1
                    if not self.keep:
                        self._trim()
                        self._wake()  # a generator paced by its readers may go on
                    if copy and type(chunk) not in _IMMUTABLE:
                        chunk = copy_for_caller(chunk)
                    yield chunk
                    continue
                if self.complete:
                    return  # the caller need not wait for the stream to be stored
                if self.ended:
                    if self.error is not None:
                        raise error_for_caller(self.error, self.traceback)
                    return
                await self._changed.wait()
        finally:
            self.leave(reader)

    def _wake(self) -> None:
        event, self._changed = self._changed, new_event()
        event.set()

    # -- the generator's side -------------------------------------------------

    async def push(self, chunk: Any, gap: float) -> None:
        """Append one chunk; return when the generator may produce the next.

        While the stream is kept nobody waits: the generator runs at its own
        pace. Past the keep limits it is paced by its slowest reader, one chunk ahead.
        """
        if self.keep:
            self.size += chunk_bytes(chunk)
            if self.size > self.keep_bytes or len(self.chunks) >= self.keep_chunks:
                self.stop_keeping()
        self.chunks.append(chunk)
        self.gaps.append(gap)
        self._wake()
        while not self.keep:
            total = self.base + len(self.chunks)
            lowest = min((r.position for r in self.readers if r.active), default=total)
            if lowest >= total - 1:
                return
            await self._changed.wait()

    def stop_keeping(self) -> None:
        """Keep chunks only until every reader has them; nobody may join any more."""
        if self.keep:
            self.keep = False
            self._unlist()
            self._trim()

    def _trim(self) -> None:
        if self.keep:
            return
        lowest = min(
            (reader.position for reader in self.readers if reader.active),
            default=self.base + len(self.chunks),
        )
        if lowest > self.base:
            del self.chunks[: lowest - self.base]
            del self.gaps[: lowest - self.base]
            self.base = lowest

    def finish(self) -> None:
        """The generator ended normally: readers end after the chunks they have not had."""
        self.complete = True
        self._wake()

    def fail(self, error: BaseException) -> None:
        """The generator (or the engine) raised: every reader gets it after its chunks."""
        if self.error is None:
            self.error = error
            self.traceback = error.__traceback__
        self.end()

    def end(self) -> None:
        """No chunk will follow."""
        self.ended = True
        self._wake()


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
                chunk,
                default=_plain,
                option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS,
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


def stored_chunks(value: Any) -> tuple[list[Any], list[float]]:
    """The chunks and gaps of a stored stream.

    Raises:
        DecodeError: the stored decision is not a stream (the function was not one when
            it was stored): a corrupt entry for this door.
    """
    if type(value) is dict:
        chunks, gaps = value.get("chunks"), value.get("gaps")
        if type(chunks) is list and type(gaps) is list and len(chunks) == len(gaps):
            return chunks, gaps
    raise DecodeError("the stored decision is not a stream of chunks")


async def cached_stream(
    engine: Engine,
    key: bytes,
    produce: Produce,
    inputs: Any = None,
    *,
    rebuild: Callable[[Any], Any] | None = None,
    pace: bool = False,
    max_chunks: int = 10_000,
) -> AsyncGenerator[Any, None]:
    """The chunks of the decision for ``key``: replayed from the store, or produced live.

    Args:
        engine: the cache's engine.
        key: from a ``KeyBuilder``.
        produce: starts the generator; called at most once per flight.
        inputs: handed to the ``ttl`` and ``admit`` hooks (which judge the list of chunks).
        rebuild: turns each chunk into the type the caller expects; a stored
            stream whose chunks do not fit it is a corrupt entry.
        pace: replay a hit at the pace it was recorded.
        max_chunks: past this many chunks a stream is not stored.

    Raises:
        ReplayMiss: ``mode="replay"`` and the store does not hold the stream (before
            the first chunk).
    """
    stats = engine.stats
    stats.streams += 1
    mode = engine.mode
    flow: AsyncGenerator[Any, None]
    if mode == "off":
        stats.bypassed += 1
        flow = _alone(engine, produce)
    elif mode == "shadow" or mode == "record":
        flow = _unserved(engine, mode, key, produce, inputs, max_chunks)
    else:
        stored = await _lookup(engine, key, produce, inputs, rebuild)
        if stored is not None:
            # Rebuilt already: a chunk that does not fit made the entry a miss.
            async with aclosing(_replay(engine, stored, pace)) as replay:
                async for chunk in replay:
                    yield chunk
            return
        stats.misses += 1
        if mode == "replay":
            from ._engine import replay_miss

            raise replay_miss(key, inputs)
        flight = engine.flights.get(key) if engine.coalesce else None
        stream = None if flight is None else flight.stream
        if isinstance(stream, ChunkStream) and stream.keep:
            assert flight is not None
            stats.coalesced += 1
            flight.followers += 1
        else:
            stream = _launch(engine, key, produce, inputs, max_chunks)
        flow = stream.read(stream.join(), copy=True)
    async with aclosing(flow):
        async for chunk in flow:
            yield chunk if rebuild is None else rebuild(chunk)


async def _lookup(
    engine: Engine,
    key: bytes,
    produce: Produce,
    inputs: Any,
    rebuild: Callable[[Any], Any] | None,
) -> tuple[list[Any], list[float]] | None:
    """The stored stream under ``key`` (counted as a hit, maybe audited), or ``None``."""
    entry = await engine.entry(key)
    if entry is None:
        return None

    def made(value: Any) -> tuple[list[Any], list[float]]:
        chunks, gaps = stored_chunks(value)
        if rebuild is not None:
            try:
                chunks = [rebuild(chunk) for chunk in chunks]
            except Exception as exc:
                raise DecodeError(f"a stored chunk does not fit the chunk type: {exc!r}") from exc
        return chunks, gaps

    try:
        chunks, gaps = engine.hit(key, entry, made)
    except DecodeError as exc:
        await engine.discard_corrupt(key, exc)
        return None
    if engine.sampler is not None:

        async def recompute() -> Any:
            # The chunks are the decision: the fresh run is compared with the stored gaps.
            async with aclosing(_bare(produce)) as fresh:
                return {"chunks": [chunk async for chunk in fresh], "gaps": gaps}

        engine.sampler.sample(key, entry.value, recompute, inputs)
    return chunks, gaps


async def _replay(
    engine: Engine, stored: tuple[list[Any], list[float]], pace: bool
) -> AsyncGenerator[Any, None]:
    chunks, gaps = stored
    engine.stats.stream_chunks += len(chunks)
    due = time.perf_counter()
    for chunk, gap in zip(chunks, gaps, strict=True):
        if pace:
            # Against the recorded schedule, not gap by gap: late wake-ups do not add up.
            due += gap
            ahead = due - time.perf_counter()
            if ahead > 0:
                await _sleep(ahead)
        yield chunk


async def _sleep(seconds: float) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # trio
        import trio

        await trio.sleep(seconds)
        return
    await asyncio.sleep(seconds)


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


async def _alone(engine: Engine, produce: Produce) -> AsyncGenerator[Any, None]:
    """A stream for its caller only (a disabled cache), counted."""
    async with aclosing(_bare(produce)) as chunks:
        async for chunk in chunks:
            engine.stats.stream_chunks += 1
            yield chunk


def _launch(
    engine: Engine, key: bytes, produce: Produce, inputs: Any, max_chunks: int
) -> ChunkStream:
    """Claim ``key``'s flight with a stream on it and start the generator in its task."""
    flights = engine.flights
    listed = engine.coalesce and flights.get(key) is None
    flight: Flight[Any] = flights.claim(key) if listed else Flight()

    def unlist() -> None:
        flights.release(key, flight)

    stream = flight.stream = ChunkStream(engine.max_entry_bytes, max_chunks, unlist)
    work = _fly(engine, key, flight, stream, produce, inputs)
    flights.launch(flight, work)
    return stream


async def _fly(
    engine: Engine,
    key: bytes,
    flight: Flight[Any],
    stream: ChunkStream,
    produce: Produce,
    inputs: Any,
) -> None:
    # The flight's task: like Engine._fly, every way out ends the stream and the flight.
    observer = engine.observer
    token = None if observer is None else observer.start()
    outcome = "cancelled"
    try:
        async with _Abortable(stream):
            if engine.leases is None:
                await _produce(engine, key, stream, produce, inputs)
            else:

                def adopt(entry: Entry) -> None:
                    # Another process stored the stream while we waited on its lease.
                    chunks, gaps = stored_chunks(engine.adopt(key, entry))
                    stream.chunks.extend(chunks)
                    stream.gaps.extend(gaps)
                    engine.stats.stream_chunks += len(chunks)
                    stream.finish()

                await engine.leases.run(
                    key, lambda: _produce(engine, key, stream, produce, inputs), adopt
                )
    except BaseException as exc:
        if is_cancellation(exc):
            error = cancelled("the stream was cancelled")
            stream.fail(error)
            flight.set_error(error)
            raise
        outcome = "error"
        stream.fail(exc)
        flight.set_error(exc)
    else:
        outcome = "computed"
        stream.end()
        flight.set_result(None)
    finally:
        engine.flights.landed(key, flight)
        if not stream.ended:  # cancelled by the loop before it ran
            stream.fail(cancelled("the stream was cancelled"))
        if observer is not None:
            observer.end(token, outcome, flight.followers, flight.error)


class _Abortable:
    """Lets the stream stop the generator when no reader is left (cancels this task)."""

    def __init__(self, stream: ChunkStream) -> None:
        self._stream = stream
        self._scope: Any = None

    async def __aenter__(self) -> None:
        try:
            task = asyncio.current_task()
        except RuntimeError:
            task = None
        if task is not None:
            self._stream.abort = task.cancel
            return
        import trio

        self._scope = trio.CancelScope()
        self._scope.__enter__()
        self._stream.abort = self._scope.cancel

    async def __aexit__(self, *exc_info: Any) -> bool:
        self._stream.abort = None
        if self._scope is not None:
            return bool(self._scope.__exit__(*exc_info))
        return False


async def _produce(
    engine: Engine, key: bytes, stream: ChunkStream, produce: Produce, inputs: Any
) -> None:
    """Run the generator into ``stream``; store the whole stream when it ended normally."""
    started = last = time.perf_counter()
    stats = engine.stats
    async with aclosing(_bare(produce)) as chunks:
        async for chunk in chunks:
            now = time.perf_counter()
            stats.stream_chunks += 1
            await stream.push(chunk, now - last)
            last = time.perf_counter()
    seconds = time.perf_counter() - started
    stream.finish()
    if engine.on_compute is not None:
        engine.on_compute(seconds)
    if not stream.keep:
        if any(reader.active for reader in stream.readers):
            stats.too_large += 1  # the readers got it all; it was too long to keep
        return
    await keep(engine, key, stream.chunks, stream.gaps, inputs, seconds, replace=False)


async def keep(
    engine: Engine,
    key: bytes,
    chunks: list[Any],
    gaps: list[float],
    inputs: Any,
    seconds: float,
    *,
    replace: bool,
) -> None:
    """Store a whole stream as one decision (``replace``: in place of what ``key`` held)."""
    value = {"chunks": chunks, "gaps": [round(gap, 6) for gap in gaps]}
    prepared = engine.prepare(key, value, inputs, seconds, judged=chunks)
    if prepared is None:
        return
    encoded, expires_at = prepared
    if replace:
        await engine.delete_entry(key)
    store = engine.store
    entry = await engine.guard.call("add", lambda: store.add(key, encoded, expires_at))
    if entry is None:
        return
    if entry.value == encoded:
        engine.stats.stores += 1
    else:
        engine.stats.conflicts += 1


async def _unserved(
    engine: Engine, mode: str, key: bytes, produce: Produce, inputs: Any, max_chunks: int
) -> AsyncGenerator[Any, None]:
    """``shadow`` and ``record``: the generator runs for this caller; the whole stream is
    compared with the stored one (shadow) or stored in its place (record)."""
    stored = None
    if mode == "shadow":
        entry = await engine.store_get(key)
        if entry is not None:
            try:
                stored = engine.decode(key, entry.value)
                stored_chunks(stored.value)
            except DecodeError as exc:
                stored = None
                await engine.discard_corrupt(key, exc)
    chunks: list[Any] = []
    gaps: list[float] = []
    size = 0
    too_long = False
    started = last = time.perf_counter()
    async with aclosing(_alone(engine, produce)) as produced:
        async for chunk in produced:
            now = time.perf_counter()
            if not too_long:
                size += chunk_bytes(chunk)
                too_long = size > engine.max_entry_bytes or len(chunks) >= max_chunks
                chunks.append(chunk)
                gaps.append(now - last)
            yield chunk
            last = time.perf_counter()
    seconds = time.perf_counter() - started
    if too_long:
        engine.stats.too_large += 1
        return
    if mode == "record":
        await keep(engine, key, chunks, gaps, inputs, seconds, replace=True)
        return
    auditor = engine.auditor
    assert auditor is not None  # made with mode="shadow"
    fresh = {"chunks": chunks, "gaps": stored.value["gaps"] if stored is not None else gaps}
    auditor.judge_shadow(key, inputs, stored, fresh)
    if stored is None:
        await keep(engine, key, chunks, gaps, inputs, seconds, replace=False)
