"""The service's clocks (petstore.server.clock): an Epoch read off a Clock, for the
sunset check of every getPet (D14)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from petstore.server import clock


def test_the_default_clock_s_epoch_is_the_system_clock_read_as_seconds() -> None:
    read = clock.epoch_of(clock.utc_now)
    assert read is clock.epoch  # a float a call, no datetime made
    before = time.time()
    assert before <= read() <= time.time()
    assert abs(read() - clock.utc_now().timestamp()) < 1


def test_an_injected_clock_s_epoch_tells_its_time_to_the_microsecond() -> None:
    now = datetime(2030, 12, 4, 23, 59, 59, 999_999, tzinfo=UTC)
    read = clock.epoch_of(lambda: now)
    assert read() == now.timestamp()
    assert read() < datetime(2030, 12, 5, tzinfo=UTC).timestamp()  # the sunset: not yet
