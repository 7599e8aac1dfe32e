"""The argument types the key tests feed ``make_key``, declared once.

The key holds a class's ``__qualname__`` and not its module, so these keep the
keys pinned in ``tests/golden/keys.json`` wherever they are declared.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any

import pydantic


@dataclasses.dataclass(frozen=True)
class Point:
    """A dataclass input: keys on its class and fields. Frozen, so sets and dicts may hold it."""

    x: Any
    y: Any


class Color(enum.Enum):
    """A plain enum: keys as its value, whatever type the value has."""

    RED = "red"
    NONE = None
    NAN = math.nan
    BYTES = b"x"
    PAIR = (1, 2)
    NUL = "\x00c"  # a value that looks like one of the key's own type tags


class Mode(str, enum.Enum):  # noqa: UP042 - the mixin form: its str() is not its value
    """A str-mixin enum: keys as its value, not as its ``str()``."""

    FAST = "fast"


class Level(enum.IntEnum):
    """An int enum: keys as its value."""

    HIGH = 3


class Query(pydantic.BaseModel):
    """A pydantic model: keys on its ``model_dump()``."""

    text: str
    top_k: int = 5
