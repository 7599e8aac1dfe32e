"""The headers that say what the cache did: ``X-Cache`` and RFC 9211 ``Cache-Status``."""

from __future__ import annotations

import re

from .types import FixedHeaders, Message, Send

__all__ = ["StatusHeaders", "TaggedSend"]

_TOKEN = re.compile(r"[A-Za-z*][A-Za-z0-9!#$%&'*+\-.^_`|~:/]*")


class StatusHeaders:
    """Builds (once per outcome and reason) the headers a response gets.

    Args:
        status_header: the header naming the outcome (``X-Cache``); ``None`` for none.
        cache_status: add an RFC 9211 ``Cache-Status`` header; ``True`` names
            this cache ``asyncache``, a string names it so.

    Attributes:
        names: the header names written here, lowercased: never stored, since
            a hit writes fresh ones.
    """

    __slots__ = ("_cache_name", "_memo", "_status_name", "names")

    def __init__(self, status_header: str | None, cache_status: bool | str) -> None:
        self._status_name = status_header.lower().encode("latin-1") if status_header else None
        if cache_status is True:
            cache_status = "asyncache"
        self._cache_name: str | None = None
        if cache_status:
            name = str(cache_status)
            self._cache_name = name if _TOKEN.fullmatch(name) else '"' + name.replace('"', "") + '"'
        self.names = frozenset(
            name for name in (self._status_name, b"cache-status") if name is not None
        )
        self._memo: dict[str, FixedHeaders] = {}

    def for_outcome(self, outcome: str, reason: str | None = None) -> FixedHeaders:
        """The headers of one outcome (``hit``, ``stale``, ``miss``, ``shared``, ``bypass``,
        ``disabled``)."""
        memo = outcome if reason is None else f"{outcome}:{reason}"
        headers = self._memo.get(memo)
        if headers is None:
            built = []
            if self._status_name is not None:
                built.append((self._status_name, outcome.encode()))
            if self._cache_name is not None:
                built.append((b"cache-status", _cache_status(self._cache_name, outcome, reason)))
            headers = self._memo[memo] = tuple(built)
        return headers

    def tagged(self, send: Send, outcome: str, reason: str | None = None) -> Send:
        """``send``, adding the outcome's headers to the start message."""
        extra = self.for_outcome(outcome, reason)
        return TaggedSend(send, extra) if extra else send


class TaggedSend:
    """A ``send`` that adds the cache status headers to the start message."""

    __slots__ = ("_extra", "_send")

    def __init__(self, send: Send, extra: FixedHeaders) -> None:
        self._send = send
        self._extra = extra

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            message = dict(message)
            message["headers"] = [*message.get("headers", ()), *self._extra]
        await self._send(message)


def _cache_status(name: str, outcome: str, reason: str | None) -> bytes:
    """An RFC 9211 ``Cache-Status`` member for one outcome."""
    if outcome == "hit":
        member = f"{name}; hit"
    elif outcome == "stale":
        # A stored response past its freshness, served while it is refreshed (RFC 9211 4.2).
        member = f"{name}; hit; fwd=stale"
    elif outcome == "miss":
        member = f"{name}; fwd=uri-miss"
    elif outcome == "shared":
        member = f"{name}; fwd=uri-miss; collapsed"
    elif outcome == "replay_miss":
        member = f"{name}; fwd=miss; detail=replay"
    elif reason == "no_store":
        member = f"{name}; fwd=request; detail=no-store"
    else:
        member = f"{name}; fwd=bypass; detail={reason or outcome}"
    return member.encode("latin-1")
