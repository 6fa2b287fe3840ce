"""A limit on failed authentications per client address (``PETSTORE_AUTH_FAILURE_LIMIT``,
default 30 a minute).

A request with a key the service does not know costs a database lookup (valid keys
are cached, unknown ones never are: a new key must work at once), so a flood of
random keys would reach the database at the flooder's pace. Each 401 for a
well-formed key is counted against the client's address in fixed windows (the
address as the pipeline sees it: the one the nearest proxy added to
``X-Forwarded-For`` only with ``PETSTORE_TRUST_FORWARDED_HEADERS``); an IPv6 address
counts for its whole /64 (:func:`counted_as`), the block one host or one customer
is given, which it could otherwise walk through to fail afresh from each address.
Once an address has failed ``limit`` times in a window, its requests with a key this
instance does not know valid are answered 429 ``rate_limited`` with ``Retry-After``
until the window ends, before the key is looked up, so none of them reaches the
database.

The counts live in the worker process: behind a load balancer with N instances of W
workers, an address gets at most N x W x ``limit`` failures a window. At most
:data:`MAX_ADDRESSES` addresses are counted at once (an ``lru.LRU``: the least
recently failing is forgotten first). Time comes from the injected monotonic
``clock``, in seconds.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable

from limits import parse
from lru import LRU

from petstore.server import errors

#: Addresses counted at once; about 100 bytes each.
MAX_ADDRESSES = 100_000
#: The prefix length an IPv6 address is counted by (RFC 4291: a subnet's, one site's).
IPV6_PREFIX = 64


def counted_as(address: str) -> str:
    """What the failures of client ``address`` are counted under: an IPv6 address's
    /64 network (``2001:db8::/64``); any other address (IPv4, or not an address) as
    it is."""
    if ":" not in address:
        return address
    try:
        return str(ipaddress.IPv6Network((address, IPV6_PREFIX), strict=False))
    except ValueError:
        return address


class FailedAuthentications:
    """Counts failed authentications per client address: at most ``limit`` in each
    window of ``window`` seconds of ``clock`` (monotonic seconds)."""

    def __init__(self, *, limit: int, window: float, clock: Callable[[], float]) -> None:
        if limit < 1 or window <= 0:
            raise ValueError("a failure limit allows at least 1 failure in a window over 0 s")
        self.limit = limit
        self.window = window
        self._clock = clock
        # address -> (index of its window, failures in it)
        self._failures: LRU[str, tuple[int, int]] = LRU(MAX_ADDRESSES)

    @classmethod
    def from_notation(cls, notation: str, *, clock: Callable[[], float]) -> FailedAuthentications:
        """The limit of ``notation`` in the rate-limit notation (``30/minute``,
        :func:`petstore.server.notations.check_rate_limit`)."""
        item = parse(notation)
        return cls(limit=item.amount, window=float(item.get_expiry()), clock=clock)

    def check(self, address: str) -> None:
        """Raise RateLimited (429, with ``Retry-After``: whole seconds to the end of
        the window, at least 1) when ``address`` (:func:`counted_as`) has failed
        ``limit`` times in the current window; return otherwise."""
        found = self._failures.get(counted_as(address))
        if found is None or found[1] < self.limit:
            return
        now = self._clock()
        window = int(now // self.window)
        if found[0] != window:
            return
        wait = max(1, math.ceil((window + 1) * self.window - now))
        raise errors.RateLimited(
            f"too many failed authentications from this address; retry in {wait} s",
            retry_after=wait,
        )

    def failed(self, address: str) -> None:
        """Count one failed authentication of ``address`` (:func:`counted_as`) in the
        current window."""
        address = counted_as(address)
        window = int(self._clock() // self.window)
        found = self._failures.get(address)
        count = found[1] + 1 if found is not None and found[0] == window else 1
        self._failures[address] = (window, count)
