"""How ``petstore serve`` listens: whether its settings may be exposed beyond this
machine (:func:`check_exposure`)."""

from __future__ import annotations

import ipaddress
import socket

import click

from petstore.server.config import DEFAULT_CURSOR_SECRET, Environment, Settings


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
    where, exposed = f"{settings.host}:{settings.port}", "; ".join(exposures)
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
