"""The HTTP toolkit under the operations: reading a request body within its deadline
(D17), driven with a request whose body stalls."""

from __future__ import annotations

import asyncio
import time

import pytest

from petstore.server import errors
from petstore.server.http.deadlines import Deadlines
from petstore.server.http.exchange import BODY_CHECK_SECONDS, BodyReader, Request, Response
from petstore.server.http.reading import read_request
from petstore.server.http.routes import Router


def _stalled_exchange(first: bytes) -> tuple[Request, Response]:
    """A request whose body sends ``first`` (of a declared 40 bytes), then stalls, and
    its answer."""
    messages = [{"type": "http.request", "body": first, "more_body": True}]

    async def receive() -> dict[str, object]:
        if messages:
            return messages.pop()
        await asyncio.Event().wait()  # forever
        raise AssertionError("unreachable")

    async def send(message: object) -> None:
        raise AssertionError("nothing is sent while reading")

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/pets",
        "query_string": b"",
        "scheme": "http",
        "headers": [(b"content-length", b"40")],
    }
    request, _ = read_request(scope, receive, Router([]), trust_forwarded=False)
    return request, Response(request, send, [])


def test_a_body_read_past_its_deadline_is_invalid_and_the_task_not_left_cancelled() -> None:
    async def main() -> None:
        started = time.monotonic()
        with pytest.raises(errors.InvalidRequest, match=r"did not arrive within 0\.3 s"):
            await BodyReader(limit=100, within=0.3).read(*_stalled_exchange(b"{"))
        elapsed = time.monotonic() - started
        assert 0.3 <= elapsed < 0.3 + BODY_CHECK_SECONDS + 0.2
        task = asyncio.current_task()
        assert task is not None
        assert task.cancelling() == 0  # as after asyncio.timeout
        await asyncio.sleep(0.01)  # and no cancellation is still pending

    asyncio.run(main())


def test_a_body_read_cancelled_by_the_server_stays_cancelled() -> None:
    """A cancellation that is not the deadline's (the server shutting down) is not
    turned into a 400."""

    async def main() -> None:
        reading = asyncio.create_task(BodyReader(limit=100, within=5).read(*_stalled_exchange(b"")))
        await asyncio.sleep(0.05)
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading

    asyncio.run(main())


def test_an_early_deadline_cuts_between_one_tick_before_and_the_deadline() -> None:
    """The request timeout's side of Deadlines (D25): cut no later than its seconds,
    no earlier than one tick before, and the timer stops once nothing is watched."""

    async def main() -> None:
        deadlines = Deadlines(seconds=0.4, tick=0.1, early=True)
        started = time.monotonic()
        task = deadlines.watch()
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            assert deadlines.was_cut(task)
            task.uncancel()
        finally:
            deadlines.forget(task)
        elapsed = time.monotonic() - started
        assert 0.3 <= elapsed <= 0.4 + 0.05, elapsed
        await asyncio.sleep(0.25)  # the timer's last tick finds nothing and stops
        assert deadlines._timer is None

    asyncio.run(main())


def test_a_task_forgotten_in_time_is_never_cut() -> None:
    async def main() -> None:
        deadlines = Deadlines(seconds=0.1, tick=0.02, early=True)
        task = deadlines.watch()
        deadlines.forget(task)
        await asyncio.sleep(0.2)  # would raise CancelledError had it been cut
        assert not deadlines.was_cut(task)

    asyncio.run(main())


def test_deadlines_cut_on_the_event_loop_that_runs_now() -> None:
    """An app served from one event loop, then from another (each test's own): the
    second loop's task is cut in time although the first loop ended with a check
    still due on it, and ``watch`` returns the task running now."""
    deadlines = Deadlines(seconds=0.2, tick=0.05, early=True)

    async def first() -> None:
        deadlines.forget(deadlines.watch())  # the loop ends before the timer's check

    async def second() -> float:
        started = time.monotonic()
        task = deadlines.watch()
        assert task is asyncio.current_task()
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            assert deadlines.was_cut(task)
            task.uncancel()
        finally:
            deadlines.forget(task)
        return time.monotonic() - started

    asyncio.run(first())
    assert deadlines._timer is not None
    elapsed = asyncio.run(second())
    assert 0.15 <= elapsed <= 0.2 + 0.05, elapsed
