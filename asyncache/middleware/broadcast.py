"""One run of the app's response, shared live by every identical request.

The app's ``send`` (``ResponseCapture``) appends each message to a
``Broadcast``; every request that shares the run, the one that started it
included, has a ``Reader`` and sends the messages to its own client at its own
pace (``pump``). So a follower's first byte leaves as soon as the leader's
does, and no client waits on another one's socket.

While the response may still be stored (or shared whole, by requests that
join late) every message is kept, up to ``max_entry_bytes`` of body: the app
never waits for a slow client then. Past that (or once the response is known
to be for its own client only), messages are dropped as soon as every reader
sent them, and the app is paced by its slowest reader, as a server paces it by
its one socket; when no reader is left, the app's ``send`` raises ``OSError``,
as a server's does once the client went away.
"""

from __future__ import annotations

from typing import Any

from ..engine import Event, new_event
from .types import Message

__all__ = ["Broadcast", "Reader", "final"]

_PACED = frozenset(
    {
        "http.response.body",
        "http.response.trailers",
        "http.response.zerocopy",
        "http.response.pathsend",
    }
)


def final(message: Message, trailers: bool) -> bool:
    """Whether ``message`` is the last one of a response (``trailers``: its start declared them)."""
    kind = message["type"]
    if kind == "http.response.body" or kind == "http.response.zerocopy":
        return not trailers and not message.get("more_body", False)
    if kind == "http.response.pathsend":
        return not trailers
    if kind == "http.response.trailers":
        return not message.get("more_trailers", False)
    return False


class Reader:
    """One request's place in a ``Broadcast``."""

    __slots__ = ("active", "owner", "position")

    def __init__(self, position: int, *, owner: bool) -> None:
        self.position = position
        """The index of the next message this request sends."""
        self.active = True
        """False once this request stopped reading (done, gone, or released)."""
        self.owner = owner
        """Whether this request's own receive feeds the app."""


class Broadcast:
    """The messages of one run of the app, and what became of it.

    Args:
        keep_limit: the most body bytes kept for requests that join late
            (``max_entry_bytes``).
        table: where identical requests find this run; ``None`` for a run of
            one request's own.
        key: its key in ``table``.
    """

    __slots__ = (
        "_changed",
        "_table",
        "base",
        "complete",
        "decided",
        "ended",
        "error",
        "followed",
        "keep",
        "keep_limit",
        "key",
        "messages",
        "ran",
        "readers",
        "settled",
        "shared",
        "size",
        "source",
        "traceback",
        "trailers",
        "value",
    )

    def __init__(self, keep_limit: int, table: dict[bytes, Broadcast] | None, key: bytes) -> None:
        self.messages: list[Message] = []
        self.base = 0
        """The index of ``messages[0]`` among all the messages of the run."""
        self.size = 0
        self.keep_limit = keep_limit
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
        self.trailers = False
        """The start message declared trailers: they end the response, not the body."""
        self.error: BaseException | None = None
        self.traceback: Any = None
        self.value: Any = None
        """The answer when the app did not run (a hit, or another process's decision)."""
        self.source = ""
        self.settled = new_event()
        """Set once the engine is done with the run (what may be stored is stored)."""
        self._changed: Event = new_event()
        self._table = table
        self.key = key
        if table is not None:
            table[key] = self

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

    def take(self, reader: Reader) -> Message | None:
        """The next message for ``reader``, or ``None`` when it has none yet."""
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

    async def push(self, message: Message, body_bytes: int = 0) -> None:
        """Append one of the app's messages, and return when the app may send the next.

        Alone, the leader's client paces the app, as a server's ``send`` does.
        Once a follower joined, nobody waits while the response is kept; past
        the keep limit, the slowest reader paces the app, one message ahead.

        Raises:
            OSError: no reader is left and nothing is kept: nobody gets what the app sends.
        """
        self.size += body_bytes
        if self.keep and self.size > self.keep_limit:
            self.stop_keeping()
        if message["type"] == "http.response.start":
            self.trailers = bool(message.get("trailers", False))
        self.messages.append(message)
        if final(message, self.trailers):
            self.complete = True
        self._wake()
        # The body and what ends a response are paced: the app's send returns once its
        # client has the message, as a server's does. Its start message (or an
        # extension's) is not, so what it sends next without waiting reaches the client
        # in the same step, as from a bare app (Starlette's TestClient reads the debug
        # extension right after the start arrives).
        paced = message["type"] in _PACED
        while True:
            total = self.base + len(self.messages)
            anyone = False
            lowest = total
            for reader in self.readers:
                if reader.active:
                    anyone = True
                    lowest = min(lowest, reader.position)
            if not anyone:
                if self.keep or self.complete:
                    return
                raise OSError("no client reads the response any more")
            if not paced:
                return
            if self.followed:
                if self.keep or lowest >= total - 1:
                    return
            elif lowest >= total:
                return
            await self._changed.wait()

    def stop_keeping(self) -> None:
        """Keep messages only until every reader sent them; no request may join any more."""
        self.keep = False
        self.unlist()
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
            self.unlist()  # an incomplete run: later requests start afresh
        self.ended = True
        self.decided.set()
        self._wake()

    @property
    def abandoned(self) -> bool:
        """The run ended before its start message and without an error: followers elect anew."""
        return self.ended and not self.ran and self.error is None and self.source == ""

    def unlist(self) -> None:
        """Later identical requests no longer find this run."""
        table = self._table
        if table is not None:
            self._table = None
            if table.get(self.key) is self:
                del table[self.key]
