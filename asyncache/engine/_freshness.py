"""Freshness: how long a stored decision is served, and what happens after its ttl.

An entry's life, from the moment it is stored::

    |-- fresh (ttl) --|-- stale-while-revalidate --|-- stale-if-error --|  gone
                      ^ fresh-until                                     ^ stale-until

- fresh: a hit;
- stale-while-revalidate: a hit served at once, while one refresh runs as the
  key's flight (one per process; one per fleet under a lease). The refresh
  replaces the entry only if it is still the one it read (``replace``, a
  compare-and-set on every store), so a late refresher never overwrites a
  newer decision;
- stale-if-error: a miss, but a computation that raises (a ``TimeoutError``
  included) returns the stored decision instead of the error;
- gone: the store no longer returns it.

Stores keep an entry until stale-until (their ``expires_at``); the envelope
carries both windows (``"w"``), so fresh-until is ``expires_at`` minus the two
windows. An envelope without them (written by an older version, or without
windows) is fresh until its store expiry, as before. Renewal (``renew_on_hit``)
moves ``expires_at`` and so fresh-until with it; it only happens on fresh hits.

A computation that raises one of ``cache_errors`` (or a subclass of one) is
stored as an error entry (``"x"``) for ``error_ttl`` seconds: within it,
callers get the exception that was raised, of its own type, with its ``args``
and attributes, without running the model. What is kept is what
``__reduce__`` names (the type, its args, its ``__dict__``), written as
JSON, never as code; an error that does not come back equal through that round trip (an arg
the codec cannot keep exactly, a constructor that will not take its args
back) is not cached, so that it is never stored only to be refused on every
read.

Types are found by ``module.qualname`` among the listed types and the
subclasses of theirs this process has defined, never by import: a shared store
cannot make a reader raise anything the reader did not list. A cached error of
a type a cache does not list (another cache's, sharing the store) is a miss
for it that leaves the entry in place (``UnlistedError``). Cancellation,
``KeyboardInterrupt``, ``SystemExit`` and store errors are never cached.
"""

from __future__ import annotations

import math
import random
import threading
import time
from contextvars import ContextVar
from typing import Any, NamedTuple

from ..codec import ErrorRecord
from ..errors import DecodeError, StoreError
from ..stores.protocol import Entry

__all__ = [
    "ErrorHit",
    "Freshness",
    "StaleHit",
    "UnlistedError",
    "error_name",
    "error_record",
    "failed_together",
    "fresh_until",
    "overridden",
    "revive_error",
]


