"""The value envelope: what a store holds for one decision.

Layout: one header byte, then (when a secret is set) a 16-byte keyed BLAKE2b
tag over the cache key, the header and the body, then the body. The body is
orjson of ``{"v": result, "t": ttl, "c": created_at, "d": compute_seconds}``,
with ``"n": namespace`` when the cache that wrote it has a namespace (what
``asyncache copy --namespace`` selects by), ``"w": [stale_while_revalidate,
stale_if_error]`` when the entry is kept past its ttl (see
``asyncache.engine._freshness``), and ``"x": [exception type, args, attributes]``
for a cached error (``"v"`` is then ``null``; args and attributes tagged as results
are), zlib-compressed when that is smaller. Older versions wrote ``"x"`` as
``[exception type, message]``: it reads as the type with the message as its one arg.
Envelopes without ``"w"`` or ``"x"`` (older versions wrote none) read as a
decision that is fresh until its store expiry.

Header bits: the high nibble is the format (1); bit 0 says zlib; bit 1 says a
tag follows; bit 2 says the result holds tagged values (NumPy arrays, bytes,
non-finite floats, integers beyond 64 bits) that decoding must revive. Plain
results skip that walk, so a hit costs one ``orjson.loads``.

Inflating is bounded: a zlib body that would inflate past ``max_size`` bytes
(``MAX_DECODED_BYTES`` by default) is a ``DecodeError``, found while holding at
most ``max_size`` bytes and one 16 KiB step of output, so a small planted value
cannot make every reader allocate and parse hundreds of megabytes.

Nothing is ever unpickled: a shared store must not be able to run code in its readers.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import hashlib
import hmac
import math
import zlib
from typing import Any, NamedTuple

import orjson

from .errors import DecodeError, SignatureError

__all__ = [
    "MAX_DECODED_BYTES",
    "PLAIN_HEADER",
    "Decoded",
    "ErrorRecord",
    "InflatesPastCap",
    "decode",
    "decode_envelope",
    "encode",
    "normalize_secret",
    "round_trip",
]

_FORMAT = 0x10
# The header of a plain envelope (unsigned, uncompressed, untagged): the rest is orjson.
PLAIN_HEADER = _FORMAT
_ZLIB = 0x01
_SIGNED = 0x02
_TAGGED = 0x04
_TAG_BYTES = 16
_COMPRESS_FROM = 192  # bodies shorter than this never shrink under zlib's framing
_COPY_UP_TO = 2048
_TAG_KEY = "\x00t"  # a one-key dict {"\x00t": [kind, ...]} marks a tagged value
# The largest inflated body ``decode`` accepts unless told otherwise: far above any
# entry the engine stores by default (1 MiB), far below a decompression bomb.
MAX_DECODED_BYTES = 64 * 1024 * 1024
# Bytes of input fed, and of output taken, per step of a bounded inflate.
_INFLATE_STEP = 16 * 1024


class ErrorRecord(NamedTuple):
    """What a cached error is stored as: its type name, args and attributes, as JSON."""

    name: str
    """Its type's ``module.qualname``."""
    args: tuple[Any, ...]
    """Its ``args``, which its type is called with again."""
    attributes: dict[str, Any] | None
    """Its ``__dict__`` (``BaseException.__setstate__`` sets it again), when not empty."""


class Decoded(NamedTuple):
    """A decoded entry: the result and what was recorded beside it."""

    value: Any
    ttl: float | None
    created_at: float
    compute_seconds: float
    stale_while_revalidate: float = 0.0
    """Seconds the store keeps the entry past its ttl to serve it while one refresh runs."""
    stale_if_error: float = 0.0
    """Seconds past that (the entry's last window) it is served only when a computation fails."""
    error: ErrorRecord | None = None
    """A cached error: its exception type, args and attributes."""

    @property
    def windows(self) -> float:
        """Seconds the entry is kept past its ttl: both stale windows together."""
        return self.stale_while_revalidate + self.stale_if_error


class InflatesPastCap(ValueError):
    """Raised by ``encode``: the value would compress, but inflate past ``max_size`` when read."""


class _NeedsTags(Exception):
    """Raised inside orjson's fallback: the result needs the tagging walk."""


def _refuse(obj: Any) -> Any:
    raise _NeedsTags


