"""The typed round trip: rebuild a stored result into the type the function declares.

A stored decision is JSON (``asyncache.codec``): a dataclass comes back from
the store as a dict, a tuple as a list, an enum as its value. ``rebuilder``
reads a function's return annotation once, at decoration time, and returns a
function that turns what the store gave back into the declared type again, so
a miss, a hit and a disabled cache hand their callers equal values of the same
types. It returns ``None`` when the decoded JSON already has the declared type
(``str``, ``float``, ``dict[str, float]``, ``list[int]``, NumPy arrays,
``bytes``...): plain results pay nothing on a hit.

A rebuilder is idempotent: a value that already has its type (a disabled
cache's result, a result too large to store) is returned as it is.

The annotation, not a type tag in the envelope, says what to rebuild: a
store never names a class for its readers to import (a shared store must not
choose the code its readers run), entries stay valid across renames and
refactors, and the type a caller gets is the type its type checker saw.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import datetime
import enum
import inspect
import sys
import types
import typing
import uuid
from collections.abc import Callable, Mapping, MutableMapping, MutableSequence, Sequence
from typing import Any

__all__ = ["Rebuild", "caller_names", "chunk_type", "rebuild_each", "rebuilder", "streams"]

Rebuild = Callable[[Any], Any]

_ABSENT = object()
# Types whose decoded JSON (with the codec's tags) already is the value.
_PLAIN: set[Any] = {
    Any,
    object,
    str,
    int,
    float,
    bool,
    bytes,
    type(None),
    None,
    dict,
    list,
}
_LISTS = {list, Sequence, MutableSequence, typing.Sequence, typing.MutableSequence}
_MAPPINGS = {dict, Mapping, MutableMapping, typing.Mapping, typing.MutableMapping}
_TIMES: dict[type, Callable[[str], Any]] = {
    datetime.datetime: datetime.datetime.fromisoformat,
    datetime.date: datetime.date.fromisoformat,
    datetime.time: datetime.time.fromisoformat,
    uuid.UUID: uuid.UUID,
}


class _Context:
    """Where the annotations are resolved, and the types being built (recursive ones)."""

    def __init__(self, where: str, localns: Mapping[str, Any] | None) -> None:
        self.where = where
        self.localns = dict(localns or {})
        self.building: dict[Any, list[Rebuild | None]] = {}
        # At decoration a name may not be defined yet (a class further down the module).
        self.lazy = True

    def hints(self, owner: Any) -> dict[str, Any]:
        # A failure names the class, or the function's return annotation as written.
        named = owner if isinstance(owner, type) else owner.__annotations__.get("return")
        try:
            return typing.get_type_hints(owner, localns=self.localns)
        except NameError as exc:
            if self.lazy:
                raise _NotYet from None  # defined later in the module: resolved on first use
            why = f"{exc}; import it at run time, not only under TYPE_CHECKING"
            raise self.refuse(named, why) from None
        except Exception as exc:
            raise self.refuse(named, f"its annotations cannot be resolved ({exc})") from None

    def refuse(self, tp: Any, why: str) -> TypeError:
        name = tp if isinstance(tp, str) else getattr(tp, "__qualname__", None) or repr(tp)
        return TypeError(
            f"{self.where} is annotated to return {name}, which asyncache cannot rebuild "
            f"from a stored decision: {why}. Pass encode= (the result to plain JSON) and "
            f"decode= (plain JSON back to the result) to cached_prediction, or annotate "
            f"a type it can rebuild (see the decorator docs, 'Typed results')"
        )


def rebuilder(
    fn: Callable[..., Any],
    *,
    item: bool = False,
    chunk: bool = False,
    localns: Mapping[str, Any] | None = None,
) -> Rebuild | None:
    """The rebuild of ``fn``'s return annotation, or ``None`` when none is needed.

    Args:
        fn: the decorated function.
        item: the function returns a list of results (``batch=True``): rebuild
            its element type.
        chunk: the function streams its result (``AsyncIterator[T]``,
            ``AsyncGenerator[T, None]``): rebuild each chunk, a ``T``.
        localns: names the annotations may use besides the function's globals
            (the scope the function was decorated in).

    Raises:
        TypeError: the annotation names a type whose stored form cannot be
            rebuilt (a set, a ``Decimal``, a plain class, an ambiguous union).
    """
    where = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    context = _Context(where, localns)
    target = fn if hasattr(fn, "__annotations__") else type(fn).__call__
    if "return" not in getattr(target, "__annotations__", {}):
        return None
    try:
        return _resolve(target, item, context, chunk)
    except _NotYet:
        return _later(target, item, context, chunk)


class _NotYet(Exception):
    """An annotation names what is not defined yet."""


def _later(target: Callable[..., Any], item: bool, context: _Context, chunk: bool) -> Rebuild:
    """A rebuild that resolves the annotation on its first use (a forward reference)."""
    resolved: list[Rebuild | None] = []

    def rebuild(value: Any) -> Any:
        if not resolved:
            context.lazy = False
            context.building.clear()
            resolved.append(_resolve(target, item, context, chunk))
        chosen = resolved[0]
        return value if chosen is None else chosen(value)

    return rebuild


def _resolve(
    target: Callable[..., Any], item: bool, context: _Context, chunk: bool = False
) -> Rebuild | None:
    returned = context.hints(target).get("return", Any)
    if chunk:
        returned = chunk_type(returned)
    if item:
        origin = typing.get_origin(returned)
        if origin not in _LISTS:
            return None  # a batch function annotated loosely: its items are what they are
        (returned,) = typing.get_args(returned) or (Any,)
    return _build(returned, context)


_STREAMS = {
    collections.abc.AsyncIterator,
    collections.abc.AsyncIterable,
    collections.abc.AsyncGenerator,
}


def chunk_type(returned: Any) -> Any:
    """The chunk type of a streamed result's annotation (``AsyncIterator[T]`` gives ``T``);
    ``Any`` when the annotation does not say."""
    if typing.get_origin(returned) in _STREAMS:
        args = typing.get_args(returned)
        if args:
            return args[0]
    return Any


def streams(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` streams its result: an async generator function, or an async
    function annotated to return an ``AsyncIterator`` (awaited, it gives the stream)."""
    if inspect.isasyncgenfunction(fn):
        return True
    if not inspect.iscoroutinefunction(fn):
        return False
    returned = getattr(fn, "__annotations__", {}).get("return")
    if isinstance(returned, str):
        # Not resolved yet (``from __future__ import annotations``): the name says enough.
        return returned.split("[", 1)[0].rsplit(".", 1)[-1] in {
            "AsyncIterator",
            "AsyncIterable",
            "AsyncGenerator",
        }
    return typing.get_origin(returned) in _STREAMS or returned in _STREAMS


