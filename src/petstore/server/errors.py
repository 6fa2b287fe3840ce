"""Errors: one class per Error ``code`` (D10), all rendered by :func:`render`.

Hierarchy::

    PetstoreError                 status, code, message, headers
    ├── InvalidRequest            400 invalid_request
    ├── MalformedJson             400 malformed_json
    ├── Unauthorized              401 unauthorized (+ WWW-Authenticate, RFC 6750)
    ├── Forbidden                 403 forbidden (+ WWW-Authenticate insufficient_scope)
    ├── NotFound                  404 not_found
    ├── MethodNotAllowed          405 method_not_allowed (+ Allow)
    ├── IdempotencyConflict       409 idempotency_conflict
    ├── Gone                      410 gone
    ├── PayloadTooLarge           413 payload_too_large
    ├── UnsupportedMediaType      415 unsupported_media_type
    ├── IdempotencyKeyReused      422 idempotency_key_reused
    ├── RateLimited               429 rate_limited (+ Retry-After, RateLimit fields)
    ├── InternalError             500 internal_error
    └── Unavailable               503 unavailable (+ Retry-After)

The rules and storage layers raise these; the HTTP layer turns each into its
response with :func:`render`, the one place an Error body is built, and never
builds one by hand.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from petstore.schemas import Error, encode

#: Faults of ours (a 5xx with a cause, an unhandled exception) and background failures.
log = logging.getLogger("petstore.error")

#: D12: the realm of every bearer challenge.
REALM = 'Bearer realm="petstore"'


class PetstoreError(Exception):
    """Base of every error the service answers with; carries what the response needs."""

    status: int = 500
    code: str = "internal_error"

    def __init__(self, message: str, *, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers: dict[str, str] = dict(headers or {})

    def body(self) -> bytes:
        """The Error body as JSON bytes: exactly ``code``, ``message``, ``status``."""
        return encode(Error(code=self.code, message=self.message, status=self.status))


class InvalidRequest(PetstoreError):
    """A body field or query/path parameter fails validation; the message names it."""

    status, code = 400, "invalid_request"


class MalformedJson(PetstoreError):
    """The request body is not valid JSON (or not UTF-8)."""

    status, code = 400, "malformed_json"


class Unauthorized(PetstoreError):
    """No, malformed, unknown, revoked or expired API key (D12, RFC 6750 section 3)."""

    status, code = 401, "unauthorized"

    def __init__(self, message: str, *, key_sent: bool) -> None:
        challenge = f'{REALM}, error="invalid_token"' if key_sent else REALM
        super().__init__(message, headers={"WWW-Authenticate": challenge})


class Forbidden(PetstoreError):
    """A valid API key without the operation's ``scope`` (D21, RFC 6750 section 3.1)."""

    status, code = 403, "forbidden"

    def __init__(self, message: str, *, scope: str) -> None:
        challenge = f'{REALM}, error="insufficient_scope", scope="{scope}"'
        super().__init__(message, headers={"WWW-Authenticate": challenge})


class NotFound(PetstoreError):
    """No such animal, or no such path."""

    status, code = 404, "not_found"


class MethodNotAllowed(PetstoreError):
    """The path exists but not with this method; ``allow`` lists the methods it has."""

    status, code = 405, "method_not_allowed"

    def __init__(self, message: str, *, allow: str) -> None:
        super().__init__(message, headers={"Allow": allow})


class IdempotencyConflict(PetstoreError):
    """A request with the same Idempotency-Key is still being processed (D16)."""

    status, code = 409, "idempotency_conflict"


class Gone(PetstoreError):
    """A sunset operation called after its sunset date (D14)."""

    status, code = 410, "gone"


class PayloadTooLarge(PetstoreError):
    """The request body is larger than ``PETSTORE_MAX_BODY_BYTES`` (D17)."""

    status, code = 413, "payload_too_large"


class UnsupportedMediaType(PetstoreError):
    """A POST body that is not ``application/json``."""

    status, code = 415, "unsupported_media_type"


class IdempotencyKeyReused(PetstoreError):
    """The Idempotency-Key was already used with a different body (D16)."""

    status, code = 422, "idempotency_key_reused"


class RateLimited(PetstoreError):
    """The API key spent its budget for the window; retry after ``retry_after`` s (D15)."""

    status, code = 429, "rate_limited"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after)})


class InternalError(PetstoreError):
    """An unexpected fault; the message never carries internals."""

    status, code = 500, "internal_error"


class Unavailable(PetstoreError):
    """The database cannot be reached right now, or the request was not answered within
    the request timeout (D25); retry after ``retry_after`` seconds."""

    status, code = 503, "unavailable"

    def __init__(self, message: str, *, retry_after: int = 1) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after)})


_BY_STATUS: dict[int, type[PetstoreError]] = {
    cls.status: cls
    for cls in (NotFound, Gone, PayloadTooLarge, UnsupportedMediaType, InternalError)
}


def from_http_status(status: int, headers: Mapping[str, str] | None = None) -> PetstoreError:
    """The PetstoreError for a bare HTTP status raised by the framework (404, 405...)."""
    if status == 405:
        return MethodNotAllowed(
            "this path does not support that method; see the Allow header",
            allow=(headers or {}).get("Allow", ""),
        )
    if status == 404:
        return NotFound("no such path; the API lives under /v1 (see /v1/docs)")
    cls = _BY_STATUS.get(status)
    if cls is None:
        return InvalidRequest("the request could not be processed")
    return cls(cls.__doc__.splitlines()[0] if cls.__doc__ else cls.code)


def internal_error() -> InternalError:
    """The 500 for an unexpected fault: its message carries no internals."""
    return InternalError("an unexpected error occurred; it has been logged")


def render(
    error: PetstoreError, *, request_id: str
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """The response of ``error``: its status, its headers (lower-case latin-1 bytes,
    ``Content-Type`` not included) and its Error body (D10).

    A 5xx with a cause (the database fault behind a 503) is logged here with that
    cause's traceback under ``request_id``; other errors are not faults of ours.
    """
    if error.status >= 500 and error.__cause__ is not None:
        log.error(
            "%s: %s",
            error.code,
            error.message,
            exc_info=error.__cause__,
            extra={"request_id": request_id},
        )
    headers = [(name.lower().encode(), value.encode()) for name, value in error.headers.items()]
    return error.status, headers, error.body()
