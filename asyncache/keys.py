"""Canonical encoding of a call's inputs and the 16-byte key derived from it.

``key = blake2b(canonical, digest_size=16)`` where ``canonical`` is the orjson
encoding of ``["asyncache/1", namespace, fingerprint, scope, inputs]`` with
object keys sorted.

Most inputs are plain JSON (strings, numbers, ``None``, lists, string-keyed
dicts): they are encoded by orjson in one call. Anything JSON would confuse
takes a slower walk that tags it, so that values JSON merges stay apart:

- ``NaN``, ``inf`` and ``-inf``, which orjson writes as ``null`` like ``None``
  (an input holding one is walked, and its ``None`` stays ``null``);
- ``b"x"`` and ``"x"``; big integers and their decimal strings;
- dicts with non-string keys, sets, datetimes, dataclasses, pydantic models;
- NumPy arrays and torch tensors, keyed on dtype, shape and a digest of their
  bytes (torch is detected by its type, never imported here).

``1`` and ``1.0`` are already distinct in orjson's output. A tuple keys like a
list, an enum member like its value and a ``uuid.UUID`` like its string: orjson
encodes those natively. Tags are lists whose first item starts with ``"\\x00"``;
a user string starting with ``"\\x00"`` is itself tagged, so no input can
imitate a tag.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import hashlib
import math
import sys
from collections.abc import Mapping
from typing import Any

import orjson

__all__ = ["KEY_VERSION", "KeyBuilder", "canonical", "make_key"]

KEY_VERSION = "asyncache/1"

_OPTIONS = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)
# An input whose plain encoding contains this might hold a NaN or an infinity.
_SUSPECT_NULL = b"null"
_dumps = orjson.dumps
_INT64_MIN, _UINT64_MAX = -(2**63), 2**64 - 1
# Byte strings longer than this key on their digest rather than their hex.
_INLINE_BYTES = 64
# Encodings up to this size are scanned for suspects; longer ones are judged by
# looking at up to _LOOK_BUDGET objects first.
_SCAN_LIMIT = 512
_LOOK_BUDGET = 64


class _NotPlainJSON(Exception):
    """Raised inside orjson's fallback: the input needs the careful walk."""


def _refuse(obj: Any) -> Any:
    raise _NotPlainJSON


def _hex_digest(data: bytes | memoryview) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _digest_bytes(data: bytes | bytearray | memoryview) -> list[Any]:
    raw = bytes(data)
    if len(raw) <= _INLINE_BYTES:
        return ["\x00bytes", raw.hex()]
    return ["\x00bytes", len(raw), _hex_digest(raw)]


def _ndarray(obj: Any, where: str) -> list[Any]:
    import numpy

    # asarray, not ascontiguousarray: the latter turns 0-d arrays and scalars into
    # shape (1,), which would merge them with one-element arrays. tobytes() is
    # C-ordered whatever the strides, so views key like their contiguous copies.
    array = numpy.asarray(obj)
    dtype = array.dtype
    if dtype.hasobject:
        # Their bytes are pointers: a different key in every process.
        raise TypeError(
            f"cannot build a cache key from {where}: a NumPy array of Python objects "
            "has no stable bytes; pass key=... to say what identifies the call, "
            "or ignore=(...) to leave it out"
        )
    # dtype.str of a structured dtype is only its size ("|V8"): spell its fields out.
    kind = dtype.str if dtype.fields is None else str(dtype.descr)
    return ["\x00ndarray", kind, list(array.shape), _hex_digest(array.tobytes())]


def _tensor(obj: Any) -> list[Any]:
    # Bytes of the tensor itself, whatever its device, view offset or strides.
    tensor = obj.detach().to("cpu").contiguous().clone()
    data = bytes(tensor.untyped_storage())
    return ["\x00tensor", str(tensor.dtype), list(tensor.shape), _hex_digest(data)]


def _is_numpy(obj: Any) -> bool:
    return type(obj).__module__ == "numpy" and hasattr(obj, "dtype")


def _is_tensor(obj: Any) -> bool:
    cls = type(obj)
    return cls.__module__.startswith("torch") and hasattr(obj, "untyped_storage")


