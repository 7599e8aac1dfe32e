"""What a computation runs: a model call with its arguments, detachable for a refresh.

A miss computes while its caller awaits, so it may read the caller's
arguments as they are. A stale-while-revalidate refresh runs after the call
that started it returned: a caller that reuses its list (``labels.clear();
labels.extend(...)``) would have the refresh compute another input and store
that answer under the old key. So a refresh computes with a snapshot of the
inputs taken when the stale answer is served (``detached``): the mutable
containers and arrays the call was given are copied, everything else (a
model, ``self``, a client) is passed as it is.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

__all__ = ["Call", "ItemsCall", "detached", "snapshot"]

_ATOMS = frozenset({str, bytes, int, float, bool, complex, type(None)})


def snapshot(value: Any) -> Any:
    """``value`` as it is now, independent of later changes to what the caller holds.

    Builtin containers are copied all the way down; arrays and tensors are
    copied (``copy``/``clone``), pydantic models deep-copied, dataclasses field
    by field; anything else is shared (it is not data the caller refills).
    """
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is list:
        return [snapshot(item) for item in value]
    if kind is tuple:
        return tuple(snapshot(item) for item in value)
    if kind is dict:
        return {name: snapshot(item) for name, item in value.items()}
    if kind is set:
        return set(value)
    if kind is bytearray:
        return bytearray(value)
    try:
        if hasattr(value, "__array__"):
            clone = getattr(value, "clone", None)  # a torch tensor
            if callable(clone):
                return clone()
            duplicate = getattr(value, "copy", None)  # a NumPy array
            if callable(duplicate):
                return duplicate()
        model_copy = getattr(value, "model_copy", None)  # a pydantic model
        if callable(model_copy):
            return model_copy(deep=True)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            # Field by field: a dataclass may hold what is not data (a model, a client).
            clone = copy.copy(value)
            for item in dataclasses.fields(value):
                object.__setattr__(clone, item.name, snapshot(getattr(value, item.name)))
            return clone
        if isinstance(value, list | dict | set):
            return copy.deepcopy(value)
    except Exception:
        return value  # what cannot be copied is computed as it is
    return value


class Call:
    """``fn(*args, **kwargs)``, called later: a single call's computation."""

    __slots__ = ("args", "fn", "kwargs")

    def __init__(self, fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs

    def __call__(self) -> Any:
        return self.fn(*self.args, **self.kwargs)

    def detached(self) -> Call:
        """The same call on a snapshot of its arguments."""
        return Call(self.fn, snapshot(tuple(self.args)), snapshot(self.kwargs))


class ItemsCall:
    """``fn([items[i] for i in indices])``: a batch's computation of some of its items."""

    __slots__ = ("fn", "items")

    def __init__(self, fn: Callable[[list[Any]], Awaitable[Any]], items: Sequence[Any]) -> None:
        self.fn = fn
        self.items = items

    def __call__(self, indices: list[int]) -> Awaitable[Any]:
        items = self.items
        return self.fn([items[index] for index in indices])

    def detached(self) -> ItemsCall:
        """The same computation on a snapshot of the items."""
        return ItemsCall(self.fn, snapshot(list(self.items)))


def detached(compute: Any) -> Any:
    """``compute`` on a snapshot of its inputs, when it can say what they are."""
    detach = getattr(compute, "detached", None)
    return compute if detach is None else detach()