def normalize_secret(secret: bytes | str | None) -> bytes | None:
    """The HMAC key for a user's secret (BLAKE2b keys are at most 64 bytes)."""
    if secret is None:
        return None
    raw = secret.encode() if isinstance(secret, str) else bytes(secret)
    if not raw:
        raise ValueError("secret must not be empty")
    return raw if len(raw) <= 64 else hashlib.blake2b(raw).digest()


def _sign(secret: bytes, key: bytes, header: int, body: bytes | memoryview) -> bytes:
    mac = hashlib.blake2b(key=secret, digest_size=_TAG_BYTES)
    mac.update(key)
    mac.update(bytes((header,)))
    mac.update(body)
    return mac.digest()


def _tag(obj: Any) -> Any:
    """Plain JSON for ``obj``, with tags for what JSON cannot round-trip exactly."""
    cls = type(obj)
    if cls is float:
        if math.isfinite(obj):
            return obj
        return {_TAG_KEY: ["float", "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")]}
    if obj is None or cls in (str, bool):
        return obj
    if cls is int:
        # orjson writes 64-bit integers only; larger ones travel as their digits.
        return obj if -(2**63) <= obj < 2**64 else {_TAG_KEY: ["int", str(obj)]}
    if cls is dict:
        tagged = {name: _tag(value) for name, value in obj.items()}
        if len(tagged) == 1 and _TAG_KEY in tagged:
            # The result's own dict looks like a tag: wrap it so it is not revived as one.
            return {_TAG_KEY: ["dict", tagged]}
        return tagged
    if cls is list or cls is tuple:
        return [_tag(item) for item in obj]
    if isinstance(obj, bytes | bytearray | memoryview):
        return {_TAG_KEY: ["bytes", base64.b64encode(bytes(obj)).decode()]}
    if type(obj).__module__ == "numpy" and hasattr(obj, "dtype"):
        import numpy

        kind = "ndarray" if isinstance(obj, numpy.ndarray) else "npscalar"
        array = numpy.asarray(obj)
        if array.dtype.hasobject:
            raise TypeError("NumPy arrays of Python objects cannot be stored")
        data = base64.b64encode(array.tobytes(order="C")).decode()
        return {_TAG_KEY: [kind, array.dtype.str, list(array.shape), data]}
    if hasattr(obj, "model_dump") and hasattr(cls, "model_fields"):
        return _tag(obj.model_dump(mode="json"))
    if isinstance(obj, tuple):
        return [_tag(item) for item in obj]  # NamedTuples: orjson refuses tuple subclasses
    if dataclasses.is_dataclass(obj):
        return {field.name: _tag(getattr(obj, field.name)) for field in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return _tag(obj.value)
    # Datetimes, UUIDs and what else orjson itself can encode.
    return orjson.loads(orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS))


def _untag(obj: Any) -> Any:
    cls = type(obj)
    if cls is dict:
        tag = obj.get(_TAG_KEY) if len(obj) == 1 else None
        if tag is not None:
            return _revive(tag)
        return {name: _untag(value) for name, value in obj.items()}
    if cls is list:
        return [_untag(item) for item in obj]
    return obj


def _revive(tag: list[Any]) -> Any:
    kind = tag[0]
    if kind == "float":
        return float(tag[1])
    if kind == "bytes":
        return base64.b64decode(tag[1])
    if kind == "int":
        return int(tag[1])
    if kind == "dict":
        return {name: _untag(value) for name, value in tag[1].items()}
    if kind in ("ndarray", "npscalar"):
        import numpy

        flat = numpy.frombuffer(base64.b64decode(tag[3]), dtype=numpy.dtype(tag[1]))
        array = flat.reshape(tag[2]).copy()  # writable, like the array that was stored
        return array[()] if kind == "npscalar" else array
    raise DecodeError(f"unknown tagged value {kind!r}")


