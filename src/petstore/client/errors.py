"""Errors raised by :mod:`petstore.client`: one class per family of Error ``code`` (D10).

Hierarchy::

    PetstoreClientError         code, message, status, request_id, retry_after
    ├── BadRequestError         400 invalid_request, malformed_json
    ├── AuthenticationError     401 unauthorized
    ├── ForbiddenError          403 forbidden: the key lacks the operation's scope (D21)
    ├── NotFoundError           404 not_found: no such animal
    │   └── ServiceNotFoundError    404 that says the base URL is not a Petstore's
    ├── ConflictError           409 idempotency_conflict, 422 idempotency_key_reused (D16)
    ├── GoneError               410 gone: a sunset operation (D14)
    ├── PayloadError            413 payload_too_large, 415 unsupported_media_type
    ├── RateLimitedError        429 rate_limited, with retry_after (D15)
    ├── ServerError             500 internal_error, 503 unavailable, any other 5xx
    └── TransportError          no response: connection failed or timed out, retries spent

Any other status (405 method_not_allowed, say) raises the base class. ``get_pet``
warns with :class:`SunsetWarning`, a DeprecationWarning that carries the sunset date. An error never
carries the API key: the service does not echo it and the client never adds it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx
import msgspec

from petstore.schemas import Error
from petstore.text import printable, printable_url


class PetstoreClientError(Exception):
    """An error answer of the service, or no answer at all.

    ``status`` is the HTTP status (None for :class:`TransportError`), ``request_id``
    the response's ``X-Request-ID`` (D18), ``retry_after`` the ``Retry-After`` in
    seconds when the response had one (D15).
    """

    def __init__(
        self,
        message: str,
        *,
        code: str,
        status: int | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.request_id = request_id
        self.retry_after = retry_after

    def __str__(self) -> str:
        status = "" if self.status is None else f"{self.status} "
        return f"{status}{self.code}: {self.message}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code!r}, message={self.message!r}, "
            f"status={self.status!r}, request_id={self.request_id!r})"
        )


class BadRequestError(PetstoreClientError):
    """400: a field or parameter failed validation, or the body was not JSON."""


class AuthenticationError(PetstoreClientError):
    """401: the API key is missing, unknown, revoked or expired (D12, D13)."""


class ForbiddenError(PetstoreClientError):
    """403: the API key is valid but lacks the operation's scope (D21): a read-only
    key (``pets:read``) creating, or a write-only one (``pets:write``) reading."""


class NotFoundError(PetstoreClientError):
    """404: no such animal (D11). A 404 meaning that the base URL is wrong is the
    subclass :class:`ServiceNotFoundError`."""


class ServiceNotFoundError(NotFoundError):
    """404 from a URL that is not the base of a Petstore service (it lacks ``/v1``, or
    another server answers there): see :func:`service_not_found` for the rule.

    ``message`` names the base URL, the request that answered 404 and what it said;
    ``code`` is the Error's code, or ``http_404`` when the body was not an Error.
    A subclass of NotFoundError, so code that caught every 404 still does.
    """


class ConflictError(PetstoreClientError):
    """409/422: the Idempotency-Key is in flight, or was used with another body (D16)."""


class GoneError(PetstoreClientError):
    """410: the operation passed its sunset; the message names the replacement (D14)."""


class PayloadError(PetstoreClientError):
    """413/415: the body is too large or not ``application/json`` (D17)."""


class RateLimitedError(PetstoreClientError):
    """429: the API key's budget is spent; wait ``retry_after`` seconds (D15)."""


class ServerError(PetstoreClientError):
    """5xx: a fault of the service, or its database is unreachable (503)."""


class TransportError(PetstoreClientError):
    """No response: the connection failed or timed out on every attempt."""


class SunsetWarning(DeprecationWarning):
    """The DeprecationWarning of ``get_pet`` (D14): ``sunset`` is the ISO date
    (``2030-12-05``) after which the operation answers 410."""

    def __init__(self, message: str, *, sunset: str) -> None:
        super().__init__(message)
        self.sunset = sunset


_BY_STATUS: dict[int, type[PetstoreClientError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    410: GoneError,
    413: PayloadError,
    415: PayloadError,
    422: ConflictError,
    429: RateLimitedError,
}
_error_decoder = msgspec.json.Decoder(Error)


def retry_after(response: httpx.Response) -> float | None:
    """The ``Retry-After`` of ``response`` in seconds (delay-seconds or an HTTP-date,
    RFC 9110 section 10.2.3); None when absent or unreadable."""
    value = response.headers.get("retry-after", "").strip()
    if value.isdigit():
        return float(value)
    if not value:
        return None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def from_response(response: httpx.Response) -> PetstoreClientError:
    """The typed error for an error ``response`` (status >= 400), chosen by status.

    The Error body gives ``code`` and ``message`` (D10); a body that is not one
    (an HTML page of a proxy, say) gives ``http_<status>`` and the reason phrase.
    """
    status = response.status_code
    try:
        body = _error_decoder.decode(response.content)
        code, message = body.code, body.message
    except msgspec.DecodeError:  # ValidationError is a DecodeError
        code, message = f"http_{status}", response.reason_phrase or "error"
    cls = _BY_STATUS.get(status, ServerError if status >= 500 else PetstoreClientError)
    return cls(
        message,
        code=code,
        status=status,
        request_id=response.headers.get("x-request-id"),
        retry_after=retry_after(response),
    )


def service_not_found(base_url: str, response: httpx.Response) -> ServiceNotFoundError | None:
    """The error for a ``response`` that shows ``base_url`` is not a Petstore base URL;
    None for any other response (every status but 404, and a 404 about an animal).

    A 404 means a wrong base when it answers the pets collection ``{base_url}/pets``
    (which always exists: ``GET`` lists, ``POST`` adds), when its body is not a
    Petstore Error (another server answers there), or when the Error says ``no such
    path`` (a Petstore, but the base lacks or misplaces ``/v1``). ``response.request``
    must be set, as httpx does for every response it returns.
    """
    if response.status_code != 404:
        return None
    request = response.request
    try:
        body = _error_decoder.decode(response.content)
        code, detail, petstore = body.code, body.message, True
    except msgspec.DecodeError:
        code, detail, petstore = "http_404", response.reason_phrase or "Not Found", False
    collection = request.url.path.rstrip("/") == httpx.URL(f"{base_url}/pets").path
    if petstore and not collection and not detail.startswith("no such path"):
        return None
    return ServiceNotFoundError(
        f"no Petstore service at {printable_url(base_url)} ({request.method} "
        f"{printable_url(str(request.url))} answered 404: {printable(detail)}); a Petstore "
        "base URL ends in /v1, e.g. http://127.0.0.1:8000/v1",
        code=code,
        status=404,
        request_id=response.headers.get("x-request-id"),
    )


def raise_for_error(response: httpx.Response) -> httpx.Response:
    """``response`` itself when it is not an error; raises :func:`from_response` else."""
    if response.status_code >= 400:
        raise from_response(response)
    return response


def unexpected_body(response: httpx.Response, exc: Exception) -> PetstoreClientError:
    """The error for a success whose body is not the promised shape: code
    ``invalid_response`` (a proxy page, or a service of another version)."""
    return PetstoreClientError(
        f"the service answered {response.status_code} with an unexpected body: {exc}",
        code="invalid_response",
        status=response.status_code,
        request_id=response.headers.get("x-request-id"),
    )
