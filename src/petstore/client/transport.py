"""The connections a client of :mod:`petstore.client` opens when it is given no
transport of the caller's: TCP keepalives on each (:data:`KEEPALIVES`), and the proxy
the environment names (:func:`transport_options`). No I/O: the clients build their
httpx transport from these options."""

from __future__ import annotations

import socket
import urllib.request
from typing import Any

import httpx


def _keepalives() -> tuple[tuple[int, int, int], ...]:
    """:data:`KEEPALIVES` for this platform: an option the platform lacks is left out
    (macOS names the idle time ``TCP_KEEPALIVE``; a platform with neither keeps its
    system's idle time, two hours by default)."""
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for names, value in ((("TCP_KEEPIDLE", "TCP_KEEPALIVE"), 2), (("TCP_KEEPINTVL",), 1),
                         (("TCP_KEEPCNT",), 3)):  # fmt: skip
        for name in names:
            if (option := getattr(socket, name, None)) is not None:
                options.append((socket.IPPROTO_TCP, option, value))
                break
    return tuple(options)


#: The TCP keepalives of every connection a client opens on its own transport (httpx's
#: ``socket_options``): a probe after 2 s without a packet, then every 1 s, the
#: connection dropped after 3 unanswered. A paused load balancer's kernel still
#: acknowledges the request and the probes, and never answers; once its address has
#: moved to the other balancer, the next probe reaches that host, which resets the
#: connection (within 2 s of the move; without probes only the read timeout ends the
#: wait), and the client retries (D27). A peer that vanished is found dead after 5 s of
#: silence. A live peer's kernel answers each probe: one small packet each way per
#: idle connection every 2 s. Pass them to a transport of your own the same way:
#: ``httpx.HTTPTransport(socket_options=KEEPALIVES)``.
KEEPALIVES = _keepalives()


def transport_options(base_url: str) -> dict[str, Any]:
    """The options of the httpx transport a client makes for ``base_url``:
    :data:`KEEPALIVES`, and the proxy that ``HTTP_PROXY``, ``HTTPS_PROXY`` or
    ``ALL_PROXY`` names unless ``NO_PROXY`` names the host (httpx reads them only for a
    transport it makes itself; every request of a client goes to its base URL)."""
    proxies = urllib.request.getproxies()
    target = httpx.URL(base_url)
    proxy = proxies.get(target.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(target.host):
        proxy = None
    elif "://" not in proxy:
        proxy = f"http://{proxy}"
    return {"socket_options": KEEPALIVES, "proxy": proxy}
