"""The app's ``send`` on a miss: every message goes to the broadcast, a copy may be stored.

Whether the response may be stored (``refusal``) or shared live with waiting
requests (``shareable``) is decided from its start message and from the body
as it passes.

A whole response in one body message (what a buffered, non-streamed response
is) is held until the store has decided (``hold``, on a run the engine
stores): another process may have stored its own answer first, and then that
one, not this run's, is what this run's clients get (``release``), as a
decorator caller whose ``add`` lost gets the stored decision. The start
message waits only for the app's next message: if the app suspends first (a
streamed response, a server-sent event), the start goes out at once, and the
streamed clients keep what they were sent.

A run that may fall back on a stale response (``fallback``: the stored one is
within its stale-if-error window) holds its start message until the status
is known: an answer in ``STALE_IF_ERROR_STATUSES`` waits, unsent, until the
engine decided (``release``): the stale response replaces it (nothing of it
is sent), or, past the window, it goes out as it would have.

``finish(response, reason)`` runs once: with the whole response when it may
be stored (after the last body message was handed on and the ``admit`` hook
agreed), or with ``None`` and the reason as soon as it may not. A response
whose own lifetime is already spent when it starts (``Age`` past ``max-age``)
is refused as ``stale``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from ..engine import Broadcast, new_event, spawn
from ..tags import Tagging, parse_tag_header
from .freshness import freshness
from .response import AdmitResponse, Replay, StoredResponse, admitted, refusal, shareable
from .status import take_header
from .types import Headers, Message, Scope

__all__ = [
    "LAG_LIMIT",
    "STALE_IF_ERROR_STATUSES",
    "Finish",
    "ResponseCapture",
    "ResponseFraming",
    "response_broadcast",
]

STALE_IF_ERROR_STATUSES = frozenset({500, 502, 503, 504})
"""The statuses a stale response answers instead, within its stale-if-error window
(RFC 5861: a 500, 502, 503 or 504 is an error). The app raising is one too."""

Finish = Callable[[StoredResponse | None, str | None], Awaitable[None]]

_SENDFILE = frozenset({"http.response.pathsend", "http.response.zerocopy"})
_PACED = frozenset(
    {
        "http.response.body",
        "http.response.trailers",
        "http.response.zerocopy",
        "http.response.pathsend",
    }
)


class ResponseFraming:
    """An ASGI response as the pieces of a ``Broadcast``: which messages pace the app,
    and which one ends the response (the last body, or the last trailers when its
    start declared trailers)."""

    __slots__ = ("trailers",)

    def __init__(self) -> None:
        self.trailers = False

    def paced(self, message: Message) -> bool:
        # The body and what ends a response are paced: the app's send returns once its
        # client has the message, as a server's does. Its start message (or an
        # extension's) is not, so what it sends next without waiting reaches the client
        # in the same step, as from a bare app (Starlette's TestClient reads the debug
        # extension right after the start arrives).
        return message["type"] in _PACED

    def final(self, message: Message) -> bool:
        kind = message["type"]
        if kind == "http.response.start":
            self.trailers = bool(message.get("trailers", False))
            return False
        if kind == "http.response.body" or kind == "http.response.zerocopy":
            return not self.trailers and not message.get("more_body", False)
        if kind == "http.response.pathsend":
            return not self.trailers
        if kind == "http.response.trailers":
            return not message.get("more_trailers", False)
        return False


# More than a loopback socket's send buffer takes (Linux's tcp_wmem grows to 4 MiB):
# a client that never reads still "takes" that much, which once made a client that
# reads at its own pace look 1 MiB behind and cut it off.
LAG_LIMIT = 8 * 1024 * 1024
"""How many bytes a client may fall behind the fastest client sharing a run (past the
cache's ``max_entry_bytes``, when that is larger) before it is detached: its response
ends there, incomplete, and the app goes on for the others at their pace."""


def response_broadcast(keep_limit: int, *, joinable: bool) -> Broadcast:
    """A ``Broadcast`` of one run of the app's response.

    Nobody waits on another client's socket: once shared and past what is
    kept, it is paced by its fastest client, and a client that lags it by more
    than ``LAG_LIMIT`` (a socket that does not read) is detached.
    """
    return Broadcast(
        keep_limit, ResponseFraming(), joinable=joinable, lag_limit=max(keep_limit, LAG_LIMIT)
    )


class ResponseCapture:
    """Hands the app's messages to a ``Broadcast`` and judges whether the response may be stored.

    Args:
        broadcast: where the messages go.
        scope: the request's scope, for the ``admit`` hook.
        statuses: the statuses that may be stored.
        keyed: the request headers the key holds (what ``Vary`` may name).
        limit: the largest body that may be stored.
        admit: the user's hook, or ``None``.
        finish: called once with the outcome.
        hold: hold a whole response until ``release`` (a run whose answer the
            engine stores, and may find another process's decision instead).
        fallback: a stale response may answer instead of a failure
            (``STALE_IF_ERROR_STATUSES``, or the app raising before its start).
        tag_name: the header the app names the response's tags in (lowercased),
            taken out of the response; ``None`` leaves headers alone.
        marks: what the decision carries (``asyncache.tags``): the header's tags join it.

    Attributes:
        failed: why the run failed while a stale response could replace it:
            its status (``"503"``) or ``"error"`` (the app raised); ``""`` otherwise.
        replaced: the stale response answers instead (``release`` said so).
    """

    __slots__ = (
        "_admit",
        "_broadcast",
        "_failure",
        "_fallback",
        "_finish",
        "_finished",
        "_headers",
        "_held",
        "_hold",
        "_keyed",
        "_limit",
        "_released",
        "_scope",
        "_status",
        "_statuses",
        "_storing",
        "_tag_name",
        "_tagging",
        "_whole",
        "failed",
        "replaced",
    )

    def __init__(
        self,
        broadcast: Broadcast,
        *,
        scope: Scope,
        statuses: Collection[int],
        keyed: Collection[bytes],
        limit: int,
        admit: AdmitResponse | None,
        finish: Finish,
        hold: bool = False,
        fallback: bool = False,
        tag_name: bytes | None = None,
        marks: Tagging | None = None,
    ) -> None:
        self._tag_name = tag_name
        self._tagging = marks
        self._broadcast = broadcast
        self._scope = scope
        self._statuses = statuses
        self._keyed = keyed
        self._limit = limit
        self._admit = admit
        self._finish = finish
        self._storing = False
        self._finished = False
        self._status = 0
        self._headers: Headers = []
        self._hold = hold
        self._held: Message | None = None
        """The start message, until the app's next message tells whether the body is whole."""
        self._whole: list[Message] = []
        """A whole response (start, body) waiting for ``release``."""
        self._released = new_event()
        self._fallback = fallback
        self._failure: Message | None = None
        """A failing answer's start message, unsent until ``release``."""
        self.failed = ""
        self.replaced = False

    @property
    def finished(self) -> bool:
        """Whether ``finish`` ran."""
        return self._finished

    @property
    def holding(self) -> bool:
        """Whether a whole response waits for ``release``."""
        return bool(self._whole) and not self._released.is_set()

    async def __call__(self, message: Message) -> None:
        if self.failed:
            # A failing answer goes on only once the engine decided: the stale response
            # answers instead (what the app sends goes nowhere), or its own start went out.
            await self._released.wait()
            if self.replaced:
                return
        kind = message["type"]
        broadcast = self._broadcast
        if self._held is not None:
            if kind == "http.response.body" and await self._hold_whole(message):
                return
            await self.flush()
        # The run keeps messages of its own: an app may change a message it sent (reuse
        # it for the next chunk), and what is stored and shared must be what it sent.
        if kind == "http.response.body":
            chunk = message.get("body", b"")
            if type(chunk) is not bytes:
                # A memoryview or bytearray the app may reuse for its next chunk: copy it.
                chunk = bytes(chunk)
            message = {**message, "body": chunk}
            size = len(chunk)
            await broadcast.push(message, size)
            if self._storing:
                if not broadcast.keep:
                    await self._refuse(
                        "too_many_chunks" if broadcast.overflow == "pieces" else "too_large"
                    )
                elif not message.get("more_body", False):
                    await self._store()
            return
        message = {**message}
        if kind == "http.response.start":
            message["headers"] = [*message.get("headers", ())]
            if self._tag_name is not None:
                # The app's tags go with the decision, never to a client (stored or not).
                message["headers"], values = take_header(message["headers"], self._tag_name)
                if values and self._tagging is not None:
                    self._tagging.add(tag for value in values for tag in parse_tag_header(value))
            reason = refusal(message, statuses=self._statuses, keyed=self._keyed, limit=self._limit)
            if reason is None:
                left = freshness(message["headers"], time.time()).left
                if left is not None and not left > 0:
                    reason = "stale"
            if self._fallback and message["status"] in STALE_IF_ERROR_STATUSES:
                # Neither sent nor told to followers yet: a stale response may answer.
                self._failure = message
                self.failed = str(message["status"])
                await self._done(None, reason)
                return
            broadcast.decide(shared=shareable(reason))
            if reason is None:
                self._storing = True
                self._status = message["status"]
                self._headers = list(message.get("headers", ()))
                if self._hold and not message.get("trailers", False):
                    # Held only until the app suspends: a streamed start goes out then.
                    self._held = message
                    spawn(self.flush())
                    return
            else:
                await self._done(None, reason)
            await broadcast.push(message)
            return
        if kind in _SENDFILE:
            await self._refuse("pathsend")
        elif kind == "http.response.trailers":
            await self._refuse("trailers")
        # An extension's message (debug, push, ...): handed on in the order the app sent it.
        await broadcast.push(message)

    async def _hold_whole(self, message: Message) -> bool:
        """Hold ``message`` with the start when it ends a response that may be stored.

        The app's ``send`` then returns once ``release`` sent what the store kept.
        """
        chunk = message.get("body", b"")
        if message.get("more_body", False) or len(chunk) > self._broadcast.keep_limit:
            return False
        start, self._held = self._held, None
        assert start is not None
        if type(chunk) is not bytes:
            chunk = bytes(chunk)  # the app may reuse its buffer
        self._whole = [start, {**message, "body": chunk}]
        await self._store(chunk)
        await self._released.wait()
        return True

    async def flush(self) -> None:
        """Send the held start message: the app suspended, sent something else, or ended.

        Never suspends (a start message does not pace the app), so it may run
        while the run is being cancelled.
        """
        start, self._held = self._held, None
        if start is not None and not self._broadcast.ended:
            try:
                await self._broadcast.push(start)
            except OSError:
                pass  # nobody reads any more: the app learns it from its next send

    def fail_over(self) -> bool:
        """The app raised: whether a stale response may still answer (nothing was sent).

        Then ``failed`` says so, and the run waits for ``release`` (``decided``).
        """
        if not self._fallback or (self._broadcast.ran and not self.failed):
            return False
        self.failed = self.failed or "error"
        return True

    async def decided(self) -> None:
        """Return once ``release`` (or ``abandon``) ran."""
        await self._released.wait()

    async def release(self, stored: Any, own: Any) -> None:
        """Send the held response, or the one the store kept instead of it.

        ``stored`` is the engine's answer for this run (the decision that won
        the store's ``add``, or ``None``); ``own`` is this run's stored form.
        Another process's answer replaces the held one; so does nothing else
        (a refusal, a store that failed: this run's answer stands). A failed
        run's answer is the stale response when the engine gave one (``stored``),
        and then the caller sends that (``replaced``); else its own goes out.
        """
        if self.failed:
            await self._release_failure(stored is not None)
            return
        if not self.holding:
            return
        messages = self._whole
        if stored is not None and own is not None and stored != own:
            start, body = Replay.of(stored, head=self._scope.get("method") == "HEAD").messages(())
            messages = [start, body]
        try:
            for message in messages:
                await self._broadcast.push(message, len(message.get("body", b"")))
        except OSError:
            pass  # every client went away; the app's send says nothing of it
        finally:
            self._released.set()

    async def _release_failure(self, replaced: bool) -> None:
        start, self._failure = self._failure, None
        self.replaced = replaced
        try:
            if start is not None and not replaced:
                self._broadcast.decide(shared=False)
                await self._broadcast.push(start)
        except OSError:
            pass  # nobody reads: the app learns it from its next send
        finally:
            self._released.set()

    def abandon(self) -> None:
        """Let the app's ``send`` return without sending what is held (the run was cancelled)."""
        self._released.set()

    async def _store(self, whole: bytes | None = None) -> None:
        self._storing = False
        body = whole
        if body is None:
            body = b"".join(
                message.get("body", b"")
                for message in self._broadcast.messages
                if message["type"] == "http.response.body"
            )
        response = StoredResponse(self._status, self._headers, body)
        if self._admit is not None and not await admitted(self._admit, self._scope, response):
            await self._done(None, "admit")
            return
        await self._done(response, None)

    async def _refuse(self, reason: str) -> None:
        """Stop copying: the response goes on to the clients but will not be stored."""
        if self._storing:
            self._storing = False
            await self._done(None, reason)

    async def _done(self, response: StoredResponse | None, reason: str | None) -> None:
        if not self._finished:
            self._finished = True
            await self._finish(response, reason)
