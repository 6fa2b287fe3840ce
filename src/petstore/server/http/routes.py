"""Routes: a path template and what answers each of its methods.

The table itself is in :func:`petstore.server.app.create_app`; :class:`Router` finds a
request's route. Templates are exact paths, or end in one ``{name}`` segment (any
text without ``/``), or in ``{name:path}`` (the rest of the path). Matching is a
dict lookup for exact paths and a prefix test for the few others: the operations
run thousands of times a second, and a general router costs more than they do.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from petstore.server.http.exchange import Request, Response

#: What answers a request: called with the request and the answer being built.
Handler = Callable[[Request, Response], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Operation:
    """A handler that implements an operation of the interface, named by its
    ``operationId`` (``listPets``), which labels its metrics."""

    operation_id: str
    handler: Handler


class Route:
    """``template`` answered by one handler per method (``GET=...``, ``POST=...``).

    ``HEAD`` is answered by the ``GET`` handler (the server sends no body).
    ``allow`` is the ``Allow`` header of a 405 on this path (RFC 9110 section 15.5.6).
    """

    def __init__(self, template: str, **methods: Handler | Operation) -> None:
        self.template = template
        if "GET" in methods:
            methods["HEAD"] = methods["GET"]
        #: method -> (handler, metrics label: the operation id, or else the template)
        self.methods: dict[str, tuple[Handler, str]] = {
            method: (answer.handler, answer.operation_id)
            if isinstance(answer, Operation)
            else (answer, template)
            for method, answer in methods.items()
        }
        self.allow = ", ".join(self.methods)


class Router:
    """Finds the route of a path among ``routes``."""

    def __init__(self, routes: list[Route]) -> None:
        self.routes = routes
        self._exact: dict[str, Route] = {}
        self._prefixed: list[tuple[str, bool, Route]] = []  # prefix, takes the rest, route
        for route in routes:
            template = route.template
            if "{" not in template:
                self._exact[template] = route
            else:
                prefix, _, name = template.partition("{")
                self._prefixed.append((prefix, name.endswith(":path}"), route))

    def operations(self) -> list[tuple[str, str, str]]:
        """``(operationId, method, template)`` of every operation of the interface
        among the routes, in table order (``HEAD`` aside: it is ``GET``'s)."""
        return [
            (label, method, route.template)
            for route in self.routes
            for method, (_, label) in route.methods.items()
            if method != "HEAD" and label != route.template
        ]

    def match(self, path: str) -> tuple[Route, str] | None:
        """The route of ``path`` and the value of its template's ``{...}`` part
        (empty for an exact path), or None when no route has this path."""
        route = self._exact.get(path)
        if route is not None:
            return route, ""
        for prefix, rest_of_path, route in self._prefixed:
            if path.startswith(prefix) and len(path) > len(prefix):
                value = path[len(prefix) :]
                if rest_of_path or "/" not in value:
                    return route, value
        return None