def encode(
    result: Any,
    *,
    ttl: float | None,
    created_at: float,
    compute_seconds: float,
    key: bytes,
    secret: bytes | None = None,
    namespace: str | None = None,
    windows: tuple[float, float] | None = None,
    error: ErrorRecord | None = None,
    max_size: int | None = None,
) -> bytes:
    """Encode one decision into the envelope (``namespace``, when given, as ``"n"``).

    ``windows`` (stale-while-revalidate and stale-if-error seconds, when either
    is not zero) is written as ``"w"``; ``error`` (a cached exception,
    ``result`` being ``None``) as ``"x"``.

    ``max_size`` is the read cap (``decode``'s): a body that would be
    compressed and inflate past it is refused here, since every read would
    refuse it as a decompression bomb.

    Raises:
        TypeError: ``result`` (or ``error``) holds a value that cannot be stored exactly.
        InflatesPastCap: the compressed body would inflate past ``max_size``.
    """
    header = _FORMAT
    envelope = {"v": result, "t": ttl, "c": created_at, "d": compute_seconds}
    if namespace is not None:
        envelope["n"] = namespace
    if windows is not None and (windows[0] or windows[1]):
        envelope["w"] = list(windows)
    if error is not None:
        try:
            envelope["x"] = [error.name, _tag(list(error.args)), _tag(error.attributes)]
        except orjson.JSONEncodeError as exc:
            raise TypeError(f"cannot store an error of type {error.name}: {exc}") from None
    try:
        body = orjson.dumps(envelope, default=_refuse)
        # orjson writes NaN and the infinities as null: those results need tags. A ttl
        # of None is one null of the envelope's own; only more can come from the result.
        if body.count(b"null") > (ttl is None) and _tag(result) != result:
            raise _NeedsTags
    except (_NeedsTags, orjson.JSONEncodeError):
        try:
            envelope["v"] = _tag(result)
            body = orjson.dumps(envelope)
        except (orjson.JSONEncodeError, _NeedsTags) as exc:
            raise TypeError(
                f"cannot store a result of type {type(result).__name__}: {exc}"
            ) from None
        header |= _TAGGED
    if len(body) >= _COMPRESS_FROM:
        packed = zlib.compress(body, 6)
        if len(packed) < len(body):
            if max_size is not None and len(body) > max_size:
                raise InflatesPastCap(
                    f"the value compresses to {len(packed)} bytes but inflates to "
                    f"{len(body)}, past the read cap of {max_size}"
                )
            body = packed
            header |= _ZLIB
    if secret is not None:
        header |= _SIGNED
        return bytes((header,)) + _sign(secret, key, header, body) + body
    return bytes((header,)) + body


def _inflate(body: bytes | memoryview, max_size: int | None) -> bytes:
    """Inflate a zlib body, refusing to produce more than ``max_size`` bytes.

    Bounded inflating goes ``_INFLATE_STEP`` bytes in and out at a time and keeps
    the pieces in a list: asking zlib for ``max_size`` bytes at once grows one
    buffer by doubling, which costs up to twice the cap before the bomb is known.
    Refusing a bomb holds at most the cap plus one step.
    """
    if max_size is None:
        try:
            return zlib.decompress(body)
        except zlib.error as exc:
            raise DecodeError(f"corrupt value: {exc}") from None
    if max_size < 0:
        raise ValueError(f"max_size must be >= 0 or None, not {max_size}")
    inflater = zlib.decompressobj()
    pieces: list[bytes] = []
    size = 0
    view = memoryview(body)
    try:
        for start in range(0, len(view), _INFLATE_STEP):
            data: bytes | memoryview = view[start : start + _INFLATE_STEP]
            while True:
                piece = inflater.decompress(data, _INFLATE_STEP)
                size += len(piece)
                if size > max_size:
                    raise DecodeError(f"value inflates past {max_size} bytes")
                pieces.append(piece)
                data = inflater.unconsumed_tail
                # A full piece may leave output inside zlib even when the input is used up.
                if inflater.eof or (not data and len(piece) < _INFLATE_STEP):
                    break
            if inflater.eof:
                break
    except zlib.error as exc:
        raise DecodeError(f"corrupt value: {exc}") from None
    if not inflater.eof:
        raise DecodeError("corrupt value: incomplete or truncated zlib stream")
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def decode_envelope(
    value: bytes,
    *,
    key: bytes,
    secret: bytes | None = None,
    max_size: int | None = MAX_DECODED_BYTES,
) -> dict[str, Any]:
    """Decode an envelope into its dict (``v``, ``t``, ``c``, ``d``): the hit path.

    Raises:
        DecodeError: as ``decode``.
    """
    if not value:
        raise DecodeError("empty value")
    header = value[0]
    if header == _FORMAT and secret is None:
        # The common case: plain, unsigned, uncompressed. One loads, no copies.
        try:
            # Slicing copies; a memoryview costs more than copying a small value.
            plain = value[1:] if len(value) <= _COPY_UP_TO else memoryview(value)[1:]
            envelope: dict[str, Any] = orjson.loads(plain)
            envelope["v"]
        except Exception as exc:
            raise DecodeError(f"corrupt value: {exc}") from None
        return envelope
    if header & 0xF0 != _FORMAT or header & 0x08:
        raise DecodeError(f"unknown value format 0x{header:02x}")
    # A large value is read through a view: a copy of a planted one would count
    # against the memory its refusal may take.
    body: bytes | memoryview = value[1:] if len(value) <= _COPY_UP_TO else memoryview(value)[1:]
    if secret is not None:
        if not header & _SIGNED:
            raise SignatureError("value is not signed but a secret is set")
        tag, body = body[:_TAG_BYTES], body[_TAG_BYTES:]
        if not hmac.compare_digest(tag, _sign(secret, key, header, body)):
            raise SignatureError("value failed its HMAC check")
    elif header & _SIGNED:
        body = body[_TAG_BYTES:]
    if header & _ZLIB:
        body = _inflate(body, max_size)
    try:
        envelope = orjson.loads(body)
        if header & _TAGGED:
            envelope["v"] = _untag(envelope["v"])
        envelope["v"]
    except DecodeError:
        raise
    except Exception as exc:  # JSONDecodeError, KeyError, TypeError, bad tags
        raise DecodeError(f"corrupt value: {exc}") from None
    return envelope


