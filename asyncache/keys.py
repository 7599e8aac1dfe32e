"""Canonical encoding of a call's inputs and the 16-byte key derived from it.

``key = blake2b(canonical, digest_size=16)`` where ``canonical`` is the orjson
encoding of ``["asyncache/1", namespace, fingerprint, scope, inputs]`` with
object keys sorted.

Plain JSON inputs are encoded by orjson in one call. Anything JSON would
confuse (``NaN`` and ``None``, ``b"x"`` and ``"x"``, big integers, sets, dates,
arrays...) takes a slower walk that tags it. Tags are lists whose first item
starts with ``"\\x00"``; the walk tags user strings starting so too, so none is a tag.
Aliases (tuples, mappings, enum members, ``str``/``int``/``float`` subclasses,
UUIDs) key like their plain value, and an input with nothing to tag leaves the
walk as orjson's bytes for its plain value: a key never depends on the path.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import hashlib
import math
import sys
import threading
from collections.abc import Mapping
from typing import Any

import orjson

__all__ = [
    "KEY_SIZE",
    "KEY_VERSION",
    "PLAIN_OPTIONS",
    "KeyBuilder",
    "RecentKeys",
    "canonical",
    "make_key",
    "refuse",
]

KEY_VERSION = "asyncache/1"
KEY_SIZE = 16
"""Bytes in every key the cache makes (a BLAKE2b digest of this size)."""

PLAIN_OPTIONS = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)
# An input whose plain encoding contains this might hold a NaN or an infinity.
_SUSPECT_NULL = b"null"
# How the walked encoding's wrapper starts: a plain encoding that does is walked instead.
_TAG_START = b'["\\u0000'
_dumps = orjson.dumps
_INT64_MIN, _UINT64_MAX = -(2**63), 2**64 - 1
# Integers up to this many bits key on their decimal digits (at most 603: under any
# sys.set_int_max_str_digits limit, 640 at the least); longer ones on their hex.
_DECIMAL_BITS = 2000
# orjson encodes at most this many nested containers; the walk accepts as many.
_MAX_DEPTH = 254
# Byte strings longer than this key on their digest rather than their hex.
_INLINE_BYTES = 64
# Encodings up to this size are scanned for suspects; longer ones get a look first.
_SCAN_LIMIT = 512
_LOOK_BUDGET = 64
_ADVICE = " pass key=... to say what identifies the call, or ignore=(...) to leave it out"
_NO_ALIAS: Any = object()
_BASES: Any = ((str, str.__str__), (int, int.__int__), (float, float.__float__))
_TOO_DEEP_FOR_PYTHON = ": it nests too deep for Python's recursion limit;"


class _Refused(Exception):
    """The walk cannot encode a value; ``path`` grows as it unwinds, innermost first."""

    def __init__(self, detail: str, *, locate: bool = True, at: str | None = None) -> None:
        super().__init__(detail)
        self.detail, self.locate, self.path = detail, locate, [] if at is None else [at]

    def message(self, name: str | None, inputs: Any) -> str:
        path = self.path[::-1]
        where = "the inputs" if name is None else f"argument {name!r}"
        if name is None and path and type(inputs) is dict and all(type(n) is str for n in inputs):
            where = "argument " + path.pop(0)[1:-1]  # a call's arguments: path[0] is "['name']"
        location = "".join(path) if self.locate else ""
        return f"cannot build a cache key from {where}{location}{self.detail}{_ADVICE}"


def refuse(obj: Any) -> Any:
    raise TypeError  # inside orjson's fallback: the input needs the careful walk


def _hex_digest(data: bytes | memoryview) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _digest_bytes(data: bytes | bytearray | memoryview) -> list[Any]:
    raw = bytes(data)
    if len(raw) <= _INLINE_BYTES:
        return ["\x00bytes", raw.hex()]
    return ["\x00bytes", len(raw), _hex_digest(raw)]


def _ndarray(obj: Any) -> list[Any]:
    import numpy

    # asarray, not ascontiguousarray: the latter turns 0-d arrays and scalars into
    # shape (1,), which would merge them with one-element arrays. tobytes() is
    # C-ordered whatever the strides, so views key like their contiguous copies.
    array = numpy.asarray(obj)
    dtype = array.dtype
    if dtype.hasobject:
        # Their bytes are pointers: a different key in every process.
        raise _Refused(": a NumPy array of Python objects has no stable bytes;")
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
    return type(obj).__module__.startswith("torch") and hasattr(obj, "untyped_storage")


def _uuid_text(obj: Any) -> str | None:
    uuid = sys.modules.get("uuid")  # not imported: obj cannot be a UUID
    return uuid.UUID.__str__(obj) if uuid is not None and isinstance(obj, uuid.UUID) else None


def _alias(obj: Any) -> Any:
    """The value ``obj`` keys as when it is an alias of one (see the module docstring)."""
    if isinstance(obj, enum.Enum):
        return obj.value
    if _is_numpy(obj):  # numpy.float64 and numpy.str_ are subclasses too: arrays
        return _NO_ALIAS
    for base, plain in _BASES:
        if isinstance(obj, base):
            return plain(obj)
    return _uuid_text(obj) or _NO_ALIAS


def _str_key(name: Any) -> str | None:
    """The string a dict key keys as, or ``None`` when it is not an alias of a string."""
    while type(name) is not str and isinstance(name, enum.Enum | str):  # not numpy.str_
        name = _alias(name)
    return name if type(name) is str else _uuid_text(name)


def _locate(name: Any) -> str:
    small = type(name) is int and name.bit_length() <= _DECIMAL_BITS
    if small or type(name) in (str, float, bool) or name is None:
        return f"[{name!r}]"
    return f"[<{type(name).__qualname__}>]"


def _string(text: str) -> bytes:
    try:
        return _dumps(text)
    except orjson.JSONEncodeError:
        raise _Refused(": a string holding a lone surrogate is not text;") from None


class _Walk:
    """Encodes an input as tagged JSON (``escape``) or, when it needs no tag, as plain JSON."""

    __slots__ = ("escape", "escaped", "open", "tagged")

    def __init__(self, *, escape: bool) -> None:
        # escape: tag NUL-led strings and keys; tagged, escaped: whether it did either.
        self.escape, self.tagged, self.escaped = escape, False, False
        self.open: set[int] = set()  # the containers being walked: seeing one again is a cycle

    def tag(self, items: list[Any]) -> bytes:
        self.tagged = True
        return _dumps(items)

    def enter(self, obj: Any, depth: int) -> None:
        if depth >= _MAX_DEPTH:
            raise _Refused(f": it nests more than {_MAX_DEPTH} containers deep;", locate=False)
        if id(obj) in self.open:
            raise _Refused(": it contains itself;")
        self.open.add(id(obj))

    def value(self, obj: Any, depth: int) -> bytes:
        cls = type(obj)
        if cls is str:
            if self.escape and obj.startswith("\x00"):
                self.escaped = True
                return b'["\\u0000str",' + _string(obj) + b"]"
            return _string(obj)
        if obj is None or cls is bool:
            return _dumps(obj)
        if cls is int:
            if _INT64_MIN <= obj <= _UINT64_MAX:
                return _dumps(obj)
            big = str(obj) if obj.bit_length() <= _DECIMAL_BITS else hex(obj)
            return self.tag(["\x00int", big])
        if cls is float:
            if math.isfinite(obj):
                return _dumps(obj)
            return self.tag(["\x00float", "nan" if obj != obj else ("inf" if obj > 0 else "-inf")])
        if cls is list or cls is tuple:
            return b"[" + b",".join(self.items(obj, depth)) + b"]"
        if cls is dict:
            return self.mapping(obj, obj, depth)
        return self.other(obj, depth)

    def items(self, obj: Any, depth: int, mark: str = "") -> list[bytes]:
        self.enter(obj, depth)
        parts = []
        for index, item in enumerate(obj):
            try:
                parts.append(self.value(item, depth + 1))
            except _Refused as refused:
                refused.path.append(mark or f"[{index}]")
                raise
        self.open.discard(id(obj))
        return parts

    def mapping(self, obj: Any, items: dict[Any, Any], depth: int) -> bytes:
        """``obj``'s ``items``: an object when the keys are distinct strings, else a map tag."""
        self.enter(obj, depth)
        texts: list[Any] = list(items)
        if not all(type(text) is str for text in texts):
            texts = [_str_key(name) for name in items]
            if None in texts or len(set(texts)) < len(texts):
                return self.pairs(obj, items, depth)
        fields: dict[str, bytes] = {}
        for text, (name, value) in zip(texts, items.items(), strict=True):
            if text.startswith("\x00") and self.escape:
                self.escaped, text = True, "\x00" + text
            try:
                fields[text] = _string(text) + b":" + self.value(value, depth + 1)
            except _Refused as refused:
                refused.path.append(_locate(name))
                raise
            except RecursionError:
                if depth:  # unwind to the arguments, where there is room to say which
                    raise
                raise _Refused(_TOO_DEEP_FOR_PYTHON, at=_locate(name)) from None
        self.open.discard(id(obj))
        return b"{" + b",".join([fields[text] for text in sorted(fields)]) + b"}"

    def pairs(self, obj: Any, items: dict[Any, Any], depth: int) -> bytes:
        pairs = []
        for name, value in items.items():
            try:
                pair = self.value(name, depth + 1), self.value(value, depth + 1)
            except _Refused as refused:
                refused.path.append(_locate(name))
                raise
            pairs.append(b"[" + b",".join(pair) + b"]")
        self.open.discard(id(obj))
        self.tagged = True  # sorted by key, then value: two keys can be aliases of one
        return b'["\\u0000map",[' + b",".join(sorted(pairs)) + b"]]"

    def other(self, obj: Any, depth: int) -> bytes:
        cls = type(obj)
        if isinstance(obj, bytes | bytearray | memoryview):
            return self.tag(_digest_bytes(obj))
        if _is_numpy(obj):
            return self.tag(_ndarray(obj))
        if _is_tensor(obj):
            return self.tag(_tensor(obj))
        alias = _alias(obj)
        if alias is not _NO_ALIAS:
            return self.value(alias, depth)
        if isinstance(obj, datetime.datetime | datetime.date | datetime.time):
            return self.tag([f"\x00{cls.__name__}", obj.isoformat()])
        if isinstance(obj, datetime.timedelta):
            return self.tag(["\x00timedelta", obj.total_seconds()])
        decimal = sys.modules.get("decimal")  # not imported: obj cannot be a Decimal
        if decimal is not None and isinstance(obj, decimal.Decimal):
            return self.tag(["\x00decimal", str(obj)])
        if isinstance(obj, set | frozenset):
            items = sorted(self.items(obj, depth, "{}"))
            self.tagged = True
            return b'["\\u0000set",[' + b",".join(items) + b"]]"
        if isinstance(obj, Mapping):
            return self.mapping(obj, dict(obj), depth)
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
            kind = "dataclass"
        elif hasattr(obj, "model_dump") and hasattr(cls, "model_fields"):
            kind, fields = "pydantic", obj.model_dump(mode="python")
        elif isinstance(obj, list | tuple):
            return b"[" + b",".join(self.items(obj, depth)) + b"]"
        else:
            raise _Refused(f" of type {cls.__module__}.{cls.__qualname__}:")
        head = self.tag([f"\x00{kind}", cls.__qualname__])[:-1]  # the fields follow
        return head + b"," + self.mapping(obj, fields, depth) + b"]"


