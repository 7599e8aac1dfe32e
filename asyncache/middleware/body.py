"""What the key holds for a request's query string and body.

Two requests share a key only when the app cannot tell them apart. A JSON body
keys on its parsed value (whitespace and object key order do not matter, ``1``
and ``1.0`` stay apart), unless parsing would merge what the app may see as
different: an object with a repeated key (``{"to": "mallory", "to": "bob"}``
parses like ``{"to": "bob"}``, yet an app may reject it) or a number that a
double does not keep (``1e-400`` parses to ``0.0``, ``4e-324`` to ``5e-324``,
a 20-digit id to its neighbours, an integer past 64 bits to the double nearest
it, which ``1e20`` also parses to). Those bodies key on their raw bytes.
"""

from __future__ import annotations

import hashlib
import json
import re
from decimal import Decimal, InvalidOperation
from operator import itemgetter
from typing import Any
from urllib.parse import unquote_plus

import orjson

__all__ = ["LONG_MEDIA_BYTES", "body_slot", "exact_json", "sorted_query"]


def sorted_query(query_string: bytes) -> list[tuple[str, str | None]]:
    """The query's decoded pairs: sorted by name unless a name repeats, then as sent.

    ``a=1&b=2`` and ``b=2&a=1`` key alike, ``a=1&a=2`` and ``a=2&a=1`` do not
    (frameworks hand repeated parameters to the app as an ordered list), nor
    do ``a=1&b=2&a=3`` and ``a=1&a=3&b=2``: an app that walks the pairs
    (``multi_items()``) sees them in another order. ``?flag`` (value ``None``)
    and ``?flag=`` (value ``""``) differ: an app may tell them apart in the
    raw query string. Percent-escapes decode as Latin-1, so every distinct
    byte stays distinct.
    """
    if not query_string:
        return []
    pairs: list[tuple[str, str | None]] = []
    for part in query_string.decode("latin-1").split("&"):
        if not part:
            continue
        name, equals, value = part.partition("=")
        pairs.append(
            (
                unquote_plus(name, encoding="latin-1"),
                unquote_plus(value, encoding="latin-1") if equals else None,
            )
        )
    if len({name for name, _ in pairs}) == len(pairs):
        pairs.sort(key=itemgetter(0))
    return pairs


def body_slot(content_type: bytes, body: bytes) -> list[Any]:
    """What the key holds for the body.

    A JSON body (``application/json`` or ``+json``) keys on its parsed value
    when parsing keeps everything the bytes say (``exact_json``); anything
    else, malformed JSON included, keys on its raw bytes. Either way the whole
    ``Content-Type`` value is keyed, parameters included: an app may answer
    ``application/json; version=2`` otherwise than ``application/json``.
    A value longer than ``LONG_MEDIA_BYTES`` keys on its digest, as a list (no
    string keys like it): building the key of a request that sends a megabyte
    ``Content-Type`` must not cost ten times that.
    """
    known = _MEDIA.get(content_type)
    if known is None:
        known = _media(content_type)
    ctype, json_media = known
    if not body:
        return ["empty", ctype]
    if json_media:
        parsed = exact_json(body)
        if parsed is not _INEXACT:
            return ["json", ctype, parsed]
    return ["raw", ctype, hashlib.blake2b(body, digest_size=16).hexdigest()]


_INEXACT: Any = object()
# What orjson parses as an int; longer integers it parses as doubles.
_INT64_MIN, _UINT64_MAX = -(2**63), 2**64 - 1

# A JSON number. Also matched inside strings, which only makes a body key on its bytes.
_NUMBER = re.compile(rb"-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")


def exact_json(body: bytes) -> Any:
    """``body`` parsed, or ``_INEXACT`` when it is not JSON or parsing would lose something.

    Lost: a repeated object key, or a number a double does not hold (it would
    print back as another number). orjson parses integers of up to 64 bits
    exactly and longer ones as doubles, so only a body whose value holds a
    float can hold such a number.
    """
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _INEXACT
    colons = body.count(b":")
    if type(parsed) is dict and len(parsed) == colons:
        # Each member has one colon outside strings: a flat object with one colon per
        # key repeats no key (the common case, checked without a walk).
        for item in parsed.values():
            if type(item) is float or type(item) is list:
                break
        else:
            return parsed
    elif colons and not _members_kept(body, parsed, colons):
        return _INEXACT
    if _holds_float(parsed) and not _numbers_exact(body):
        return _INEXACT
    return parsed


def _holds_float(value: Any) -> bool:
    kind = type(value)
    if kind is float:
        return True
    if kind is dict:
        return any(_holds_float(item) for item in value.values())
    if kind is list:
        return any(_holds_float(item) for item in value)
    return False


def _numbers_exact(body: bytes) -> bool:
    """Whether every number in ``body`` prints back from its double as the same number.

    An integer past 64 bits never does, even when its double prints as its
    value (``100000000000000000000`` parses as ``1e20`` does): an app that
    parses integers exactly tells the two apart.
    """
    for match in _NUMBER.finditer(body):
        text = match.group().decode("ascii")
        if text.lstrip("-").isdigit() and not _INT64_MIN <= int(text) <= _UINT64_MAX:
            return False
        try:
            if Decimal(text) != Decimal(repr(float(text))):
                return False
        except (InvalidOperation, ValueError, OverflowError):
            return False
    return True


def _members_kept(body: bytes, parsed: Any, colons: int) -> bool:
    """Whether parsing kept every object member: no key was repeated.

    orjson writes every colon inside strings as it is, so without ``\\u``
    escapes (which may hide a colon) the colons of the re-encoded value equal
    the body's exactly when nothing was dropped. With escapes, the slow way.
    """
    if b"\\u" not in body:
        return orjson.dumps(parsed).count(b":") == colons
    try:
        json.loads(body, object_pairs_hook=_no_repeats)
    except ValueError:
        return False
    return True


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError("a repeated key")
    return result


# Content-Type header value -> (its text, whether it is JSON); a client sends the
# same few values over and over. Only short values are remembered, so what this
# holds is bounded in bytes (_MEDIA_MAX * _MEDIA_VALUE_BYTES), not only in count:
# a client sending a megabyte Content-Type must not leave it behind.
_MEDIA: dict[bytes, tuple[str | list[str], bool]] = {}
_MEDIA_MAX = 256
_MEDIA_VALUE_BYTES = 128


LONG_MEDIA_BYTES = 1024
"""A ``Content-Type`` longer than this keys on its digest (a media type's name is at
most 255 bytes, RFC 6838 4.2, so it is read from this many first bytes)."""


def _media(content_type: bytes) -> tuple[str | list[str], bool]:
    ctype: str | list[str]
    if len(content_type) > LONG_MEDIA_BYTES:
        ctype = ["blake2b", hashlib.blake2b(content_type, digest_size=16).hexdigest()]
        name, semicolon, _ = content_type[:LONG_MEDIA_BYTES].partition(b";")
        media = name.decode("latin-1").strip().lower() if semicolon else ""
    else:
        ctype = content_type.decode("latin-1")
        media = ctype.partition(";")[0].strip().lower()
    known = (ctype, media == "application/json" or media.endswith("+json"))
    if len(_MEDIA) < _MEDIA_MAX and len(content_type) <= _MEDIA_VALUE_BYTES:
        _MEDIA[content_type] = known
    return known
