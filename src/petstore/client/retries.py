"""When a call of :mod:`petstore.client` is repeated, and after how long: the retry
decision both clients share, one pure function (:meth:`Retries.wait`: no I/O, no
state), the rules of D15, D16, D25 and D27.

What is repeated, while a new attempt can start within ``retry_for`` seconds of the
first (D27's bound for a failover, :data:`RETRY_FOR`):

- a connection that could not be made, or no pooled connection free in time: the
  request never left, so any request;
- 429 ``rate_limited``: the service refused it before looking at it (D15), any request;
- for a request that is safe to send twice (an idempotent method, RFC 9110 section
  9.2.2, or a POST with its ``Idempotency-Key``, D16): 503 ``unavailable``, 409
  ``idempotency_conflict`` (the same create still in flight), a connection lost
  after the request was sent, and a timeout, a read timeout included.

A read timeout is repeated only for a safe request because the request was sent and
the service may be committing it right now (a slow database, D25) or may have
committed it and lost the answer: a GET repeated changes nothing, a POST with its key
is answered with the first one's animal (or 409 while that one is still in flight,
then repeated), a POST without it would add a second animal. A 503 is not repeated for
such a POST either: it may follow a commit whose outcome the service does not know.
"""

from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass

import httpx

from petstore.client.errors import retry_after

#: Seconds after a call's first attempt within which it may still be repeated, when
#: the client's ``retry_for`` is not given (default :data:`RETRY_FOR`).
ENV_RETRY_FOR = "PETSTORE_RETRY_FOR_SECONDS"
#: D27: the longest a failover of the high-availability deployment stops reads and
#: creates (the primary data node lost), hence how long a call keeps retrying.
RETRY_FOR = 20.0

_IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
_RETRY_ALWAYS, _RETRY_IF_SAFE = frozenset({429}), frozenset({409, 503})
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
_MAYBE_SENT = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


@dataclass(frozen=True, slots=True, kw_only=True)
class Retries:
    """How a client repeats a call (see the module docstring for what it repeats).

    ``retry_for`` seconds after the first attempt began, no new attempt starts (0: never
    repeat; ``inf``: no time bound); with ``max_retries`` (None: no count bound), no
    more than that many repeats. The wait before a repeat is the ``Retry-After`` of the
    answer when it has one, stretched by up to half at random so that clients told the
    same second come back apart; otherwise it is drawn from 0 to ``backoff * 2**n``
    seconds for the n-th repeat (full jitter). No wait exceeds ``max_sleep``: a
    ``Retry-After`` above it, or one that would end after ``retry_for``, is not waited
    for, and the caller gets the error with its ``retry_after``. Build it with
    :meth:`configured` to read :data:`ENV_RETRY_FOR`.
    """

    retry_for: float = RETRY_FOR
    max_retries: int | None = None
    backoff: float = 0.5
    max_sleep: float = 5.0

    @classmethod
    def configured(
        cls, retry_for: float | None, *, max_retries: int | None, backoff: float, max_sleep: float
    ) -> Retries:
        """The policy of a client: ``retry_for`` in seconds, else :data:`ENV_RETRY_FOR`,
        else :data:`RETRY_FOR`. Raises ValueError, naming the argument or the variable,
        for a ``retry_for`` that is not a number of 0 or more, or a negative
        ``max_retries``."""
        where, value = "retry_for", retry_for
        if value is None:
            where, text = ENV_RETRY_FOR, os.environ.get(ENV_RETRY_FOR, "").strip()
            try:
                value = float(text) if text else RETRY_FOR
            except ValueError:
                value = math.nan
        if math.isnan(value) or value < 0:
            raise ValueError(
                f"{where} must be a number of seconds, 0 or more (D27's bound: {RETRY_FOR:g})"
            )
        if max_retries is not None and max_retries < 0:
            raise ValueError("max_retries must be 0 or more")
        return cls(retry_for=value, max_retries=max_retries, backoff=backoff, max_sleep=max_sleep)

    def wait(
        self, attempt: int, outcome: httpx.Response | httpx.TransportError, *, elapsed: float
    ) -> float | None:
        """After attempt ``attempt`` (from 0) ended with ``outcome``, ``elapsed`` seconds
        after the first began: the seconds to wait before repeating the request, or
        None when it is not repeated (the answer is final, or the budget is spent)."""
        if isinstance(outcome, httpx.Response):
            status, told = outcome.status_code, retry_after(outcome)
            if not (
                status in _RETRY_ALWAYS or (status in _RETRY_IF_SAFE and _safe(outcome.request))
            ):
                return None
        elif isinstance(outcome, _NOT_SENT) or (
            isinstance(outcome, _MAYBE_SENT) and _safe(_request_of(outcome))
        ):
            told = None
        else:
            return None
        left = self.retry_for - elapsed
        spent = self.max_retries is not None and attempt >= self.max_retries
        if spent or left <= 0 or (told is not None and told > min(self.max_sleep, left)):
            return None
        if told is not None:
            return max(told, min(told * random.uniform(1, 1.5), self.max_sleep, left))
        ceiling = min(self.max_sleep, self.backoff * 2 ** min(attempt, 30))
        return min(random.uniform(0, ceiling), left)


def _safe(request: httpx.Request | None) -> bool:
    """Whether sending ``request`` twice has the effect of once: an idempotent method,
    or a request carrying an ``Idempotency-Key`` (D16)."""
    if request is None:
        return False
    return request.method in _IDEMPOTENT_METHODS or "idempotency-key" in request.headers


def _request_of(error: httpx.TransportError) -> httpx.Request | None:
    """The request of ``error``: httpx names it on every error of a send."""
    try:
        return error.request
    except RuntimeError:  # an error raised outside a send: nothing to repeat
        return None
