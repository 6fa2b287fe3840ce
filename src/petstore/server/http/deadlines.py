"""Deadlines for many tasks at once, checked by one timer: the request timeout (D25)
and the request body timeout (D17).

A speed device, so it lives here alone: ``asyncio.timeout`` around each request
schedules and cancels a timer handle on the event loop's heap (docs/performance.md
has what that costs). Here a request costs one dict insert and one pop; one timer,
running only while some task is watched, checks every deadline each ``tick`` seconds
and cancels the tasks past theirs, as ``asyncio.timeout`` would. The running task is
asked of the event loop last seen: ``asyncio.current_task()`` without it asks the
operating system for the process id first (a system call, in
``asyncio.get_running_loop``). Time is the service's monotonic clock
(:mod:`petstore.server.clock`).

Invariant: a watched task is cancelled at most once by its deadline, no earlier
than ``seconds - tick`` after :meth:`Deadlines.watch` and no later than
``seconds`` (plus the event loop's lateness); :meth:`Deadlines.forget` must follow
every :meth:`Deadlines.watch` (a ``finally``), else the timer keeps running.
tests/server/http/test_asgi.py pins both ends.
"""

from __future__ import annotations

import asyncio
from typing import Any

from petstore.server.clock import monotonic


class Deadlines:
    """Cancels each watched task ``seconds`` after it was watched (seconds > 0), from
    one event loop at a time, by :func:`petstore.server.clock.monotonic` (a timer on
    the loop checks every ``tick`` seconds). With ``early``, a task may be cut up to
    ``tick`` seconds before its deadline, never after it; without, never before it
    and up to ``tick`` after."""

    def __init__(self, *, seconds: float, tick: float, early: bool = False) -> None:
        self.seconds = seconds
        self.tick = tick
        self._offset = seconds - tick if early else seconds
        self._watched: dict[asyncio.Task[Any], float] = {}  # task -> deadline, monotonic()
        self._cut: set[asyncio.Task[Any]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the one last watched from

    def watch(self) -> asyncio.Task[Any]:
        """Start the clock of the task running now, and return that task. Raises
        RuntimeError outside a task."""
        loop = self._loop
        task = None if loop is None else asyncio.current_task(loop)
        if loop is None or task is None:  # the first watch, or another loop than the last's
            loop = self._loop = asyncio.get_running_loop()
            if self._timer is not None:  # the last loop's, which no longer runs
                self._timer.cancel()
                self._timer = None
            task = asyncio.current_task(loop)
            if task is None:
                raise RuntimeError("Deadlines.watch is for code running in a task")
        self._watched[task] = monotonic() + self._offset
        if self._timer is None:
            self._timer = loop.call_later(self.tick, self._check)
        return task

    def was_cut(self, task: asyncio.Task[Any]) -> bool:
        """Whether this ``task`` was cancelled by its deadline (its CancelledError is
        then ours to answer, after ``task.uncancel()``)."""
        return task in self._cut

    def forget(self, task: asyncio.Task[Any]) -> None:
        """Stop watching ``task`` (whether or not it was cut)."""
        self._watched.pop(task, None)
        if self._cut:
            self._cut.discard(task)

    def _check(self) -> None:
        now = monotonic()
        for task, deadline in self._watched.items():
            if deadline <= now and task not in self._cut:
                self._cut.add(task)
                task.cancel()
        loop = self._loop
        self._timer = loop.call_later(self.tick, self._check) if self._watched and loop else None
