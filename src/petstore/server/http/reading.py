"""Reading a request, the first step of every one (:func:`read_request`): what the
pipeline and the handlers know of it, read once into an immutable
:class:`.exchange.Request`."""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Mapping
from random import getrandbits

from starlette.types import Receive, Scope

from petstore.server.http.exchange import Request
from petstore.server.http.routes import Route, Router
from petstore.server.telemetry import tracing
from petstore.server.telemetry.escapes import escape_field

#: A client's X-Request-ID is kept when it is 1-128 of these characters.
SANE_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:@/+=-]{1,128}")
#: Headers that may appear once: the service reads each, and a proxy in front might
#: read another of two than it does. None but ``Transfer-Encoding`` is a list (RFC 9110,
#: section 5.3), and of that one the service accepts a single coding (:data:`CHUNKED`).
SINGLE_HEADERS = (
    b"host",
    b"authorization",
    b"content-type",
    b"idempotency-key",
    b"transfer-encoding",
)
#: The one ``Transfer-Encoding`` a request may carry, in any case of letters (RFC 9112,
#: section 7: coding names are case-insensitive, and HAProxy and granian both read
#: ``Chunked`` as chunked).
CHUNKED = b"chunked"
#: The most of a refused X-Forwarded-For value a warning shows.
_SHOWN_CHARS = 64

log = logging.getLogger("petstore.http")


def read_request(
    scope: Scope, receive: Receive, router: Router, *, trust_forwarded: bool
) -> tuple[Request, Route | None]:
    """The :class:`Request` of the ASGI HTTP ``scope`` and ``receive``, and the route
    of ``router`` that answers it (None for an unknown path).

    Its request id is the client's ``X-Request-ID`` when it matches
    :data:`SANE_REQUEST_ID`, else 32 new random hex digits; its trace id is the one
    of a valid ``traceparent`` (W3C Trace Context, D23), else None. With
    ``trust_forwarded``, its scheme is the last ``X-Forwarded-Proto`` (``http`` or
    ``https``) and its client address the one the nearest proxy added to
    ``X-Forwarded-For`` (:func:`forwarded_client`). It is ``malformed`` as
    :func:`malformed` says.
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
        forwarded_for = None
        for name, value in raw_headers:
            if name == b"x-forwarded-proto" and value in (b"http", b"https"):
                scheme = value.decode()
            elif name == b"x-forwarded-for":
                forwarded_for = value
        if forwarded_for is not None:
            client = forwarded_client(forwarded_for, client, request_id=request_id)
    path = scope["path"]
    route, path_param = router.match(path) or (None, "")
    request = Request(
        method=scope["method"],
        path=path,
        query=scope["query_string"],
        scheme=scheme,
        client=client,
        headers=headers,
        request_id=request_id,
        trace_id=None if traceparent is None else tracing.trace_id_of(traceparent),
        route=None if route is None else route.template,
        path_param=path_param,
        scope=scope,
        receive=receive,
        malformed=malformed(scope, headers),
    )
    return request, route


def malformed(scope: Scope, headers: Mapping[bytes, bytes]) -> str | None:
    """Why the request of ASGI ``scope``, whose headers by name are ``headers``, is
    answered 400 whatever it asks, or None: an HTTP/1.1 request without ``Host`` (or
    with an empty one), any request with one of :data:`SINGLE_HEADERS` more than
    once (RFC 9112, section 3.2: a server must answer 400 to either for ``Host``; of
    two ``Authorization`` or ``Content-Type`` fields, a proxy in front may judge
    another than the service would), or a ``Transfer-Encoding`` other than
    :data:`CHUNKED` alone. HTTP/1.0 may leave out ``Host``; HTTP/2 names the host in
    ``:authority``, which granian hands on as ``Host``.

    The body's framing is granian's to read. Of what it reads as chunked, the service
    refuses all but ``chunked`` alone: a proxy in front may frame ``identity,
    chunked``, ``gzip, chunked`` or a repeated field otherwise (request smuggling, RFC
    9112, section 11.2). granian answers the other framings itself, and reads a bare
    LF as a line end and a ``Transfer-Encoding`` sent with a ``Content-Length`` as
    chunked (closing the connection after), unseen by the service
    (docs/operations/troubleshoot.md)."""
    raw_headers = scope["headers"]
    if len(headers) != len(raw_headers):  # some name is repeated: rare, so looked for only then
        for name in SINGLE_HEADERS:
            if sum(1 for header in raw_headers if header[0] == name) > 1:
                shown = name.decode().title()
                return f"{shown}: the header is sent more than once; send it once"
    coding = headers.get(b"transfer-encoding")  # the only cost to a request without one
    if coding is not None and coding.lower() != CHUNKED:
        return (
            "Transfer-Encoding: the only coding accepted is chunked, alone; "
            "send the body with Transfer-Encoding: chunked or with Content-Length"
        )
    # granian writes an empty Host for a request that sent none.
    if not headers.get(b"host") and scope.get("http_version", "1.1") == "1.1":
        return "Host: an HTTP/1.1 request must name the host (RFC 9112, section 3.2)"
    return None


def forwarded_client(
    forwarded_for: bytes, peer: tuple[str, int] | None, *, request_id: str
) -> tuple[str, int] | None:
    """The client address (port 0) of the last ``X-Forwarded-For`` field,
    ``forwarded_for``: its last element, the one the nearest proxy added (HAProxy's
    ``set-header`` and ``option forwardfor`` write a field of their own; a proxy that
    appends to the field the client sent puts its own element last, so whatever the
    client wrote before it is never read). An IPv4-mapped IPv6 address is its IPv4
    address. Anything but one IP address (a port, a zone, a name, text) is ignored,
    with a warning: the client is then the connection's ``peer``, the proxy."""
    element = forwarded_for.rpartition(b",")[2].strip(b" \t").decode("latin-1")
    try:
        address = ipaddress.ip_address(element)
    except ValueError:
        address = None
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id is not None:
            address = None
        elif address.ipv4_mapped is not None:
            address = address.ipv4_mapped
    if address is None:
        shown = escape_field(element[:_SHOWN_CHARS]) or "(empty)"
        log.warning(
            "X-Forwarded-For ignored: its last element is not an IP address: %s%s",
            shown,
            "..." if len(element) > _SHOWN_CHARS else "",
            extra={"request_id": request_id},
        )
        return peer
    return (str(address), 0)