def _walk(obj: Any, where: str) -> Any:
    """Turn ``obj`` into plain JSON with tags for everything JSON would merge."""
    cls = type(obj)
    if obj is None or cls is bool:
        return obj
    if cls is str:
        return ["\x00str", obj] if obj.startswith("\x00") else obj
    if cls is int:
        return obj if _INT64_MIN <= obj <= _UINT64_MAX else ["\x00int", str(obj)]
    if cls is float:
        if math.isfinite(obj):
            return obj
        return ["\x00float", "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")]
    if cls is list or cls is tuple:
        return [_walk(item, f"{where}[{index}]") for index, item in enumerate(obj)]
    if cls is dict:
        return _walk_mapping(obj, where)
    if isinstance(obj, bytes | bytearray | memoryview):
        return _digest_bytes(obj)
    if _is_numpy(obj):
        return _ndarray(obj, where)
    if _is_tensor(obj):
        return _tensor(obj)
    if isinstance(obj, enum.Enum):
        # An enum member keys as its value, as orjson's plain encoding has it.
        return _walk(obj.value, where)
    if isinstance(obj, str):
        # Subclasses key as their plain value; their own __str__ is not consulted.
        return _walk(str.__str__(obj), where)
    if isinstance(obj, int):
        return _walk(int.__int__(obj), where)
    if isinstance(obj, float):
        return _walk(float.__float__(obj), where)
    if isinstance(obj, datetime.datetime | datetime.date | datetime.time):
        return [f"\x00{cls.__name__}", obj.isoformat()]
    if isinstance(obj, datetime.timedelta):
        return ["\x00timedelta", obj.total_seconds()]
    decimal = sys.modules.get("decimal")  # not imported: obj cannot be a Decimal
    if decimal is not None and isinstance(obj, decimal.Decimal):
        return ["\x00decimal", str(obj)]
    if isinstance(obj, set | frozenset):
        items = [_walk(item, f"{where}{{}}") for item in obj]
        return ["\x00set", sorted(items, key=_sort_key)]
    if isinstance(obj, Mapping):
        return _walk_mapping(dict(obj), where)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
        return ["\x00dataclass", cls.__qualname__, _walk_mapping(fields, where)]
    if hasattr(obj, "model_dump") and hasattr(cls, "model_fields"):
        return ["\x00pydantic", cls.__qualname__, _walk(obj.model_dump(mode="python"), where)]
    if isinstance(obj, list | tuple):
        return _walk(list(obj), where)
    raise TypeError(
        f"cannot build a cache key from {where} of type {cls.__module__}.{cls.__qualname__}: "
        "pass key=... to say what identifies the call, or ignore=(...) to leave it out"
    )


def _walk_mapping(obj: dict[Any, Any], where: str) -> Any:
    if all(type(name) is str for name in obj):
        return {
            (f"\x00{name}" if name.startswith("\x00") else name): _walk(value, f"{where}[{name!r}]")
            for name, value in obj.items()
        }
    pairs = [
        [_walk(name, where), _walk(value, f"{where}[{name!r}]")] for name, value in obj.items()
    ]
    return ["\x00map", sorted(pairs, key=lambda pair: _sort_key(pair[0]))]


def _sort_key(item: Any) -> bytes:
    return orjson.dumps(item, option=orjson.OPT_SORT_KEYS)


def _looks_plain(obj: Any, budget: float = _LOOK_BUDGET) -> bool | None:
    """Whether ``obj`` is plain JSON with nothing to tag; ``None`` when it cannot tell.

    Only the types orjson encodes natively reach here (others raised already),
    so a string, finite float, int, bool or ``None`` at every leaf means the
    fast encoding is canonical: its ``null`` can only be ``None``. It cannot
    tell past ``budget`` items, or at a leaf of another type (an enum, a UUID).
    Walks containers, not items, to stay cheap on the common shape (a dict of
    strings and short lists).
    """
    cls = type(obj)
    if cls is dict:
        todo: list[Any] = [obj.values()]
    elif cls is list or cls is tuple:
        todo = [obj]
    else:
        todo = [(obj,)]
    while todo:
        container = todo.pop()
        budget -= len(container)
        if budget < 0:
            return None
        for item in container:
            cls = type(item)
            if cls is str or cls is int or cls is bool or item is None:
                continue
            if cls is float:
                if item - item != 0.0:  # NaN and the infinities
                    return False
            elif cls is dict:
                todo.append(item.values())
            elif cls is list or cls is tuple:
                todo.append(item)
            else:
                return None
    return True


