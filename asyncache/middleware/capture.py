"""The app's ``send`` on a miss: every message goes to the broadcast at once, a copy may be stored.

Nothing is held back: the start message goes out as the app sends it, and
whether the response may be stored (``refusal``) or shared live with waiting
requests (``shareable``) is decided from it and from the body as it passes.

``finish(response, reason)`` runs once: with the whole response when it may
be stored (after the last body message was handed on and the ``admit`` hook
agreed), or with ``None`` and the reason as soon as it may not. A response
whose own lifetime is already spent when it starts (``Age`` past ``max-age``)
is refused as ``stale``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection

from ..engine import Broadcast
from .freshness import freshness
from .response import AdmitResponse, StoredResponse, admitted, refusal, shareable
from .types import Headers, Message, Scope

__all__ = ["Finish", "ResponseCapture", "ResponseFraming", "response_broadcast"]

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


def response_broadcast(keep_limit: int, *, joinable: bool) -> Broadcast:
    """A ``Broadcast`` of one run of the app's response."""
    return Broadcast(keep_limit, ResponseFraming(), joinable=joinable)


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
    """

    __slots__ = (
        "_admit",
        "_broadcast",
        "_finish",
        "_finished",
        "_headers",
        "_keyed",
        "_limit",
        "_scope",
        "_status",
        "_statuses",
        "_storing",
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
    ) -> None:
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

    @property
    def finished(self) -> bool:
        """Whether ``finish`` ran."""
        return self._finished

    async def __call__(self, message: Message) -> None:
        kind = message["type"]
        broadcast = self._broadcast
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
            reason = refusal(message, statuses=self._statuses, keyed=self._keyed, limit=self._limit)
            if reason is None:
                left = freshness(message["headers"], time.time()).left
                if left is not None and not left > 0:
                    reason = "stale"
            broadcast.decide(shared=shareable(reason))
            if reason is None:
                self._storing = True
                self._status = message["status"]
                self._headers = list(message.get("headers", ()))
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

    async def _store(self) -> None:
        self._storing = False
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
