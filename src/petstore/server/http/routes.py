"""Routes: a path template and what answers each of its methods, and what each
operation of the interface is (:class:`Operation`).

The table itself is listed in :func:`petstore.server.app.create_app`, the operations'
routes in :meth:`.operations.PetsApi.routes`; :class:`Router` finds a request's
route. Templates are exact paths, or end in one ``{name}`` segment (any
text without ``/``), or in ``{name:path}`` (the rest of the path). Matching is a
dict lookup for exact paths and a prefix test for the few others: the operations
run thousands of times a second, and a general router costs more than they do.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from petstore.schemas import NewPet
from petstore.server.http import newpet
from petstore.server.http.deprecation import Deprecation
from petstore.server.http.exchange import Request, Response

#: What answers a request that is no operation of the interface (the documents, the
#: health checks): called with the request and the answer being built.
Handler = Callable[[Request, Response], Awaitable[None]]
#: What implements an operation, called by the pipeline once it has admitted the
#: caller (:class:`Operation`) with the request, the answer being built, the request
#: body decoded into the operation's ``body`` struct (None when it takes none) and the
#: request's Idempotency-Key (None when none was sent, or the operation takes none).
OperationHandler = Callable[[Request, Response, Any, str | None], Awaitable[None]]

#: How the body of each body struct an operation may take is decoded: bytes to the
#: struct, or InvalidRequest (400) saying what is wrong.
BODY_DECODERS: dict[type[msgspec.Struct], Callable[[bytes], msgspec.Struct]] = {
    NewPet: newpet.parse_new_pet,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Operation:
    """An operation of the interface, declared once: what the OpenAPI document says of
    it (``tests/server/http/test_operations.py`` holds the two together), and what the
    pipeline does before its ``handler`` runs.

    - ``operation_id`` names it (``listPets``) and labels its metrics;
    - ``scope`` is the key scope a caller needs (``keys.READ``, ``keys.WRITE``; D21):
      the pipeline admits the caller for it (``rules.admission``) before anything else;
    - ``body`` is the struct its request body is decoded into (``NewPet``), None for an
      operation without one: the pipeline checks the ``Content-Type`` (415), reads the
      body (D17) and decodes it with the struct's :data:`BODY_DECODERS` entry;
    - ``status`` is the status of its success;
    - ``idempotent``: it takes an ``Idempotency-Key``, which makes a retry of it safe
      (D16); the pipeline reads the key after the ``Content-Type`` and before the
      body. (An operation whose method is idempotent needs none.)
    - ``deprecated`` is its deprecation (D14), None while it is current: the pipeline
      puts the deprecation's headers on every answer and answers 410 from its sunset.
    """

    operation_id: str
    handler: OperationHandler
    scope: str
    status: int
    body: type[msgspec.Struct] | None = None
    idempotent: bool = False
    deprecated: Deprecation | None = None
    #: The decoder of ``body`` (:data:`BODY_DECODERS`), None without a body.
    decode: Callable[[bytes], msgspec.Struct] | None = field(init=False)

    def __post_init__(self) -> None:
        """Find the decoder of ``body``; raise KeyError when it has none."""
        decode = None if self.body is None else BODY_DECODERS[self.body]
        object.__setattr__(self, "decode", decode)


class Route:
    """``template`` answered by one handler or operation per method (``GET=...``,
    ``POST=...``).

    ``HEAD`` is answered as ``GET`` (the server sends no body). ``allow`` is the
    ``Allow`` header of a 405 on this path (RFC 9110 section 15.5.6); ``labels`` the
    metrics label of each method: its operation's id, or else the template.
    """

    def __init__(self, template: str, **methods: Handler | Operation) -> None:
        self.template = template
        if "GET" in methods:
            methods["HEAD"] = methods["GET"]
        self.methods = methods
        self.labels = {
            method: answer.operation_id if isinstance(answer, Operation) else template
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

    def operations(self) -> list[tuple[str, str, Operation]]:
        """``(method, template, operation)`` of every operation of the interface among
        the routes, in table order (``HEAD`` aside: it is ``GET``'s)."""
        return [
            (method, route.template, answer)
            for route in self.routes
            for method, answer in route.methods.items()
            if method != "HEAD" and isinstance(answer, Operation)
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
