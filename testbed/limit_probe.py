"""The rate-limit probe of ``make chaos-network``: one client host calling listPets
(``limit=1``) with an API key of its own under a real limit, :data:`LIMIT` requests a
second (D22), about :data:`PACE` times a second, so that the faults on Redis change a
checked number.

While Redis answers, every answer carries the RateLimit fields and at most
:data:`LIMIT` calls a window succeed (any 1 s span holds parts of two windows, so at
most twice that). While an instance cannot reach Redis it fails open (D15): it
answers 200 without the fields. After Redis returns, no answer may fail open more
than :data:`BOUND` seconds later. :func:`judge` counts all three from the answers.

Redis can also stand still without a fault: while it loads a renewed certificate, or
while the machine running the whole deployment is busy (a rolling restart). A worker's
call it does not answer within D15's 0.25 s fails open as it should, and that is not
a fault of the service. So the probe watches Redis too, from the same host, with a
PING every :data:`WATCH_EVERY` seconds: a PING unanswered after :data:`STALL` seconds
(or failed) marks a stall, which :func:`judge` takes as a short outage, and says apart
how many answers failing open only a stall explains.
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
import redis

from testbed.cluster import Cluster
from testbed.hosts import Network

#: The probe's key's limit: requests a second.
LIMIT = 3
#: Calls a second the probe makes (more than the limit: some are refused 429).
PACE = 20
#: Seconds after Redis returns within which every instance counts again.
BOUND = 5.0
#: Seconds between the watch's PINGs to Redis.
WATCH_EVERY = 0.05
#: Seconds an instance waits for a Redis call's answer before failing open (D15; the
#: service's ``REDIS_TIMEOUT_SECONDS``, which the test bed does not import).
CALL_SECONDS = 0.25
#: Seconds after which an unanswered PING marks a stall: a worker's call that met the
#: same stillness waited :data:`CALL_SECONDS` from a moment up to one
#: :data:`WATCH_EVERY` before the PING was sent.
STALL = CALL_SECONDS - WATCH_EVERY


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
    in seconds after its return (0: none); how many failed open more than
    :data:`BOUND` seconds after Redis had returned or stood still, or with Redis
    never lost (a defect), and when each of those was answered (monotonic seconds);
    the stalls the watch saw outside the outages and the longest of them (seconds);
    and the answers failing open that only a stall explains (D15, not a defect)."""

    calls: int
    over_limit: int
    failing_open: int
    open_seconds: float
    longest_return: float
    late: int
    late_at: tuple[float, ...] = ()
    stalls: int = 0
    longest_stall: float = 0.0
    after_stall: int = 0


def call(client: httpx.Client, url: str) -> Answer:
    """One listPets call with ``client`` (its key set), recorded."""
    try:
        response = client.get(f"{url}/pets", params={"limit": 1})
    except httpx.HTTPError:
        return Answer(time.monotonic(), 0, False)
    return Answer(time.monotonic(), response.status_code, "ratelimit" in response.headers)


@dataclass(frozen=True, slots=True)
class Probe:
    """What the probe records as it runs: the answers, and the stalls of Redis the
    watch saw (from, to: monotonic seconds), each in time order."""

    answers: list[Answer]
    stalls: list[tuple[float, float]]


def watch(url: str, stop: threading.Event, stalls: list[tuple[float, float]]) -> None:
    """PING the Redis of ``url`` every :data:`WATCH_EVERY` seconds until ``stop`` is
    set, appending to ``stalls`` each PING's span that took over :data:`STALL`
    seconds or failed."""
    with redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=1) as client:
        while not stop.wait(WATCH_EVERY):
            sent = time.monotonic()
            try:
                answered = client.ping()
            except redis.RedisError:
                answered = False
            if not answered or time.monotonic() - sent > STALL:
                stalls.append((sent, time.monotonic()))


@contextmanager
def probing(cluster: Cluster, key: str, host: str) -> Iterator[Probe]:
    """Call the service from test host ``host`` with ``key``, :data:`PACE` times a
    second, and :func:`watch` Redis from there, for as long as the block runs;
    yields what they record as it comes."""
    probe = Probe([], [])
    answers = probe.answers
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

    def run_watch() -> None:
        assert isinstance(cluster.hosts, Network)
        with cluster.hosts.entered(host):
            watch(cluster.redis_url, stop, probe.stalls)

    threads = [threading.Thread(target=target, daemon=True) for target in (run, run_watch)]
    for thread in threads:
        thread.start()
    try:
        yield probe
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)


def judge(
    answers: list[Answer],
    outages: list[tuple[float, float]],
    stalls: list[tuple[float, float]] | None = None,
) -> Judgement:
    """Count what :class:`Judgement` names in ``answers`` (in time order), Redis
    having been out of reach over each of ``outages`` and standing still over each of
    ``stalls`` (from, to: monotonic seconds)."""
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
    lags = _lags(open_at, outages)
    finite = [lag for _, lag in lags if lag != float("inf")]
    # A stall overlapping an outage (the watch's PINGs failing while Redis is cut
    # off) is that outage's; the others stand for themselves.
    own = [(a, b) for a, b in stalls or () if not any(a <= y and x <= b for x, y in outages)]
    late_at = tuple(at for at, lag in _lags(open_at, outages + own) if lag > BOUND)
    return Judgement(
        calls=len(answers), over_limit=over, failing_open=len(open_at), open_seconds=spans,
        longest_return=max(finite, default=0.0), late=len(late_at), late_at=late_at,
        stalls=len(own), longest_stall=max((b - a for a, b in own), default=0.0),
        after_stall=sum(lag > BOUND for _, lag in lags) - len(late_at),
    )  # fmt: skip


def _lags(open_at: list[float], outages: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Each answer failing open (``open_at``) against the latest change of Redis
    before it: none within an outage (what D15 says); after a return, (answered at,
    seconds since); before any outage, (answered at, infinity), never right."""
    events = sorted([(out, "out") for out, _ in outages] + [(back, "back") for _, back in outages])
    lags: list[tuple[float, float]] = []
    for at in open_at:
        latest = [(when, what) for when, what in events if when <= at]
        if not latest:
            lags.append((at, float("inf")))
        elif latest[-1][1] == "back":
            lags.append((at, at - latest[-1][0]))
    return lags
