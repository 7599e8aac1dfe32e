"""The ASGI shapes the middleware works with (the same as ``starlette.types``).

Declared here so that the middleware runs under any ASGI 3 server and app
without importing a web framework.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, TypeAlias

__all__ = ["ASGIApp", "FixedHeaders", "Headers", "Message", "Receive", "Scope", "Send"]

Scope: TypeAlias = MutableMapping[str, Any]
Message: TypeAlias = MutableMapping[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Message], Awaitable[None]]
ASGIApp: TypeAlias = Callable[[Scope, Receive, Send], Awaitable[None]]
Headers: TypeAlias = list[tuple[bytes, bytes]]
FixedHeaders: TypeAlias = tuple[tuple[bytes, bytes], ...]
"""Headers built once and shared by many responses: a tuple, so that none can change them."""