def _build(tp: Any, context: _Context) -> Rebuild | None:
    if tp in _PLAIN or isinstance(tp, typing.TypeVar):
        return None
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _build(typing.get_args(tp)[0], context)
    if origin is typing.Literal:
        return None
    if origin is typing.Union or origin is types.UnionType:
        return _union(tp, context)
    if origin is not None:
        return _generic(tp, origin, context)
    if isinstance(tp, typing.NewType):
        return _build(tp.__supertype__, context)
    if not isinstance(tp, type):
        raise context.refuse(tp, "it is not a class")
    known = context.building.get(tp)
    if known is not None:
        # A recursive type: its rebuild is being made; look it up when called.
        return lambda value: _late(known, value)
    cell: list[Rebuild | None] = [None]
    context.building[tp] = cell
    built = _class(tp, context)
    cell[0] = built
    return built


def _late(cell: list[Rebuild | None], value: Any) -> Any:
    rebuild = cell[0]
    return value if rebuild is None else rebuild(value)


def _union(tp: Any, context: _Context) -> Rebuild | None:
    members = [member for member in typing.get_args(tp) if member is not type(None)]
    built = [(member, _build(member, context)) for member in members]
    needed = [(member, rebuild) for member, rebuild in built if rebuild is not None]
    if not needed:
        return None
    if len(needed) > 1:
        names = " | ".join(getattr(member, "__qualname__", repr(member)) for member, _ in needed)
        raise context.refuse(tp, f"the stored JSON cannot say which of {names} it was")
    rebuild = needed[0][1]
    assert rebuild is not None
    plain = tuple(m for m, r in built if r is None and isinstance(m, type))

    def either(value: Any) -> Any:
        if value is None or (plain and type(value) in plain):
            return value
        return rebuild(value)

    return either


