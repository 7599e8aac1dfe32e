"""``Unshared``: a computed result that belongs to the caller that asked, and only to it."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

__all__ = ["Unshared", "unwrap"]

T = TypeVar("T")


class Unshared(Generic[T]):
    """A result for its own caller only: not stored and not handed to followers.

    A ``compute`` returns one when what it produced belongs to the request that
    asked (the middleware's response to one client that may not be stored);
    the engine returns ``value`` to that caller, counts it as not admitted, and
    the followers of its flight compute by themselves.
    """

    __slots__ = ("value",)

    def __init__(self, value: T) -> None:
        self.value = value


def unwrap(result: Any) -> Any:
    """The value a compute produced, whether or not it came as ``Unshared``."""
    return result.value if type(result) is Unshared else result