def _where(name: str | None) -> str:
    return "the inputs" if name is None else f"argument {name!r}"


def canonical(obj: Any, *, name: str | None = None) -> bytes:
    """Canonical bytes of ``obj``: equal inputs give equal bytes, different ones differ.

    Plain JSON is orjson's output as is. Anything else is walked into tagged
    JSON and wrapped as ``["\\u0000c", ...]``, a shape the plain encoding of
    an input never has (a top-level list starting with a NUL-prefixed string
    takes the walk too), so the two encodings cannot collide.

    Args:
        obj: the value to encode.
        name: the argument's name, used in the error message.

    Raises:
        TypeError: ``obj`` holds a value of a type the encoder does not know.
    """
    try:
        raw = _dumps(obj, default=_refuse, option=_OPTIONS)
    except (_NotPlainJSON, orjson.JSONEncodeError):
        pass
    else:
        # orjson writes None, NaN and the infinities alike as null. The rule: the
        # plain encoding is canonical when it holds no "null" or when every leaf
        # is a string, int, bool, None or finite float. Scanning and looking are
        # two ways to decide it cheaply; the key never depends on which ran.
        # (find() is faster than `in` on bytes: this is the hit path.)
        if len(raw) <= _SCAN_LIMIT or (verdict := _looks_plain(obj, _LOOK_BUDGET)) is None:
            plain = raw.find(_SUSPECT_NULL) < 0 or _looks_plain(obj, math.inf) is True
        else:
            plain = verdict  # scanning a long encoding costs more than a look
        if plain and (type(obj) is dict or not _looks_like_tag(obj)):
            return raw
    if name is None and type(obj) is dict and all(type(arg) is str for arg in obj):
        # Name the offending argument in the error when the inputs are a call's arguments.
        walked: Any = {
            (f"\x00{arg}" if arg.startswith("\x00") else arg): _walk(value, _where(arg))
            for arg, value in obj.items()
        }
    else:
        walked = _walk(obj, _where(name))
    return b'["\\u0000c",' + orjson.dumps(walked, option=orjson.OPT_SORT_KEYS) + b"]"


def _looks_like_tag(obj: Any) -> bool:
    if type(obj) is not list and type(obj) is not tuple:
        return False
    return bool(obj) and type(obj[0]) is str and obj[0].startswith("\x00")


class KeyBuilder:
    """Builds keys for one namespace and fingerprint; the prefix is encoded once.

    Args:
        namespace: the function's qualified name, the route, or a chosen name.
        fingerprint: what identifies the model: a string, a JSON-able mapping or ``None``.
    """

    __slots__ = ("_hasher", "_scoped", "fingerprint", "namespace")

    def __init__(self, namespace: str, fingerprint: str | Mapping[str, Any] | None) -> None:
        self.namespace = namespace
        self.fingerprint = fingerprint
        head = b"[" + orjson.dumps(KEY_VERSION) + b"," + canonical(namespace)
        head += b"," + canonical(fingerprint, name="fingerprint") + b","
        self._scoped = hashlib.blake2b(head, digest_size=16)
        self._hasher = self._scoped.copy()
        self._hasher.update(b"null,")

    def key(self, inputs: Any, scope: Any = None) -> bytes:
        """The 16-byte key of ``inputs`` under ``scope`` (``None``: unscoped).

        Raises:
            TypeError: an input cannot be encoded.
        """
        if scope is None:
            hasher = self._hasher.copy()
        else:
            hasher = self._scoped.copy()
            hasher.update(canonical(scope, name="scope"))
            hasher.update(b",")
        hasher.update(canonical(inputs))
        hasher.update(b"]")
        return hasher.digest()


def make_key(
    namespace: str, fingerprint: str | Mapping[str, Any] | None, scope: Any, inputs: Any
) -> bytes:
    """The 16-byte key of one call; see the module docstring for the format.

    Raises:
        TypeError: an input cannot be encoded.
    """
    return KeyBuilder(namespace, fingerprint).key(inputs, scope)