def _generic(tp: Any, origin: Any, context: _Context) -> Rebuild | None:
    args = typing.get_args(tp)
    if origin in _LISTS:
        inner = _build(args[0], context) if args else None
        return None if inner is None else _list_of(inner)
    if origin is tuple:
        if not args or (len(args) == 2 and args[1] is Ellipsis):
            each = _build(args[0], context) if args else None
            return tuple if each is None else _tuple_of(each)
        if args == ((),):
            return tuple
        parts = [_build(arg, context) for arg in args]
        return lambda value: tuple(
            item if part is None else part(item) for part, item in zip(parts, value, strict=False)
        )
    if origin in _MAPPINGS:
        key, item = args if args else (str, Any)
        if key not in (str, Any):
            raise context.refuse(tp, "stored mappings have string keys only")
        inner = _build(item, context)
        return None if inner is None else _dict_of(inner)
    if isinstance(origin, type):  # a generic dataclass or model, NDArray[...], set[int]
        return _class(origin, context)
    raise context.refuse(tp, f"{origin!r} has no stored form to rebuild it from")


def _list_of(inner: Rebuild) -> Rebuild:
    return lambda value: [inner(item) for item in value]


def _tuple_of(inner: Rebuild) -> Rebuild:
    return lambda value: tuple(inner(item) for item in value)


def _dict_of(inner: Rebuild) -> Rebuild:
    return lambda value: {name: inner(each) for name, each in value.items()}


def _class(tp: type, context: _Context) -> Rebuild | None:
    if tp.__module__ == "numpy" or (tp.__module__.startswith("numpy.") and hasattr(tp, "dtype")):
        return None  # arrays and scalars travel tagged, with dtype and shape
    if issubclass(tp, enum.Enum):
        return lambda value: value if isinstance(value, tp) else tp(value)
    parse = _TIMES.get(tp)
    if parse is not None:
        return lambda value: value if isinstance(value, tp) else parse(value)
    if issubclass(tp, tuple) and hasattr(tp, "_fields"):
        return _named_tuple(tp, context)
    if dataclasses.is_dataclass(tp):
        return _dataclass(tp, context)
    if _is_model(tp):
        validate = getattr(tp, "model_validate")  # noqa: B009 (pydantic, not imported)
        return lambda value: value if isinstance(value, tp) else validate(value)
    if typing.is_typeddict(tp):
        fields = {name: _build(hint, context) for name, hint in context.hints(tp).items()}
        needed = {name: rebuild for name, rebuild in fields.items() if rebuild is not None}
        if not needed:
            return None
        return lambda value: _fill(dict(value), needed)
    if tp is tuple:
        return tuple
    raise context.refuse(tp, "it is neither plain JSON nor a type with a known stored form")


def _fill(value: dict[str, Any], needed: Mapping[str, Rebuild]) -> dict[str, Any]:
    for name, rebuild in needed.items():
        if name in value:
            value[name] = rebuild(value[name])
    return value


def _named_tuple(tp: type, context: _Context) -> Rebuild:
    hints = context.hints(tp)
    parts = [_build(hints.get(name, Any), context) for name in tp._fields]  # type: ignore[attr-defined]

    def rebuild(value: Any) -> Any:
        if type(value) is tp:
            return value
        return tp(*(v if p is None else p(v) for p, v in zip(parts, value, strict=False)))

    return rebuild


def _dataclass(tp: type, context: _Context) -> Rebuild:
    fields = dataclasses.fields(tp)
    if any(not field.init for field in fields):
        late = [field.name for field in fields if not field.init]
        raise context.refuse(tp, f"its fields {late} are not arguments of its __init__")
    hints = context.hints(tp)
    parts = {field.name: _build(hints.get(field.name, Any), context) for field in fields}

    def rebuild(value: Any) -> Any:
        if type(value) is tp:
            return value
        arguments = {}
        for name, each in value.items():
            part = parts.get(name)
            arguments[name] = each if part is None else part(each)
        return tp(**arguments)

    return rebuild


def _is_model(tp: type) -> bool:
    """A pydantic model (duck-typed: the core never imports pydantic)."""
    return hasattr(tp, "model_validate") and hasattr(tp, "model_fields")


def rebuild_each(
    rebuild: Rebuild, keys: Sequence[bytes], values: Sequence[Any]
) -> tuple[list[Any], dict[bytes, Exception]]:
    """Each value rebuilt, and the keys whose value does not fit (with why)."""
    rebuilt: list[Any] = []
    stale: dict[bytes, Exception] = {}
    for key, value in zip(keys, values, strict=True):
        try:
            rebuilt.append(rebuild(value))
        except Exception as exc:
            stale[key] = exc
            rebuilt.append(value)
    return rebuilt, stale


def caller_names(depth: int = 2) -> Mapping[str, Any]:
    """The local names of the scope that decorates: classes a test defines beside its function."""
    try:
        return sys._getframe(depth).f_locals
    except ValueError:
        return {}
