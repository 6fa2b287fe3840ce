"""The rate-limit probe of ``make chaos-network``: one client host calling listPets
(``limit=1``) with an API key of its own under a real limit, :data:`LIMIT` requests a
second (D22), about :data:`PACE` times a second, so that the faults on Redis change a
checked number.

While Redis answers, every answer carries the RateLimit fields and at most
:data:`LIMIT` calls a window succeed (any 1 s span holds parts of two windows, so at
most twice that). While an instance cannot reach Redis it fails open (D15): it
answers 200 without the fields. After Redis returns, no answer may fail open more
than :data:`BOUND` seconds later. :func:`judge` counts all three from the answers.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

import httpx

from testbed.cluster import Cluster
from testbed.hosts import Network

#: The probe's key's limit: requests a second.
LIMIT = 3
#: Calls a second the probe makes (more than the limit: some are refused 429).
PACE = 20
#: Seconds after Redis returns within which every instance counts again.
BOUND = 5.0


class Answer(NamedTuple):
    """One call: when it was answered (monotonic seconds), its status (0: none), and
    whether it carried the RateLimit fields (counted in Redis)."""

    at: float
    status: int
    counted: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Judgement:
    """What the answers show: calls made; calls that succeeded beyond twice the limit
    in some 1 s span while counted (a defect); answers failing open (200 without the
    fields) and the seconds they spanned; the latest of them after Redis had returned,
    in seconds after its return (0: none); and how many failed open more than
    :data:`BOUND` seconds after Redis had returned, or with Redis never lost (a
    defect), and when each of those was answered (monotonic seconds)."""

    calls: int
    over_limit: int
    failing_open: int
    open_seconds: float
    longest_return: float
    late: int
    late_at: tuple[float, ...] = ()


def call(client: httpx.Client, url: str) -> Answer:
    """One listPets call with ``client`` (its key set), recorded."""
    try:
        response = client.get(f"{url}/pets", params={"limit": 1})
    except httpx.HTTPError:
        return Answer(time.monotonic(), 0, False)
    return Answer(time.monotonic(), response.status_code, "ratelimit" in response.headers)


@contextmanager
def probing(cluster: Cluster, key: str, host: str) -> Iterator[list[Answer]]:
    """Call the service from test host ``host`` with ``key``, :data:`PACE` times a
    second, for as long as the block runs; yields the answers as they come."""
    answers: list[Answer] = []
    stop = threading.Event()

    def run() -> None:
        assert isinstance(cluster.hosts, Network)
        headers = {"Authorization": f"Bearer {key}"}
        trust = cluster.balancers.trust()
        with (
            cluster.hosts.entered(host),
            httpx.Client(headers=headers, timeout=2, verify=trust) as client,
        ):
            while not stop.wait(1 / PACE):
                answers.append(call(client, cluster.url))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield answers
    finally:
        stop.set()
        thread.join(10)


def judge(answers: list[Answer], outages: list[tuple[float, float]]) -> Judgement:
    """Count what :class:`Judgement` names in ``answers`` (in time order), Redis
    having been out of reach over each of ``outages`` (from, to: monotonic seconds)."""
    allowed = [a.at for a in answers if a.status == 200 and a.counted]
    over = 0
    for i, at in enumerate(allowed):  # the successes in the 1 s up to each one, it included
        inside = i - bisect_right(allowed, at - 1.0) + 1
        over = max(over, inside - 2 * LIMIT)
    open_at = [a.at for a in answers if a.status == 200 and not a.counted]
    spans, start, last = 0.0, 0.0, None
    for at in open_at:  # stretches of failing open: answers less than 1 s apart
        if last is None or at - last > 1.0:
            spans += 0.0 if last is None else last - start
            start = at
        last = at
    spans += 0.0 if last is None else last - start
    # Each answer failing open against the latest change before it: within an outage
    # it is what D15 says; after a return, its lag; before any outage, never right.
    events = sorted([(out, "out") for out, _ in outages] + [(back, "back") for _, back in outages])
    lags: list[tuple[float, float]] = []  # (answered at, lag)
    for at in open_at:
        latest = [(when, what) for when, what in events if when <= at]
        if not latest:
            lags.append((at, float("inf")))
        elif latest[-1][1] == "back":
            lags.append((at, at - latest[-1][0]))
    finite = [lag for _, lag in lags if lag != float("inf")]
    late_at = tuple(at for at, lag in lags if lag > BOUND)
    return Judgement(
        calls=len(answers), over_limit=over, failing_open=len(open_at), open_seconds=spans,
        longest_return=max(finite, default=0.0), late=len(late_at), late_at=late_at,
    )  # fmt: skip
