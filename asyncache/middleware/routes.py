"""Which request paths the middleware caches, and the route each one keys under.

A route is an exact path (``"/predict"``), a template in Starlette's syntax
(``"/models/{name}/predict"``, ``"/files/{rest:path}"``) or a compiled regular
expression that must match the whole path. The matched route, not the path, is
the namespace of the key; the path itself is part of the key's inputs, so
``/models/a/predict`` and ``/models/b/predict`` never share an entry.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["ANY_ROUTE", "Route", "RouteTable"]

Route = str | re.Pattern[str]

# The namespace of every path when no routes are configured.
ANY_ROUTE = "*"

_CONVERTORS = {
    "str": "[^/]+",
    "path": ".*",
    "int": "[0-9]+",
    "float": r"[0-9]+(?:\.[0-9]+)?",
    "uuid": "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
}
_PARAM = re.compile(r"{([a-zA-Z_][a-zA-Z0-9_]*)(?::([a-zA-Z_][a-zA-Z0-9_]*))?}")


def compile_template(template: str) -> re.Pattern[str]:
    """The regular expression for a Starlette-style path template.

    Raises:
        ValueError: the template names an unknown convertor.
    """
    parts: list[str] = []
    end = 0
    for match in _PARAM.finditer(template):
        parts.append(re.escape(template[end : match.start()]))
        convertor = match.group(2) or "str"
        if convertor not in _CONVERTORS:
            raise ValueError(
                f"unknown convertor {convertor!r} in route {template!r}; "
                f"use one of {sorted(_CONVERTORS)}"
            )
        parts.append(_CONVERTORS[convertor])
        end = match.end()
    parts.append(re.escape(template[end:]))
    return re.compile("".join(parts))


class RouteTable:
    """Matches a request path to its configured route.

    Args:
        routes: exact paths, templates or compiled patterns; ``None`` matches
            every path under the namespace ``"*"``.

    Attributes:
        exact: each exact path, to itself: what ``match`` looks up first (the
            middleware's hit path looks it up itself, saving the call).
        matches_all: no routes were given; every path is ``ANY_ROUTE``.

    Raises:
        ValueError: a route does not start with ``/`` or ``routes`` is empty.
        TypeError: a route is neither a string nor a compiled pattern.
    """

    __slots__ = ("_patterns", "exact", "matches_all")

    def __init__(self, routes: Iterable[Route] | None) -> None:
        self.matches_all = routes is None
        self.exact: dict[str, str] = {}
        self._patterns: list[tuple[re.Pattern[str], str]] = []
        for route in routes or ():
            if isinstance(route, re.Pattern):
                self._patterns.append((route, route.pattern))
            elif isinstance(route, str):
                if not route.startswith("/"):
                    raise ValueError(f"a route must start with '/': {route!r}")
                if "{" in route:
                    self._patterns.append((compile_template(route), route))
                else:
                    self.exact[route] = route
            else:
                raise TypeError(
                    f"a route is a path, a template or a re.Pattern, not {type(route).__name__}"
                )
        if not self.matches_all and not (self.exact or self._patterns):
            raise ValueError("routes names no route; pass routes=None to cache every path")

    @property
    def names(self) -> list[str]:
        """Every route's name: its path, its template or its pattern's source."""
        if self.matches_all:
            return [ANY_ROUTE]
        return [*self.exact, *(name for _, name in self._patterns)]

    def match(self, path: str) -> str | None:
        """The route ``path`` falls under, or ``None`` when it is not cached."""
        if self.matches_all:
            return ANY_ROUTE
        route = self.exact.get(path)
        if route is not None:
            return route
        for pattern, name in self._patterns:
            if pattern.fullmatch(path) is not None:
                return name
        return None
