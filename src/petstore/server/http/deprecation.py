"""A deprecated operation's answers (D14): the headers every one of them carries, and
410 from its sunset on.

The route table marks an operation deprecated with a :class:`Deprecation`
(:class:`.routes.Operation`); the pipeline puts its :meth:`~Deprecation.headers` on
the answer before anything else, so errors carry them too, and calls
:meth:`~Deprecation.check` once the caller is admitted.
"""

from __future__ import annotations

from datetime import datetime
from email.utils import format_datetime

from lru import LRU

from petstore.server import errors
from petstore.server.clock import Epoch
from petstore.server.http.exchange import Header, Request
from petstore.server.http.links import MAX_HOST_CHARS, LinkBase


class Deprecation:
    """An operation deprecated on ``date``, removed on ``sunset`` (both aware
    datetimes; ``epoch``, seconds since 1970, says when it has come) in favour of
    ``replacement`` (how to do the same, in words); its deprecation page is linked
    under the base of ``links``."""

    def __init__(
        self,
        *,
        date: datetime,
        sunset: datetime,
        replacement: str,
        epoch: Epoch,
        links: LinkBase,
    ) -> None:
        self.date = date
        self.sunset = sunset
        self.replacement = replacement
        self.epoch = epoch
        self._sunset_at = sunset.timestamp()
        self.links = links
        self._headers: list[Header] = [
            (b"deprecation", f"@{int(date.timestamp())}".encode()),  # RFC 9745
            (b"sunset", format_datetime(sunset, usegmt=True).encode()),  # RFC 8594
        ]
        # (scheme, Host as sent) -> the fields: the base of links is decided by these
        # two alone (:mod:`.links`), so a getPet costs one lookup, not the base's own.
        self._headers_by_origin: LRU[tuple[str, bytes | None], list[Header]] = LRU(64)

    def headers(self, request: Request) -> list[Header]:
        """The ``Deprecation``, ``Sunset`` and ``Link: rel="deprecation"`` fields of an
        answer to ``request``, the link absolute under its base (:mod:`.links`); built
        once for each scheme and ``Host``, the 64 last used kept."""
        origin = (request.scheme, request.headers.get(b"host"))
        headers = self._headers_by_origin.get(origin)
        if headers is None:
            base = self.links.base(request)
            link = f'<{base}v1/docs/deprecations>; rel="deprecation"; type="text/html"'.encode()
            headers = [*self._headers, (b"link", link)]
            if origin[1] is None or len(origin[1]) <= MAX_HOST_CHARS:
                self._headers_by_origin[origin] = headers
        return headers

    def check(self, request: Request) -> None:
        """Raise Gone (410) from the sunset on (interface: Versioning), naming the
        operation of ``request`` (``HEAD`` as the ``GET`` it is) and its replacement."""
        if self.epoch() >= self._sunset_at:
            method = "GET" if request.method == "HEAD" else request.method
            removed = format_datetime(self.sunset, usegmt=True)
            raise errors.Gone(
                f"{method} {request.route} was removed on {removed}; use {self.replacement}"
            )
