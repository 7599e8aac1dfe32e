"""The headers that say what the cache did: ``X-Cache``, RFC 9211 ``Cache-Status``, and
W3C ``Server-Timing`` (how long the middleware took to start the response)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from time import perf_counter_ns
from typing import Any

from .types import FixedHeaders, Message, Send

__all__ = [
    "TIMINGS_MADE",
    "StatusHeaders",
    "TaggedSend",
    "TimedSend",
    "hit_timings",
    "made_timing",
    "take_header",
    "timing_header",
]

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
        ages: whether hits say their ``Age`` (RFC 9111 5.1): not when no
            outcome is named (``status_header=None`` without ``cache_status``),
            since a hit's age says when someone else asked.
    """

    __slots__ = ("_cache_name", "_memo", "_status_name", "ages", "names", "tag_name")

    @property
    def status_name(self) -> bytes | None:
        """The status header's name, lowercased; ``None`` when there is none."""
        return self._status_name

    def __init__(
        self, status_header: str | None, cache_status: bool | str, tag_header: str | None = None
    ) -> None:
        self.tag_name = tag_header.lower().encode("latin-1") if tag_header else None
        """The header the app names a response's tags in (``Cache-Tag``), lowercased:
        taken out of every answer of a cached route, stored or not."""
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
        self.ages = self._status_name is not None or self._cache_name is not None

    def for_outcome(self, outcome: str, reason: str | None = None) -> FixedHeaders:
        """The headers of one outcome (``hit``, ``stale``, ``miss``, ``shared``, ``bypass``,
        ``disabled``); a ``stale`` one with a ``reason`` answered a failed run (stale-if-error):
        the app's status, or ``error``."""
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
        return TaggedSend(send, extra, self.tag_name) if extra or self.tag_name else send


class TaggedSend:
    """A ``send`` that adds the cache status headers to the start message."""

    __slots__ = ("_extra", "_send", "_strip")

    def __init__(self, send: Send, extra: FixedHeaders, strip: bytes | None = None) -> None:
        self._send = send
        self._extra = extra
        self._strip = strip

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            message = dict(message)
            headers = message.get("headers", ())
            if self._strip is not None:
                headers, _ = take_header(headers, self._strip)
            message["headers"] = [*headers, *self._extra]
        await self._send(message)


def take_header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> tuple[list[Any], list[str]]:
    """``headers`` without the ones named ``name`` (lowercase), and those headers' values."""
    kept: list[Any] = []
    taken: list[str] = []
    for header in headers:
        if header[0].lower() == name:
            taken.append(bytes(header[1]).decode("latin-1"))
        else:
            kept.append(header)
    return kept, taken


def _cache_status(name: str, outcome: str, reason: str | None) -> bytes:
    """An RFC 9211 ``Cache-Status`` member for one outcome."""
    if outcome == "hit":
        member = f"{name}; hit"
    elif outcome == "stale":
        if reason is None:
            # A stored response past its freshness, served while it is refreshed (RFC 9211 4.2).
            member = f"{name}; hit; fwd=stale"
        else:
            # Served in place of a failed run (stale-if-error): ``reason`` is the status the
            # app answered, or ``error`` when it raised (then there is no fwd-status).
            status = f"; fwd-status={reason}" if reason.isdigit() else ""
            member = f"{name}; fwd=stale{status}; detail=stale-if-error"
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


# A hit's durations under this many microseconds (every hit in memory) have their
# headers made once each: formatting a float costs a hit more than finding its answer.
TIMINGS_MADE = 1000
_made: dict[bytes | None, list[tuple[bytes, bytes] | None]] = {
    b"hit": [None] * TIMINGS_MADE,
    None: [None] * TIMINGS_MADE,  # a hit where no outcome is named
}


def hit_timings(outcome: bytes | None) -> list[tuple[bytes, bytes] | None]:
    """The ``Server-Timing`` headers of a hit naming ``outcome`` (``b"hit"`` or ``None``), by
    whole microseconds under ``TIMINGS_MADE``: each made by ``made_timing`` on first use."""
    return _made[outcome]


def made_timing(outcome: bytes | None, us: int) -> tuple[bytes, bytes]:
    """A ``Server-Timing`` header for ``us`` microseconds, kept for the next hit that takes as
    long when ``hit_timings`` holds such headers."""
    header = _timing(outcome, us)
    made = _made.get(outcome)
    if made is not None and us < TIMINGS_MADE:
        made[us] = header
    return header


def _timing(outcome: bytes | None, us: int) -> tuple[bytes, bytes]:
    ms, fraction = divmod(us, 1000)
    if outcome is None:
        return (b"server-timing", b"cache;dur=%d.%03d" % (ms, fraction))
    return (b"server-timing", b"cache;desc=%s;dur=%d.%03d" % (outcome, ms, fraction))


def timing_header(outcome: bytes | None, started: int) -> tuple[bytes, bytes]:
    """A ``Server-Timing`` header: ``cache;desc=<outcome>;dur=<ms since started>``.

    ``dur`` is in milliseconds, as the W3C spec has it, with microseconds shown:
    a hit takes tens of them, and a whole millisecond would read as zero.
    ``started``: ``perf_counter_ns()`` when the request arrived (integer
    nanoseconds: no float to make and convert on a hit).
    """
    us = (perf_counter_ns() - started) // 1000
    made = _made.get(outcome)
    if made is None or us >= TIMINGS_MADE:
        return _timing(outcome, us)
    return made[us] or made_timing(outcome, us)


class TimedSend:
    """A ``send`` that adds ``Server-Timing`` to the start message.

    The outcome is read from the status header the inner layers added (``None``
    when the middleware writes none: the timing then has no ``desc``). It
    wraps the client's ``send``, outside what is captured, so a stored
    answer never carries one request's timing into another's.
    """

    __slots__ = ("_send", "_started", "_status_name")

    def __init__(self, send: Send, started: int, status_name: bytes | None) -> None:
        self._send = send
        self._started = started
        self._status_name = status_name

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", ()))
            outcome = None
            if self._status_name is not None:
                for name, value in reversed(headers):
                    if bytes(name).lower() == self._status_name:
                        outcome = bytes(value)
                        break
            message = dict(message)
            message["headers"] = [*headers, timing_header(outcome, self._started)]
        await self._send(message)
