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

:class:`LoopBeat` tells by the event loop's own clock whether the loop stood still.
"""

from __future__ import annotations

import asyncio
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


def epoch_of(clock: Clock) -> Epoch:
    """The :data:`Epoch` telling the time ``clock`` tells: :data:`epoch` for
    :func:`utc_now` (a float a call instead of a datetime: the sunset is checked on
    every getPet, D14), else the seconds of ``clock()``."""
    if clock is utc_now:
        return epoch
    return lambda: clock().timestamp()


#: Seconds between the beats of a :class:`LoopBeat`.
BEAT_SECONDS = 0.05
#: Seconds past its due time after which a beat says the loop stood still.
LATE_BEAT_SECONDS = 0.1


class LoopBeat:
    """A callback on the running event loop every :data:`BEAT_SECONDS` (20 a second,
    a few microseconds each), each checking how late it ran. One more than
    :data:`LATE_BEAT_SECONDS` late means the loop stood still: its worker paused or
    starved of the processor, or a callback that held the loop. :attr:`stills`
    counts those beats, so that a caller tells whether the loop stood still between
    two readings. Due timers run in the order they are due, so a beat overdue after a
    stand-still runs before a later timeout that the stand-still made expire.
    :meth:`start` on a running loop, :meth:`stop` to end."""

    def __init__(self) -> None:
        self.stills = 0
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """Beat on the running loop from now on (once started, nothing more)."""
        if self._handle is None:
            loop = asyncio.get_running_loop()
            self._handle = loop.call_at(loop.time() + BEAT_SECONDS, self._beat, loop)

    def _beat(self, loop: asyncio.AbstractEventLoop) -> None:
        assert self._handle is not None
        now = loop.time()
        if now - self._handle.when() > LATE_BEAT_SECONDS:
            self.stills += 1
        self._handle = loop.call_at(now + BEAT_SECONDS, self._beat, loop)

    def stop(self) -> None:
        """Beat no more; :meth:`start` begins again."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
