"""A stream of one computation, shared live by every caller that asked for it.

A miss that produces its answer piece by piece (the middleware's HTTP
response, a decorated async generator's chunks) appends each piece to a
``Broadcast`` that hangs on the key's flight (``Flight.stream``); every caller
sharing the flight, the one that started it included, holds a ``Reader`` and
takes the pieces at its own pace. So a follower's first piece leaves as soon as
the leader's does, and no caller waits on another one's consumer.

While the result may still be stored (or shared whole, by callers that join
late) every piece is kept, up to ``keep_limit`` bytes. The producer never
waits for a slow reader then. Past that, or once the result is known to be
for its own caller only, pieces are dropped as soon as every reader took them,
and the producer is paced by its slowest reader, as a server paces an app by
its one socket; when no reader is left, ``push`` raises ``OSError``, as a
server's ``send`` does once the client went away. With a ``lag_limit`` (the
middleware's: one client's socket must not hold up the others), a stream that
others follow is paced by its fastest reader instead, and a reader that falls
more than ``lag_limit`` bytes (or ``max_pieces`` pieces) behind it is detached
(``Reader.detached``): the pieces it did not take are not kept for it, and it
gets no more.

What a piece is, which pieces pace the producer and which one ends the stream
is the door's ``Framing``: the middleware's frames ASGI messages, the
decorator's frames chunks.
"""

from __future__ import annotations

from typing import Any, Protocol

from .._runtime import Event, new_event

__all__ = ["MAX_PIECES", "Broadcast", "Framing", "Reader"]

MAX_PIECES = 4096
"""The most pieces kept for callers that join late (and for the store): past it a stream
is shared live but not kept, so memory follows the readers' lag, not the stream's length
(400,000 empty HTTP body messages would otherwise hold over 100 MiB)."""


class Framing(Protocol):
    """What the pieces of one stream are: which pace the producer, which one is the last.

    One per ``Broadcast``: it may remember what it saw (an HTTP start message
    that declares trailers changes which message ends the response).
    """

    def paced(self, piece: Any) -> bool:
        """Whether the producer waits for its readers after ``piece``."""
        ...

    def final(self, piece: Any) -> bool:
        """Whether ``piece`` ends the stream."""
        ...


class Reader:
    """One request's place in a ``Broadcast``."""

    __slots__ = ("active", "detached", "owner", "position")

    def __init__(self, position: int, *, owner: bool) -> None:
        self.position = position
        """The index of the next message this request sends."""
        self.active = True
        """False once this request stopped reading (done, gone, released, or detached)."""
        self.owner = owner
        """Whether this request's own receive feeds the app."""
        self.detached = False
        """It lagged past the broadcast's ``lag_limit``: it gets no more pieces."""


