"""How ``petstore serve`` listens: which HTTP versions, with what limits
(:func:`http_options`), and whether its settings may be exposed beyond this machine
(:func:`check_exposure`)."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import click

from petstore.server.config import DEFAULT_CURSOR_SECRET, Environment, Settings
from petstore.text import printable

#: D17 on HTTP/2: the largest header list a request may send, in bytes as HTTP/2
#: counts them (RFC 9113, section 6.5.2: each field's name and value plus 32); a
#: larger one is answered 431, a far larger one ends the connection. Far more than
#: any client of this API sends, and small enough that a connection's streams
#: (:data:`HTTP2_MAX_STREAMS`) hold at most 6.4 MiB of headers between them.
HTTP2_MAX_HEADERS_BYTES = 64 * 1024
#: Streams one HTTP/2 connection may have open at once (RFC 9113, section 6.5.2,
#: recommends no fewer than 100).
HTTP2_MAX_STREAMS = 100


def http_options(settings: Settings) -> dict[str, Any]:
    """granian's arguments for the HTTP versions ``settings`` serve: HTTP/1.1 only,
    with D17's header timeout (``header_timeout_seconds``, also the idle keep-alive
    time); with ``http2``, also HTTP/2 with prior knowledge (RFC 9113, section 3.3;
    over TLS chosen by ALPN), its header list bounded by
    :data:`HTTP2_MAX_HEADERS_BYTES` and its streams by :data:`HTTP2_MAX_STREAMS`.
    With ``tls_certificate`` and ``tls_key``, every connection is TLS 1.3 (granian's
    least, which the load balancer and Prometheus speak): nothing in clear.

    granian has no header or idle timeout for HTTP/2. The server's PINGs stand in
    for the first: one every half header timeout on a quiet connection, and the
    connection closed when it is not answered within the other half. A client in
    the middle of a header block cannot answer (RFC 9113, section 6.10: nothing but
    CONTINUATION may come between), so an unfinished head is cut within about the
    header timeout; an idle connection whose client answers PINGs stays open
    (docs/operations/run.md). Each worker runs the event loop ``event_loop`` names.
    """
    from granian.constants import HTTPModes, Loops
    from granian.http import HTTP1Settings, HTTP2Settings

    timeout = settings.header_timeout_seconds
    options: dict[str, Any] = {
        "http": HTTPModes.auto if settings.http2 else HTTPModes.http1,
        "http1_settings": HTTP1Settings(header_read_timeout=timeout * 1000),
        "loop": Loops(settings.event_loop),
    }
    if settings.tls_certificate is not None:
        options.update(ssl_cert=settings.tls_certificate, ssl_key=settings.tls_key)
    if settings.http2:
        options["http2_settings"] = HTTP2Settings(
            max_headers_size=HTTP2_MAX_HEADERS_BYTES,
            max_concurrent_streams=HTTP2_MAX_STREAMS,
            keep_alive_interval=min(timeout * 500, 60_000),  # milliseconds, granian's most
            keep_alive_timeout=max(timeout // 2, 1),  # whole seconds, at least 1
        )
    return options


def beyond_loopback(host: str) -> bool:
    """Whether listening on ``host`` (an address or a name) reaches beyond this
    machine: True unless every address it resolves to is a loopback one (``0.0.0.0``
    and ``::`` are every address). A name that does not resolve counts as beyond."""
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return True
    return not all(
        ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in found
    )


def check_exposure(settings: Settings, *, dev_key: bool) -> None:
    """Refuse development settings that nobody chose on an address beyond loopback,
    and warn loudly, on stderr, of development settings chosen there.

    Development is the default so that ``make serve`` works with no setting; its
    settings are for one machine: a public cursor secret (cursors can be forged), a
    ``dev`` key with every scope printed where the output goes (``dev_key``) and
    ``/metrics`` open to anyone who reaches the port. An instance that listens on
    ``0.0.0.0`` or a public address without ``PETSTORE_ENVIRONMENT`` has most likely
    been deployed with the environment forgotten: it is refused (click.UsageError,
    exit 2), since a warning scrolls away in a log nobody reads while the service
    answers. Set to ``development`` on purpose (a container or a VM on a laptop),
    the service starts, and the warning names each exposure. Without any (a private
    cursor secret, no ``dev`` key, no ``/metrics``), nothing is said.
    """
    if settings.environment is not Environment.DEVELOPMENT or not beyond_loopback(settings.host):
        return
    exposures = []
    if settings.cursor_secret.get_secret_value() == DEFAULT_CURSOR_SECRET:
        exposures.append("the cursor secret is the public development one (cursors can be forged)")
    if dev_key:
        exposures.append('a key named "dev" with every scope is printed when none is active')
    if settings.metrics_enabled and settings.metrics_port is None:
        exposures.append("/metrics answers anyone (PETSTORE_METRICS_ENABLED=false turns it off)")
    if not exposures:
        return
    where, exposed = f"{printable(settings.host)}:{settings.port}", "; ".join(exposures)
    if "environment" not in settings.model_fields_set:
        raise click.UsageError(
            f"refusing to serve development settings on {where}, which is reachable "
            f"beyond this machine, without PETSTORE_ENVIRONMENT: {exposed}. Set "
            "PETSTORE_ENVIRONMENT=production (or staging) with a private "
            "PETSTORE_CURSOR_SECRET; or PETSTORE_ENVIRONMENT=development to serve them "
            "there on purpose; or listen on 127.0.0.1 (--host)."
        )
    click.echo(
        f"WARNING: development settings served on {where}, reachable beyond this "
        f"machine: {exposed}.",
        err=True,
    )
