"""The service's clocks: the one module of the server that reads the time.

Everything that measures an interval (how long an answer is kept, when a verified
key goes stale, when a rate-limit window ends) takes one of these as a parameter, so
that a test moves time by hand instead of sleeping through it:

- :data:`Monotonic`, seconds on a clock that never goes back (``time.monotonic``):
  intervals, deadlines, ages;
- :data:`Epoch`, seconds since 1970 (``time.time``): the ends of rate-limit windows,
  which the counter storage (``limits``, Redis) states in epoch seconds;
- :data:`Clock`, an aware datetime in UTC: what is stored and compared with stored
  timestamps (key expiry, idempotency records, D16) and the sunset (D14).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

Monotonic = Callable[[], float]
Epoch = Callable[[], float]
Clock = Callable[[], datetime]

#: Seconds on a clock that never goes back; only differences mean anything.
monotonic: Monotonic = time.monotonic
#: Seconds since 1970-01-01T00:00:00Z.
epoch: Epoch = time.time


def utc_now() -> datetime:
    """The current time, aware, in UTC: the default :data:`Clock`."""
    return datetime.now(UTC)
