"""Where an instance runs (:class:`Environment`), and what staging and production
refuse that development allows: the public cursor secret (D9), a placeholder as the
public URL every link of theirs starts with (D19, :mod:`.http.links`), and anything
that would cross the network between hosts in clear (docs/operations/tls.md): the
instance's own port without TLS, a PostgreSQL connection that does not verify the
server (``sslmode=verify-full``), a Redis connection without TLS or without
verifying it. Loopback and Unix sockets never leave the machine: they are allowed.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from enum import StrEnum

from petstore.server.notations import is_postgres


class Environment(StrEnum):
    """Where an instance runs; staging and production refuse unsafe settings."""

    DEVELOPMENT = "development"
    STAGING = "staging"
    PRODUCTION = "production"


#: The cursor secret used when none is configured. Fine on a laptop, refused in
#: staging and production (cursors signed with a public secret can be forged).
DEFAULT_CURSOR_SECRET = "petstore-development-cursor-secret-not-for-production"  # noqa: S105

#: D19: the public URLs a deployment has until its operator sets its own.
PLACEHOLDER_BASE_URL = "https://petstore.example.com/v1"
PLACEHOLDER_STAGING_BASE_URL = "https://staging.petstore.example.com/v1"


def refusals(
    environment: Environment, *, cursor_secret: str, base_url: str, staging_base_url: str,
    host: str, tls: bool, database_url: str, redis_url: str | None,
) -> list[str]:  # fmt: skip
    """What ``environment`` refuses of these settings, one sentence each naming its
    variable; none in development. Outside it: a cursor secret that is the default or
    shorter than 32 characters; the environment's own public URL (``base_url`` in
    production, ``staging_base_url`` in staging) left at its placeholder, with or
    without a final ``/``; and what :func:`in_clear` finds."""
    if environment is Environment.DEVELOPMENT:
        return []
    problems = []
    if cursor_secret == DEFAULT_CURSOR_SECRET or len(cursor_secret) < 32:
        problems.append(
            f"PETSTORE_CURSOR_SECRET must be set to a private value of at least 32 "
            f"characters in {environment.value} (the default is public)"
        )
    if environment is Environment.PRODUCTION:
        variable, url, placeholder = "PETSTORE_BASE_URL", base_url, PLACEHOLDER_BASE_URL
    else:
        variable, url = "PETSTORE_STAGING_BASE_URL", staging_base_url
        placeholder = PLACEHOLDER_STAGING_BASE_URL
    if url.rstrip("/") == placeholder:
        problems.append(
            f"{variable} must be set to this deployment's public URL (ending in /v1) in "
            f"{environment.value}: every Link header's URL starts with it, and the "
            f"default {placeholder} is a placeholder"
        )
    return problems + [
        f"{problem} ({environment.value} sends nothing between hosts in clear)"
        for problem in in_clear(host=host, tls=tls, database_url=database_url, redis_url=redis_url)
    ]


def in_clear(*, host: str, tls: bool, database_url: str, redis_url: str | None) -> list[str]:
    """What these settings would send between hosts in clear, one sentence each naming
    its variable: ``serve`` on ``host`` beyond loopback without ``tls``; a PostgreSQL
    URL with a host beyond loopback (a name, or an address that is not a loopback
    one; a socket folder is local) without ``sslmode=verify-full`` (``require``
    encrypts but believes any server: a host that answers in the primary's place);
    a Redis URL with such a host that is not ``rediss://``, or turns off the check of
    the server's certificate or name."""
    problems = []
    if not tls and not _local(host):
        problems.append(
            "PETSTORE_TLS_CERTIFICATE and PETSTORE_TLS_KEY must be set when PETSTORE_HOST "
            "is not a loopback address: requests carry API keys"
        )
    if is_postgres(database_url):
        from psycopg.conninfo import conninfo_to_dict

        params = {k: str(v) for k, v in conninfo_to_dict(database_url).items() if v is not None}
        hosts = params.get("hostaddr", params.get("host", "")).split(",")
        if params.get("sslmode") != "verify-full" and not all(_local(h) for h in hosts):
            problems.append(
                "PETSTORE_DATABASE_URL must have sslmode=verify-full (and sslrootcert, the "
                "CA that signed the servers' certificates) to reach PostgreSQL beyond loopback"
            )
    if redis_url:
        parts = urllib.parse.urlsplit(redis_url)
        query = {k.lower(): v.lower() for k, v in urllib.parse.parse_qsl(parts.query)}
        unverified = query.get("ssl_cert_reqs", "required") != "required" or query.get(
            "ssl_check_hostname", "true"
        ) in ("false", "0", "no", "n", "f", "off")
        if (parts.scheme != "rediss" or unverified) and not _local(parts.hostname or ""):
            problems.append(
                "PETSTORE_REDIS_URL must be rediss:// (with ssl_ca_certs, the CA that signed "
                "Redis' certificate) and verify Redis' certificate to reach it beyond loopback"
            )
    return problems


def _local(host: str) -> bool:
    """Whether ``host`` never leaves the machine: a socket folder (``/...``, or no
    host: libpq's default socket), ``localhost`` or a loopback address."""
    if host == "" or host.startswith("/") or host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