def decode(
    value: bytes,
    *,
    key: bytes,
    secret: bytes | None = None,
    max_size: int | None = MAX_DECODED_BYTES,
) -> Decoded:
    """Decode an envelope written by ``encode``.

    Args:
        value: the stored envelope.
        key: the cache key it is stored under (signed envelopes are bound to it).
        secret: the HMAC key from ``normalize_secret``, if entries are signed.
        max_size: the largest body a compressed envelope may inflate to, in bytes;
            ``None`` for no limit. Only inflating is bounded: an uncompressed
            value is already as large as it gets.

    Raises:
        DecodeError: the value is corrupt, of an unknown format, or inflates
            past ``max_size``; ``SignatureError`` (a ``DecodeError``) when it is
            unsigned while a secret is set or its tag does not match.
        ValueError: ``max_size`` is negative (checked when a value needs inflating).
    """
    envelope = decode_envelope(value, key=key, secret=secret, max_size=max_size)
    try:
        decoded = Decoded(envelope["v"], envelope["t"], envelope["c"], envelope["d"])
        windows = envelope.get("w")
        error = envelope.get("x")
        if windows is None and error is None:
            return decoded  # every envelope older versions wrote, and most of ours
        revalidate, if_error = (0.0, 0.0) if windows is None else windows
        return decoded._replace(
            stale_while_revalidate=float(revalidate),
            stale_if_error=float(if_error),
            error=None if error is None else _error_record(error),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise DecodeError(f"corrupt value: {exc!r}") from None


def _error_record(stored: list[Any]) -> ErrorRecord:
    if len(stored) == 2:  # written by an older version: [type, message]
        return ErrorRecord(str(stored[0]), (str(stored[1]),), None)
    name, args, attributes = stored
    attributes = _untag(attributes)
    if not isinstance(name, str) or type(args) is not list:
        raise TypeError(f"malformed cached error {stored!r}")
    if attributes is not None and type(attributes) is not dict:
        raise TypeError(f"malformed cached error attributes {attributes!r}")
    return ErrorRecord(name, tuple(_untag(args)), attributes)


def round_trip(result: Any) -> Any:
    """``result`` as a later hit returns it (tuples become lists...), or as it is when it
    cannot be stored: what an audit compares a fresh result as."""
    try:
        value = encode(result, ttl=None, created_at=0.0, compute_seconds=0.0, key=b"")
        return decode(value, key=b"").value
    except (TypeError, ValueError):
        return result
