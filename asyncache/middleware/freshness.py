"""What ``Cache-Control``, ``Expires``, ``Date`` and ``Age`` say: directives, lifetime, age.

Every reading of ``Cache-Control`` in the middleware goes through
``cache_control``: the response's refusals (``response.refusal``), its
freshness lifetime, and the request's ``no-store``. A window that applies
after the lifetime (``stale-while-revalidate``, ``stale-if-error``) is one
more directive read from the same mapping.

RFC 9111 4.2: a shared cache serves a response while its freshness lifetime
(``s-maxage``, else ``max-age``, else ``Expires - Date``) exceeds its current
age (the ``Age`` the app sent, or the time since its ``Date``), and no longer.
So the entry of a response that gives a lifetime lives no longer than what is
left of it, and a hit says its age (``Age``: RFC 9111 5.1).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from email.utils import parsedate_to_datetime
from typing import NamedTuple

from .types import Headers

__all__ = ["Freshness", "cache_control", "delta_seconds", "freshness", "http_date"]


def cache_control(values: Iterable[str]) -> dict[str, str | None]:
    """The directives of ``Cache-Control`` values (one per header line), by lowercase name.

    Each maps to its argument, unquoted, or ``None`` when it has none. A
    directive name is a token: ``no-store;`` (a stray parameter) is
    ``no-store``. A directive given twice keeps its first argument, except a
    lifetime (``max-age``, ``s-maxage``), which keeps its smallest: RFC 9111
    4.2.1 lets a cache take the first or treat the response as stale, and the
    smallest is never fresher than either.
    """
    found: dict[str, str | None] = {}
    for value in values:
        for part in value.split(","):
            name, equals, argument = part.partition("=")
            name = name.partition(";")[0].strip().lower()
            if not name:
                continue
            given = argument.partition(";")[0].strip().strip('"') if equals else None
            if name not in found:
                found[name] = given
            elif name in _LIFETIMES:
                found[name] = _smaller(found[name], given)
    return found


_LIFETIMES = frozenset({"max-age", "s-maxage"})


def _smaller(one: str | None, other: str | None) -> str | None:
    first, second = delta_seconds(one), delta_seconds(other)
    if first is None or second is None:
        return None  # not a number: the caller refuses it either way
    return one if first <= second else other


def delta_seconds(argument: str | None) -> int | None:
    """A directive's delta-seconds (``max-age=60``: ``60``), or ``None`` when it is not one."""
    if argument is None or not argument.isdigit():
        return None
    return int(argument)


def http_date(value: bytes) -> float | None:
    """An HTTP date as Unix seconds, or ``None`` when it is not one (``0`` among them)."""
    try:
        when = parsedate_to_datetime(value.decode("latin-1"))
        return when.timestamp()
    except (TypeError, ValueError, IndexError, OverflowError, OSError):
        return None


class Freshness(NamedTuple):
    """How long a shared cache may serve a response, as of when it was captured.

    Attributes:
        left: the seconds of its freshness lifetime left (lifetime minus age;
            ``<= 0``: stale already), or ``None`` when it gives no lifetime.
        age: its age when captured, in seconds.
        stale_while_revalidate: its own ``stale-while-revalidate`` window in
            seconds (RFC 5861), or ``None`` when it gives none (or not as
            delta-seconds).
        stale_if_error: its own ``stale-if-error`` window, likewise.
    """

    left: float | None
    age: float
    stale_while_revalidate: float | None = None
    stale_if_error: float | None = None
    revalidate: bool = False
    """``must-revalidate``, ``proxy-revalidate``, ``s-maxage`` or ``no-cache``: never
    served stale (RFC 9111 4.2.4, 5.2.2), whatever the windows."""


def freshness(headers: Headers, now: float) -> Freshness:
    """What ``headers`` say about a response's freshness at ``now`` (Unix seconds)."""
    controls: list[str] = []
    expires: bytes | None = None
    date: bytes | None = None
    age_header: bytes | None = None
    for raw_name, value in headers:
        name = raw_name.lower()
        if name == b"cache-control":
            controls.append(value.decode("latin-1"))
        elif name == b"expires":
            expires = value if expires is None else expires
        elif name == b"date":
            date = value if date is None else date
        elif name == b"age":
            age_header = value if age_header is None else age_header
    generated = http_date(date) if date is not None else None
    # RFC 9111 4.2.3: the larger of the age the app says and the time since its Date.
    age = float(delta_seconds(age_header.decode("latin-1").strip()) or 0) if age_header else 0.0
    if generated is not None:
        age = max(age, now - generated)
    directives = cache_control(controls)
    lifetime: float | None = None
    for directive in ("s-maxage", "max-age"):
        if directive in directives:
            seconds = delta_seconds(directives[directive])
            lifetime = float(seconds) if seconds is not None else 0.0
            break
    else:
        if expires is not None:
            until = http_date(expires)
            start = generated if generated is not None else now
            lifetime = until - start if until is not None else 0.0
    if lifetime is not None and not math.isfinite(lifetime):
        lifetime = 0.0
    return Freshness(
        None if lifetime is None else lifetime - age,
        age,
        _window(directives, "stale-while-revalidate"),
        _window(directives, "stale-if-error"),
        not _NEVER_STALE.isdisjoint(directives),
    )


# The directives that forbid a shared cache to serve a response once it is stale.
_NEVER_STALE = frozenset({"must-revalidate", "proxy-revalidate", "s-maxage", "no-cache"})


def _window(directives: dict[str, str | None], name: str) -> float | None:
    """A window directive's seconds, or ``None`` when it is absent or not delta-seconds."""
    seconds = delta_seconds(directives[name]) if name in directives else None
    return None if seconds is None else float(seconds)
