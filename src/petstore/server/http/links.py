"""Where the service's absolute links point (D9's ``rel="next"``, D14's
``rel="deprecation"``): the one rule, in one place.

A link is the base this module decides followed by ``v1/...``. The base is:

1. ``<scheme>://<Host>/`` when the request's ``Host`` names one of the allowed hosts
   (``PETSTORE_ALLOWED_HOSTS``; by default, in development only, the loopback names
   and ``testserver``, the name ASGI test clients send); the scheme is the request's,
   which ``X-Forwarded-Proto`` sets only with ``PETSTORE_TRUST_FORWARDED_HEADERS``;
2. otherwise the configured public URL of the environment, without its ``v1``:
   ``PETSTORE_BASE_URL`` in production, ``PETSTORE_STAGING_BASE_URL`` in staging, and
   ``http://PETSTORE_HOST:PETSTORE_PORT/`` in development.

So a client's ``Host`` never chooses where another client's link points: a Host not
allowed gets the configured URL. ``X-Forwarded-Host`` is never read.
"""

from __future__ import annotations

import re

from lru import LRU

from petstore.schemas import PetStatus
from petstore.server.config import Environment, Settings
from petstore.server.http.exchange import Header, Request

#: The allowed hosts of development when ``PETSTORE_ALLOWED_HOSTS`` is not set.
DEVELOPMENT_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "testserver"})
#: The longest Host value whose base is remembered: a DNS name (253) and a port.
MAX_HOST_CHARS = 260
#: A Host header (RFC 9110 section 7.2): a name or an IPv4 address, or an IPv6
#: address in brackets, and an optional port.
_HOST = re.compile(r"(?P<name>[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")


class LinkBase:
    """The base of absolute links for a request: ``fallback`` (the configured public
    URL's part before ``v1/``, ending in ``/``) unless the request's Host names one
    of ``allowed_hosts`` (lower-case names, IPv6 addresses without brackets)."""

    def __init__(self, *, fallback: str, allowed_hosts: frozenset[str]) -> None:
        self.fallback = fallback
        self.allowed_hosts = allowed_hosts
        # (scheme, Host) -> base, the fallback included: a few in practice, bounded
        # whatever hosts and ports clients name (a Host longer than a DNS name and a
        # port is judged each time, never held).
        self._bases: LRU[tuple[str, str], str] = LRU(64)

    def base(self, request: Request) -> str:
        """``scheme://host/`` (or the configured URL's prefix) under which the links
        of ``request``'s answer go; see the module docstring for the rule."""
        host = request.header(b"host") or ""
        key = (request.scheme, host)
        base = self._bases.get(key)
        if base is not None:
            return base
        match = _HOST.fullmatch(host)
        if match is None or match["name"].strip("[]").lower() not in self.allowed_hosts:
            base = self.fallback
        else:
            base = f"{key[0]}://{host.lower()}/"
        if len(host) <= MAX_HOST_CHARS:
            self._bases[key] = base
        return base


def link_base(settings: Settings) -> LinkBase:
    """The :class:`LinkBase` of ``settings``: the environment's public URL, and
    ``PETSTORE_ALLOWED_HOSTS`` (by default the loopback names in development, none
    elsewhere)."""
    if settings.environment is Environment.PRODUCTION:
        public = str(settings.base_url)
    elif settings.environment is Environment.STAGING:
        public = str(settings.staging_base_url)
    else:
        host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host  # noqa: S104
        host = f"[{host}]" if ":" in host else host
        public = f"http://{host}:{settings.port}/v1"
    fallback = public.rstrip("/").removesuffix("v1")
    if settings.allowed_hosts is not None:
        allowed = frozenset(settings.allowed_hosts)
    elif settings.environment is Environment.DEVELOPMENT:
        allowed = DEVELOPMENT_HOSTS
    else:
        allowed = frozenset()
    return LinkBase(fallback=fallback, allowed_hosts=allowed)


def next_link(base: str, *, cursor: str, limit: int, status: PetStatus | None) -> Header:
    """The ``Link`` header naming the next page (D9, RFC 8288) under ``base``,
    keeping ``limit`` and ``status``. Every value is URL-safe as it is (a decimal, a
    PetStatus, an unpadded base64url cursor), so none needs percent-encoding."""
    status_part = "" if status is None else f"&status={status.value}"
    url = f"{base}v1/pets?limit={limit}{status_part}&cursor={cursor}"
    return (b"link", f'<{url}>; rel="next"'.encode())