class Broadcast:
    """The messages of one run of the app, and what became of it.

    Args:
        keep_limit: the most bytes kept for callers that join late (``max_entry_bytes``).
        framing: what the pieces are.
        joinable: whether identical callers may join (``False``: a run of one caller's own).
        max_pieces: the most pieces kept, whatever their size.
        lag_limit: once followed and past the keep limit, pace the producer by the
            fastest reader and detach a reader that lags it by more than this many
            bytes; ``None``: pace it by the slowest reader.
    """

    __slots__ = (
        "_changed",
        "base",
        "complete",
        "decided",
        "ended",
        "error",
        "followed",
        "framing",
        "joinable",
        "keep",
        "keep_limit",
        "lag_limit",
        "max_pieces",
        "messages",
        "overflow",
        "ran",
        "readers",
        "settled",
        "shared",
        "size",
        "source",
        "starts",
        "traceback",
        "value",
    )

    def __init__(
        self,
        keep_limit: int,
        framing: Framing,
        *,
        joinable: bool = True,
        max_pieces: int = MAX_PIECES,
        lag_limit: int | None = None,
    ) -> None:
        self.messages: list[Any] = []
        self.starts: list[int] = []
        """The bytes pushed before each of ``messages``: how far behind a reader is
        (kept with a ``lag_limit`` only)."""
        self.lag_limit = lag_limit
        self.base = 0
        """The index of ``messages[0]`` among all the messages of the run."""
        self.size = 0
        self.keep_limit = keep_limit
        self.max_pieces = max_pieces
        self.overflow = ""
        """Why the stream stopped being kept: ``"bytes"``, ``"pieces"``, or ``""``."""
        self.keep = True
        """Every message since the first is kept: a request may still join."""
        self.readers: list[Reader] = []
        self.followed = False
        """A request other than the leader joined the run."""
        self.decided = new_event()
        """Set once followers can tell what to do: share, run alone, raise, take a value."""
        self.shared = False
        """The response may be shared live (set with ``decided``)."""
        self.ran = False
        """The app ran for this broadcast (its owner's client gets its messages)."""
        self.ended = False
        """No message will follow: the app ended (or its answer came without it)."""
        self.complete = False
        """The last message of the response arrived."""
        self.error: BaseException | None = None
        self.traceback: Any = None
        self.value: Any = None
        """The answer when the app did not run (a hit, or another process's decision)."""
        self.source = ""
        self.settled = new_event()
        """Set once the engine is done with the run (what may be stored is stored)."""
        self._changed: Event = new_event()
        self.framing = framing
        self.joinable = joinable
        """Identical callers may still join (every piece since the first is kept)."""

    # -- readers ---------------------------------------------------------------

    def join(self, *, owner: bool = False) -> Reader:
        """A reader from the first message on (only while ``keep``)."""
        reader = Reader(self.base, owner=owner)
        self.readers.append(reader)
        if not owner:
            # From now on the leader's client alone never paces the app (nor delays the store).
            self.followed = True
            self._wake()
        return reader

    def leave(self, reader: Reader) -> None:
        """``reader`` stops reading: the app is no longer paced by it."""
        if reader.active:
            reader.active = False
            self._wake()

    def followers(self) -> bool:
        """Whether a request other than the owner still reads."""
        return any(reader.active and not reader.owner for reader in self.readers)

    def changed(self) -> Event:
        """An event set at the next change (a message, a decision, a reader leaving)."""
        return self._changed

    def _wake(self) -> None:
        event, self._changed = self._changed, new_event()
        event.set()

    def take(self, reader: Reader) -> Any:
        """The next message for ``reader``, or ``None`` when it has none (yet, or any more)."""
        if reader.detached:
            return None
        index = reader.position - self.base
        if index < len(self.messages):
            return self.messages[index]
        return None

    def sent(self, reader: Reader) -> None:
        """``reader`` sent its message: move on, and let a paced app go on."""
        reader.position += 1
        self._trim()
        self._wake()

    # -- the app's side --------------------------------------------------------

    async def push(self, message: Any, size: int = 0) -> None:
        """Append one piece of size ``size`` bytes, and return when the producer may go on.

        Alone, the leader's reader paces the producer, as a server's ``send`` does.
        Once a follower joined, nobody waits while the result is kept; past
        the keep limit, the slowest reader paces the producer, one piece ahead.

        Raises:
            OSError: no reader is left and nothing is kept: nobody gets what is produced.
        """
        self.size += size
        if self.keep:
            if self.size > self.keep_limit:
                self.overflow = "bytes"
                self.stop_keeping()
            elif len(self.messages) >= self.max_pieces:
                self.overflow = "pieces"
                self.stop_keeping()
        framing = self.framing
        if self.lag_limit is not None:
            self.starts.append(self.size - size)
        self.messages.append(message)
        if framing.final(message):
            self.complete = True
        self._wake()
        paced = framing.paced(message)
        while True:
            total = self.base + len(self.messages)
            anyone = False
            lowest = total
            highest = -1
            for reader in self.readers:
                if reader.active:
                    anyone = True
                    lowest = min(lowest, reader.position)
                    highest = max(highest, reader.position)
            if not anyone:
                if self.keep or self.complete:
                    return
                raise OSError("nobody reads the stream any more")
            if not paced:
                return
            if self.followed:
                if self.keep:
                    return
                if self.lag_limit is not None:
                    # Nobody waits on another client's socket: paced by the fastest.
                    if lowest < highest:
                        self._detach_laggards(highest)
                    if highest >= total - 1:
                        return
                elif lowest >= total - 1:
                    return
            elif lowest >= total:
                return
            await self._changed.wait()

    def _detach_laggards(self, highest: int) -> None:
        """Detach the readers more than ``lag_limit`` bytes (or ``max_pieces`` pieces: empty
        ones weigh nothing, yet are kept) behind the one at ``highest``."""
        assert self.lag_limit is not None
        ahead = self._offset(highest)
        detached = False
        for reader in self.readers:
            if reader.active and (
                ahead - self._offset(reader.position) > self.lag_limit
                or highest - reader.position > self.max_pieces
            ):
                reader.active = False
                reader.detached = True
                detached = True
        if detached:
            self._trim()
            self._wake()

    def _offset(self, position: int) -> int:
        """The bytes pushed before the message at ``position`` (all of them past the last)."""
        index = position - self.base
        return self.starts[index] if index < len(self.starts) else self.size

    def stop_keeping(self) -> None:
        """Keep pieces only until every reader took them; no caller may join any more."""
        self.keep = False
        self.joinable = False
        self._trim()

    def _trim(self) -> None:
        if self.keep:
            return
        lowest = min(
            (reader.position for reader in self.readers if reader.active),
            default=self.base + len(self.messages),
        )
        if lowest > self.base:
            del self.messages[: lowest - self.base]
            del self.starts[: lowest - self.base]
            self.base = lowest

    def decide(self, *, shared: bool) -> None:
        """The start message is known: followers share it live or are released."""
        self.ran = True
        self.shared = shared
        if not shared:
            for reader in self.readers:
                if not reader.owner:
                    reader.active = False
            self.stop_keeping()
        self.decided.set()
        self._wake()

    def resolve(self, value: Any, source: str) -> None:
        """The answer came without running the app here (a hit, an adopted decision)."""
        self.value = value
        self.source = source
        self.ended = True
        self.decided.set()
        self._wake()

    def fail(self, error: BaseException) -> None:
        """The app (or the engine) raised: whoever shares the run shares the exception."""
        if self.error is None:
            self.error = error
            self.traceback = error.__traceback__
        self.end()

    def end(self) -> None:
        """No message will follow: the app ended."""
        if not self.complete:
            self.joinable = False  # an incomplete run: later callers start afresh
        self.ended = True
        self.decided.set()
        self._wake()

    @property
    def abandoned(self) -> bool:
        """The run ended before its start message and without an error: followers elect anew."""
        return self.ended and not self.ran and self.error is None and self.source == ""
