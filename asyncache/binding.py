"""Binding a call's arguments to the signature: the inputs a cached call is keyed by."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any, Generic, ParamSpec

from .methods import Receiver

__all__ = ["Binder", "dict_maker"]

P = ParamSpec("P")

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def dict_maker(
    names: tuple[str, ...], ignored: Iterable[str], receiver: Receiver | None = None
) -> Callable[..., dict[str, Any]]:
    """``make(*args)``: the inputs of a call that passed every parameter positionally.

    Generated, as dataclasses and namedtuple generate code, because a dict
    display costs half of ``dict(zip(names, args))`` and this runs on every hit.
    The names come from a signature, so they are identifiers.
    """
    params = ", ".join(f"_{index}" for index in range(len(names)))
    items = ", ".join(
        f"{name!r}: _receiver(_{i})" if i == 0 and receiver is not None else f"{name!r}: _{i}"
        for i, name in enumerate(names)
        if name not in ignored
    )
    namespace: dict[str, Any] = {"_receiver": receiver}
    exec(f"def make({params}):\n    return {{{items}}}\n", namespace)
    make: Callable[..., dict[str, Any]] = namespace["make"]
    return make


class Binder(Generic[P]):
    """Binds a call's arguments to the signature with defaults applied.

    ``inspect.Signature.bind`` costs microseconds; a hit should not. For
    signatures without ``*args``/``**kwargs`` the common calls take a fast
    path; anything unusual (and every error) goes through ``bind`` so the
    messages are Python's own.
    """

    def __init__(self, fn: Callable[..., Any], ignore: Iterable[str]) -> None:
        # A method's receiver is keyed by its model's fingerprint (asyncache.methods).
        self.receiver: Receiver | None = None
        self.signature = inspect.signature(fn)
        params = list(self.signature.parameters.values())
        ignored = set(ignore)
        unknown = ignored - {p.name for p in params}
        if unknown:
            raise ValueError(f"ignore names no parameter of {fn.__qualname__}: {sorted(unknown)}")
        self.method = bool(
            params and params[0].name in ("self", "cls") and params[0].kind in _POSITIONAL
        )
        if self.method and params[0].name == "cls":
            ignored.add("cls")  # a class method's class: its fingerprint is the cache's
        elif self.method and "self" not in ignored:
            self.receiver = Receiver(fn.__qualname__)
        self.ignored = tuple(ignored)
        self.simple = all(p.kind in _POSITIONAL or p.kind is p.KEYWORD_ONLY for p in params)
        self.positional = tuple(p.name for p in params if p.kind in _POSITIONAL)
        self.keyword = frozenset(
            p.name for p in params if p.kind is not inspect.Parameter.POSITIONAL_ONLY
        )
        self.defaults = {p.name: p.default for p in params if p.default is not p.empty}
        self.count = len(params)
        # The commonest call passes every parameter positionally: ``make(*args)``.
        every_positional = self.simple and len(self.positional) == self.count
        self.make = (
            dict_maker(self.positional, ignored, self.receiver) if every_positional else None
        )

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        if not kwargs and len(args) == self.count and self.make is not None:
            return self.make(*args)
        if self.simple and len(args) <= len(self.positional):
            inputs = dict(self.defaults)
            inputs.update(zip(self.positional, args, strict=False))
            if kwargs:
                given = self.positional[: len(args)]
                if any(name not in self.keyword or name in given for name in kwargs):
                    return self._slow(args, kwargs)
                inputs.update(kwargs)
            if len(inputs) == self.count:
                for name in self.ignored:
                    del inputs[name]
                if self.receiver is not None:
                    inputs["self"] = self.receiver(inputs["self"])
                return inputs
        return self._slow(args, kwargs)

    def _slow(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        inputs = dict(bound.arguments)
        for name in self.ignored:
            inputs.pop(name, None)
        if self.receiver is not None and "self" in inputs:
            inputs["self"] = self.receiver(inputs["self"])
        return inputs