def _looks_plain(obj: Any, budget: float = _LOOK_BUDGET) -> bool | None:
    """Whether ``obj`` is plain JSON with nothing to tag; ``None`` when it cannot tell.

    Only what orjson encodes natively reaches here, so a string, finite float, int,
    bool, ``None`` or UUID at every leaf (through enum members) means its ``null``
    can only be ``None``. Past ``budget`` items, or at another leaf, it cannot tell.
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
            elif isinstance(item, enum.Enum):
                todo.append((item.value,))
            elif cls.__name__ != "UUID" or cls.__module__ != "uuid":  # orjson's only UUID
                return None
    return True


def canonical(obj: Any, *, name: str | None = None) -> bytes:
    """Canonical bytes of ``obj``: equal inputs give equal bytes, different ones differ.

    Plain JSON is orjson's output as is. Anything else is walked: into that same
    plain JSON when nothing needs a tag, else into tagged JSON wrapped as
    ``["\\u0000c", ...]``, a shape no plain encoding has (one starting so is walked).

    Args:
        obj: the value to encode.
        name: the argument's name, used in the error message.

    Raises:
        TypeError: ``obj`` holds a value of a type the encoder does not know,
            nests more than 254 containers deep or contains itself.
    """
    try:
        raw = _dumps(obj, default=refuse, option=PLAIN_OPTIONS)
    except orjson.JSONEncodeError:  # a TypeError: what refuse raises, or what orjson does
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
        if plain and (type(obj) is dict or not raw.startswith(_TAG_START)):
            return raw
    walk = _Walk(escape=True)
    try:
        tagged = walk.value(obj, 0)
        if not walk.tagged:
            plain_bytes = _Walk(escape=False).value(obj, 0) if walk.escaped else tagged
            if not plain_bytes.startswith(_TAG_START):
                return plain_bytes
    except _Refused as refused:
        raise TypeError(refused.message(name, obj)) from None
    except RecursionError:
        raise TypeError(_Refused(_TOO_DEEP_FOR_PYTHON).message(name, None)) from None
    return b'["\\u0000c",' + tagged + b"]"


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
        self._scoped = hashlib.blake2b(head, digest_size=KEY_SIZE)
        self._hasher = self._scoped.copy()
        self._hasher.update(b"null,")

    def key(self, inputs: Any, scope: Any = None) -> bytes:
        """The 16-byte key of ``inputs`` under ``scope`` (``None``: unscoped).

        Raises:
            TypeError: an input cannot be encoded.
        """
        if scope is None:
            return self.digest(canonical(inputs))
        hasher = self._scoped.copy()
        hasher.update(canonical(scope, name="scope") + b"," + canonical(inputs) + b"]")
        return hasher.digest()

    def digest(self, raw: bytes) -> bytes:
        """The unscoped key of the inputs whose ``canonical`` bytes are ``raw``."""
        hasher = self._hasher.copy()
        hasher.update(raw + b"]")
        return hasher.digest()


def make_key(
    namespace: str, fingerprint: str | Mapping[str, Any] | None, scope: Any, inputs: Any
) -> bytes:
    """The 16-byte key of one call; see the module docstring for the format.

    Raises:
        TypeError: an input cannot be encoded.
    """
    return KeyBuilder(namespace, fingerprint).key(inputs, scope)


# Inputs encoding to at most this many bytes have their keys remembered by those bytes
# (``RecentKeys``); past it, hashing the bytes to look them up costs about what hashing
# them into the key does, and larger inputs are remembered by value instead.
KEY_BYTES = 256
# How many recent keys ``RecentKeys`` remembers of each kind; the oldest goes first.
RECENT_KEYS = 512
# The most bytes the inputs remembered by value hold together (strings are the caller's
# own objects, kept alive by the memory), and the most one input may hold to be remembered.
RECENT_INPUT_BYTES = 8 * 1024 * 1024
RECENT_INPUT_MAX = 256 * 1024
# After an input that encodes large, this many calls look up by value first; after one
# that cannot be remembered by value, this many calls skip the memory altogether.
PROBE_EVERY = 64
# Remembered by value: at most this many items in all the input's containers together.
_FROZEN_ITEMS = 64


class _Unfrozen(Exception):
    """The input holds something ``_freeze_dict`` does not take (or too many items)."""


# Markers in a frozen input: each equal only to itself, so no user value can pose as one.
_LIST, _DICT, _FLOAT, _TRUE, _FALSE = (object() for _ in range(5))


def _freeze(obj: Any, budget: list[int]) -> Any:
    cls = type(obj)
    if cls is str or cls is int or obj is None:
        return obj
    if cls is bool:
        return _TRUE if obj else _FALSE  # True == 1: a marker keeps them apart
    if cls is float:
        return (_FLOAT, obj.hex())  # 1.0 == 1 and 0.0 == -0.0: the bits keep them apart
    if cls is list or cls is tuple:
        budget[0] -= len(obj)
        if budget[0] < 0:
            raise _Unfrozen
        for item in obj:
            if type(item) is not str:
                return (_LIST, *[_freeze(item, budget) for item in obj])
        return (_LIST, *obj)  # strings only (a prompt's pieces): as they are
    if cls is dict:
        budget[0] -= len(obj)
        if budget[0] < 0:
            raise _Unfrozen
        return _freeze_dict(obj, budget)
    raise _Unfrozen


def _freeze_dict(obj: dict[Any, Any], budget: list[int]) -> tuple[Any, ...]:
    """A hashable value equal for two inputs only when they key alike.

    Built at call time from exact ``str``, ``int``, ``float``, ``bool`` and
    ``None`` leaves in lists, tuples and dicts with string keys: a list
    changed after the call makes another value. Strings are held as they are
    (immutable), so comparing a caller's same string object again reads none
    of its characters, and its hash is cached on it.

    Raises:
        _Unfrozen: anything else, or more items in all than ``budget`` holds.
    """
    parts: list[Any] = [_DICT]
    for name, value in obj.items():
        if type(name) is not str:
            raise _Unfrozen
        cls = type(value)
        if cls is str or cls is int or value is None:  # a leaf as it is, without a call
            parts.append(name)
            parts.append(value)
        elif cls is list:
            # _freeze's list, without its call for a list of strings (a prompt's questions).
            for item in value:
                if type(item) is not str:
                    parts += (name, _freeze(value, budget))
                    break
            else:
                budget[0] -= len(value)
                if budget[0] < 0:
                    raise _Unfrozen
                parts.append(name)
                parts.append((_LIST, *value))
        else:
            parts += (name, _freeze(value, budget))
    return tuple(parts)


def _frozen_bytes(value: Any) -> int:
    """Bytes a frozen input holds: its tuples, strings and numbers (markers are shared)."""
    total = sys.getsizeof(value)
    if type(value) is tuple:
        for item in value:
            if type(item) is not object:
                total += _frozen_bytes(item)
    return total


class RecentKeys:
    """``KeyBuilder.key`` for unscoped inputs, with the keys of recent inputs remembered.

    Small inputs are remembered by orjson's plain bytes of the inputs, looked
    up before anything else, and kept only when those bytes are the inputs'
    canonical bytes (they hold no ``null``, so no ``None`` can be a NaN:
    ``keys.canonical``'s rule); so an input found here keys exactly as
    ``KeyBuilder.key`` keys it. Large ones (a long prompt) are remembered by
    value (``_freeze_dict``): a repeated prompt then costs neither its encoding nor
    its hash, and what is remembered is bounded in the bytes it holds. A
    function whose inputs can be remembered neither way skips the lookup
    (probing again now and then), so it pays for no second encoding.

    Several threads may share it: lookups are single dict reads, and what
    changes the memories takes a lock.

    Args:
        builder: builds the keys.
    """

    __slots__ = ("_builder", "_by_value", "_held", "_known", "_large", "_lock", "_skip")

    def __init__(self, builder: KeyBuilder) -> None:
        self._builder = builder
        self._known: dict[bytes, bytes] = {}
        self._by_value: dict[tuple[Any, ...], tuple[bytes, int]] = {}
        self._held = 0  # bytes the inputs in _by_value hold
        self._skip = 0
        self._large = 0
        self._lock = threading.Lock()

    def key(self, inputs: Any) -> bytes:
        """The key of ``inputs`` (unscoped), as ``KeyBuilder.key`` gives it.

        Raises:
            TypeError: an input cannot be encoded.
        """
        # "> 0": threads sharing the countdowns may take one below zero.
        if self._large > 0:
            self._large -= 1
        else:
            if self._skip > 0:
                self._skip -= 1
                return self._builder.key(inputs)
            try:
                raw = _dumps(inputs, default=refuse, option=PLAIN_OPTIONS)
            except orjson.JSONEncodeError:
                return self._builder.key(inputs)  # tagged: the careful walk
            if len(raw) <= KEY_BYTES:
                known = self._known
                key = known.get(raw)
                if key is None:
                    exact = canonical(inputs)
                    key = self._builder.digest(exact)  # KeyBuilder.key, unscoped
                    if exact == raw and raw.find(b"null") < 0:
                        with self._lock:
                            while len(known) >= RECENT_KEYS:
                                del known[next(iter(known))]
                            # A copy: orjson's own bytes keep the spare room of its buffer.
                            known[bytes(memoryview(raw))] = key
                return key
            self._large = PROBE_EVERY
        # A large input (a long prompt), looked up by value: frozen here, not in a function
        # of its own, as this is every call's path for such an input.
        value = None
        if type(inputs) is dict:
            try:
                value = _freeze_dict(inputs, [_FROZEN_ITEMS - len(inputs)])
            except _Unfrozen:
                pass
        if value is None:
            self._large, self._skip = 0, PROBE_EVERY
            return self._builder.key(inputs)
        remembered = self._by_value.get(value)
        if remembered is not None:
            return remembered[0]
        return self._remember(inputs, value)

    def _remember(self, inputs: Any, value: tuple[Any, ...]) -> bytes:
        """The key of a large input not remembered yet (``value``: it frozen), remembered."""
        key = self._builder.key(inputs)
        held = _frozen_bytes(value)
        if held <= RECENT_INPUT_MAX:
            with self._lock:
                by_value = self._by_value
                while by_value and (
                    len(by_value) >= RECENT_KEYS or self._held + held > RECENT_INPUT_BYTES
                ):
                    self._held -= by_value.pop(next(iter(by_value)))[1]
                if value not in by_value:
                    by_value[value] = (key, held)
                    self._held += held
        return key
