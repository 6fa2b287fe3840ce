"""Reading a request, the first step of every one (:func:`read_request`): what the
pipeline and the handlers know of it, read once into an immutable
:class:`.exchange.Request`."""

from __future__ import annotations

import re
from random import getrandbits

from starlette.types import Receive, Scope

from petstore.server.http.exchange import Request
from petstore.server.http.routes import Route, Router
from petstore.server.telemetry import tracing
from petstore.server.telemetry.escapes import escape_controls

#: A client's X-Request-ID is kept when it is 1-128 of these characters.
SANE_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:@/+=-]{1,128}")


def read_request(
    scope: Scope, receive: Receive, router: Router, *, trust_forwarded: bool
) -> tuple[Request, Route | None]:
    """The :class:`Request` of the ASGI HTTP ``scope`` and ``receive``, and the route
    of ``router`` that answers it (None for an unknown path).

    Its request id is the client's ``X-Request-ID`` when it matches
    :data:`SANE_REQUEST_ID`, else 32 new random hex digits; its trace id is the one
    of a valid ``traceparent`` (W3C Trace Context, D23), else None. With
    ``trust_forwarded``, its client address and scheme are those of the load
    balancer's ``X-Forwarded-For`` (its first address, control characters escaped
    for the log; port 0) and ``X-Forwarded-Proto`` (``http`` or ``https``), the last
    of each header: the one the nearest proxy added.
    """
    raw_headers = scope["headers"]
    headers = dict(reversed(raw_headers))  # the first of repeated headers wins
    raw_request_id = headers.get(b"x-request-id")
    if raw_request_id is not None and SANE_REQUEST_ID.fullmatch(raw_request_id):
        request_id = raw_request_id.decode()
    else:
        # Unique, not secret (a client may choose its own): the process's seeded
        # generator (reseeded in each forked worker), not os.urandom's system call.
        request_id = getrandbits(128).to_bytes(16).hex()
    traceparent = headers.get(b"traceparent")
    scheme, client = scope["scheme"], scope.get("client")
    if trust_forwarded:
        for name, value in raw_headers:
            if name == b"x-forwarded-proto" and value in (b"http", b"https"):
                scheme = value.decode()
            elif name == b"x-forwarded-for" and value:
                address = value.split(b",")[0].strip().decode("latin-1")
                client = (escape_controls(address), 0)
    path = scope["path"]
    route, path_param = router.match(path) or (None, "")
    request = Request(
        scope["method"],
        path,
        scope["query_string"],
        scheme,
        client,
        headers,
        request_id,
        None if traceparent is None else tracing.trace_id_of(traceparent),
        None if route is None else route.template,
        path_param,
        scope,
        receive,
    )
    return request, route