class Freshness(NamedTuple):
    """The freshness settings of a cache (or of one decorated function).

    Attributes:
        stale_while_revalidate: seconds after an entry's ttl during which a
            lookup returns it at once and starts one refresh.
        stale_if_error: seconds after that during which a computation that
            raises or times out returns the stored decision instead.
        jitter: a fraction in ``[0, 1)``: each stored ttl is drawn uniformly
            from ``[ttl * (1 - jitter), ttl]``.
        cache_errors: exception types remembered for ``error_ttl`` seconds.
        error_ttl: seconds a cached error is raised again without computing.
    """

    stale_while_revalidate: float = 0.0
    stale_if_error: float = 0.0
    jitter: float = 0.0
    cache_errors: tuple[type[BaseException], ...] = ()
    error_ttl: float = 5.0

    @classmethod
    def checked(
        cls,
        *,
        stale_while_revalidate: float = 0.0,
        stale_if_error: float = 0.0,
        jitter: float = 0.0,
        cache_errors: tuple[type[BaseException], ...] | list[type[BaseException]] = (),
        error_ttl: float = 5.0,
    ) -> Freshness:
        """The settings, validated.

        Raises:
            ValueError: a window is negative or not finite, ``jitter`` is
                outside ``[0, 1)``, or ``error_ttl`` is not positive.
            TypeError: ``cache_errors`` holds something that is not an
                exception type, or one that must never be cached.
        """
        for name, seconds in (
            ("stale_while_revalidate", stale_while_revalidate),
            ("stale_if_error", stale_if_error),
        ):
            if not (math.isfinite(seconds) and seconds >= 0):
                raise ValueError(f"{name} must be finite seconds >= 0, got {seconds!r}")
        if not 0.0 <= jitter < 1.0:
            raise ValueError(f"jitter must be a fraction in [0, 1), got {jitter!r}")
        if not (math.isfinite(error_ttl) and error_ttl > 0):
            raise ValueError(f"error_ttl must be positive seconds, got {error_ttl!r}")
        listed = tuple(cache_errors)
        for kind in listed:
            if not (isinstance(kind, type) and issubclass(kind, Exception)):
                raise TypeError(f"cache_errors takes Exception subclasses, not {kind!r}")
            if issubclass(kind, StoreError):
                raise TypeError("store errors are never cached: drop StoreError from cache_errors")
        return cls(float(stale_while_revalidate), float(stale_if_error), jitter, listed, error_ttl)

    @property
    def windows(self) -> tuple[float, float] | None:
        """The two windows an envelope records, or ``None`` when both are zero."""
        if self.stale_while_revalidate or self.stale_if_error:
            return (self.stale_while_revalidate, self.stale_if_error)
        return None

    def spread(self, ttl: float) -> float:
        """``ttl`` drawn from ``[ttl * (1 - jitter), ttl]`` (itself without jitter)."""
        if not self.jitter:
            return ttl
        return ttl * (1.0 - self.jitter * random.random())

    def caches(self, error: BaseException) -> bool:
        """Whether ``error`` is one of the types to remember (never a store error)."""
        return (
            bool(self.cache_errors)
            and isinstance(error, self.cache_errors)
            and not isinstance(error, StoreError)
            and _TOGETHER.get(id(error)) is not error
        )


# Errors raised by one call for several inputs (a batch that raised): which input caused
# it is unknown, so none of them caches it. Held by id (exceptions take no weak
# references), the newest few only: the engine asks while the batch's callers hear of it.
_TOGETHER: dict[int, BaseException] = {}
_TOGETHER_KEPT = 256
_TOGETHER_LOCK = threading.Lock()


def failed_together(error: BaseException) -> None:
    """Say that ``error`` was raised for several inputs at once: it is cached for none.

    A cached error belongs to the one input that raised it; a batch that raises
    as a whole stores nothing for its other items (they are computed again).
    """
    with _TOGETHER_LOCK:  # several threads' loops may share a cache
        if len(_TOGETHER) >= _TOGETHER_KEPT:
            del _TOGETHER[next(iter(_TOGETHER))]
        _TOGETHER[id(error)] = error


overridden: ContextVar[Freshness | None] = ContextVar("asyncache_freshness", default=None)
"""The settings of the decorated function whose miss is being computed, when it has its
own (``@cached_prediction(stale_while_revalidate=...)``). A context variable, because the
miss runs in a flight task started from the caller's context: the settings reach the
store write without a parameter on every step of the one path in between. Hits read
the windows from the entry itself and never look here."""


def fresh_until(entry: Entry, windows: float) -> float | None:
    """When ``entry`` stops being fresh: its store expiry less the windows it was kept for."""
    expires_at = entry.expires_at
    return None if expires_at is None else expires_at - windows


class StaleHit(Exception):
    """Raised by ``Engine.hit`` for an entry past its ttl: the caller decides.

    Attributes:
        value: the stored decision, ready for the caller.
        entry: the entry read (a refresh replaces it only if it is still there).
        revalidate: ``True`` within stale-while-revalidate (serve it, refresh);
            ``False`` within stale-if-error (compute; serve it if that fails).
    """

    def __init__(self, value: Any, entry: Entry, *, revalidate: bool) -> None:
        super().__init__("stale")
        self.value = value
        self.entry = entry
        self.revalidate = revalidate

    def usable(self) -> bool:
        """Whether the entry is still within its last window (a fallback may be served)."""
        expires_at = self.entry.expires_at
        return expires_at is None or time.time() < expires_at


class ErrorHit(Exception):
    """Raised by ``Engine.hit`` for a cached error: ``error`` is what the caller raises."""

    def __init__(self, error: BaseException) -> None:
        super().__init__("cached error")
        self.error = error


class UnlistedError(DecodeError):
    """A cached error this cache may not raise: its type is not one it lists (nor a
    subclass of one this process defines). Another cache sharing the store listed it:
    a miss here that leaves the entry for that cache, neither corrupt nor deleted."""


def error_name(kind: type[BaseException]) -> str:
    """How a cached error's type is written: ``module.qualname``."""
    return f"{kind.__module__}.{kind.__qualname__}"


# Types found by name before (an error hit revives one per call); only finds are kept,
# as a subclass may be defined later. Bounded: local classes have names without end.
_found: dict[tuple[str, tuple[type[BaseException], ...]], type[BaseException]] = {}
_FOUND_AT_MOST = 256


def _listed_type(name: str, listed: tuple[type[BaseException], ...]) -> type[BaseException] | None:
    """The type named ``name`` among ``listed`` and the subclasses of theirs defined here."""
    found = _found.get((name, listed))
    if found is not None:
        return found
    seen: set[type[BaseException]] = set()
    todo = list(listed)
    while todo:
        kind = todo.pop()
        if kind in seen:
            continue
        seen.add(kind)
        if error_name(kind) == name:
            if len(_found) >= _FOUND_AT_MOST:
                _found.clear()
            _found[(name, listed)] = kind
            return kind
        todo.extend(kind.__subclasses__())
    return None


def _rebuilt(kind: type[BaseException], stored: ErrorRecord) -> BaseException:
    """An exception of ``kind`` made again from its args and attributes: the type called
    with its args, as ``__reduce__`` says, or, where the constructor will not take them back
    (one of two arguments that passes one message on, which ``__reduce__`` cannot remake),
    made without calling it; then its attributes set (``__setstate__``)."""
    try:
        error = kind(*stored.args)
    except Exception:
        error = kind.__new__(kind, *stored.args)
    if type(error) is not kind:
        raise TypeError(f"{error_name(kind)}(*args) made a {type(error).__qualname__}")
    if stored.attributes:
        error.__setstate__(stored.attributes)
    return error


def _reduced(error: BaseException) -> tuple[Any, ...]:
    """What ``__reduce__`` names of ``error``: its type, its args and its ``__dict__``."""
    reduced = error.__reduce__()
    if not isinstance(reduced, tuple) or reduced[0] is not type(error):
        raise TypeError(f"{type(error).__qualname__} does not reduce to its own type")
    kind, args, *rest = reduced
    attributes = rest[0] if rest else None
    if type(args) is not tuple or not (attributes is None or type(attributes) is dict):
        raise TypeError(f"{type(error).__qualname__} reduces to something other than args")
    return kind, args, attributes or None


def error_record(error: BaseException, listed: tuple[type[BaseException], ...]) -> ErrorRecord:
    """What ``error`` (an instance of a ``listed`` type) is stored as.

    Raises:
        TypeError: it cannot come back as it was raised: its type is not found
            by its name, it does not reduce to its args, or they do not make it again.
    """
    _, args, attributes = _reduced(error)
    name = error_name(type(error))
    if _listed_type(name, listed) is not type(error):
        raise TypeError(f"{name} is not found by its name (a local class?)")
    return ErrorRecord(name, args, attributes)


def same_error(revived: BaseException, error: BaseException) -> bool:
    """Whether ``revived`` (read back) is ``error`` as far as a caller can tell."""
    try:
        return bool(_reduced(revived) == _reduced(error))
    except Exception:  # an arg whose == raises (an array), or that reduces no more
        return False


def revive_error(stored: ErrorRecord, listed: tuple[type[BaseException], ...]) -> BaseException:
    """The exception a cached error entry stands for, of a listed type (or a subclass).

    Raises:
        UnlistedError: its type is not listed, nor a subclass of one defined here.
        DecodeError: its args or attributes do not make it again.
    """
    kind = _listed_type(stored.name, listed)
    if kind is None:
        raise UnlistedError(f"cached error of type {stored.name}, which cache_errors does not list")
    try:
        return _rebuilt(kind, stored)
    except Exception as exc:
        raise DecodeError(f"cached error {stored.name} cannot be rebuilt: {exc!r}") from None
