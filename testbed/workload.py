"""The client workers of ``make chaos-network`` (:mod:`testbed.chaos_network`), each on
a test host of its own, and what they record (:class:`testbed.history.Op`).

Each worker runs :class:`petstore.client.Client` through HAProxy as callers would,
with the client's own retries. Of 10 operations: 6 creates with an Idempotency-Key
(which is also the animal's name; 1 in 40 is ``sold``, so that a walk of that status
reaches its newest animals), 2 getPet (half of them of one of the 8 newest ids any
worker had acknowledged, half of any of the last 500), and 2 list walks of 100 a page
following ``rel="next"``, one of three kinds: every ``sold`` animal to the end, the
rest of a walk from a ``rel="next"`` cursor another walk took at most 5 s before
(the cursor to its last page: the newest animals), or the first 300 of a random
status. A reader (``load(..., readers=1)``) only reads: of 5 operations, 4 getPet and
a list walk, so that whether reads are served shows while every other worker waits
on a create (D27 bounds reads apart from creates). Every page is recorded with its
own times and animals, every operation with its HTTP requests (retries included).
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import msgspec

from petstore.client import EventHooks, PetStatus
from petstore.client.core import decode_page, next_params
from petstore.client.errors import NotFoundError, PetstoreClientError
from testbed.chaos import client
from testbed.cluster import Cluster
from testbed.history import Op, Page, Pet
from testbed.hosts import Network

_STATUSES = list(PetStatus)
#: The rare status: 1 in 40 creates, so that walks of it are complete.
RARE = PetStatus.SOLD
#: How old a remembered cursor may be to start a walk from (seconds).
CURSOR_AGE = 5.0
#: A worker's operations, in turn: 6 creates, 2 getPet, 2 list walks.
MIX = ("create",) * 6 + ("read",) * 2 + ("list",) * 2
#: A reader's: 4 getPet, a list walk.
READER_MIX = ("read",) * 4 + ("list",)


class Recorder:
    """What the workers did (``ops``), shared by them (appends only), the ids
    acknowledged so far, which any worker reads back, and the latest cursors to a
    walk's last page: (when taken, status, the next URL, the id it continues after)."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.acknowledged: list[int] = []
        self.cursors: deque[tuple[float, str, str, int]] = deque(maxlen=64)


class _Trace:
    """One worker's record of its current operation's HTTP exchanges: the pages
    answered, each page's ``rel="next"`` URL, and the requests sent."""

    def __init__(self) -> None:
        self.pages: list[Page] = []
        self.links: list[str | None] = []
        self.requests = 0
        self.sent: dict[int, float] = {}

    def clear(self) -> None:
        self.pages.clear()
        self.links.clear()
        self.requests = 0
        self.sent.clear()

    def request(self, req: httpx.Request) -> None:
        self.requests += 1
        self.sent[id(req)] = time.monotonic()

    def response(self, res: httpx.Response) -> None:
        started = self.sent.pop(id(res.request), 0.0)
        if res.status_code == 200 and res.request.url.path.endswith("/pets"):
            res.read()
            pets = tuple(msgspec.json.decode(res.content, type=list[Pet]))
            link = res.links.get("next", {}).get("url")
            ids = tuple(pet.id for pet in pets)
            self.pages.append(
                Page(
                    started=started,
                    ended=time.monotonic(),
                    ids=ids,
                    more=link is not None,
                    pets=pets,
                )
            )
            self.links.append(link)


def _outcome(exc: PetstoreClientError) -> tuple[str, int]:
    """``failed`` with the HTTP status, or ``unknown`` when no answer came."""
    return ("failed", exc.status) if exc.status is not None else ("unknown", 0)


def worker(
    index: int, cluster: Cluster, key: str, book: Recorder, stop: threading.Event,
    prefix: str = "w", mix: tuple[str, ...] = MIX,
) -> None:  # fmt: skip
    """On host ``client<index+1>``: the operations of ``mix`` in turn until ``stop``,
    once a first animal is acknowledged (until then a worker creates, a reader
    waits); its animals are named (and keyed) ``<prefix><index>-<n>``."""
    rng = random.Random(index)
    trace = _Trace()
    assert isinstance(cluster.hosts, Network)
    hooks: EventHooks = {"request": [trace.request], "response": [trace.response]}
    with cluster.hosts.entered(f"client{index + 1}"), client(cluster, key, hooks) as api:
        for n in itertools.count():
            if stop.is_set():
                return
            if not book.acknowledged and "create" not in mix:
                time.sleep(0.05)  # a reader waits for an animal to read
                continue
            kind = mix[n % len(mix)] if book.acknowledged else "create"
            book.ops.append(_one(api, kind, index, n, rng, book, trace, prefix))


def _create_status(rng: random.Random) -> PetStatus:
    """A create's status: :data:`RARE` 1 in 40, else one of the others."""
    if rng.randrange(40) == 0:
        return RARE
    return rng.choice([s for s in _STATUSES if s != RARE])


def _one(
    api: Any, kind: str, index: int, n: int, rng: random.Random, book: Recorder, trace: _Trace,
    prefix: str,
) -> Op:  # fmt: skip
    """One operation of worker ``index``, recorded whatever its outcome."""
    started, outcome, code = time.monotonic(), "ok", 0
    name, asked, status, after = f"{prefix}{index}-{n}", 0, str(rng.choice(_STATUSES)), 0
    value: Pet | None = None
    trace.clear()
    try:
        if kind == "create":
            status = str(_create_status(rng))
            pet = api.create_pet(name, category_id=1 + n % 7, status=status, idempotency_key=name)
            value = pet
            book.acknowledged.append(pet.id)
        elif kind == "read":
            newest = rng.random() < 0.5
            asked = rng.choice(book.acknowledged[-8:] if newest else book.acknowledged[-500:])
            try:
                value = api.get_pet(asked)
            except NotFoundError:
                value = None
        else:
            status, after = _walk(api, rng, book, trace, status)
    except (PetstoreClientError, OSError) as exc:
        outcome, code = _outcome(exc) if isinstance(exc, PetstoreClientError) else ("unknown", 0)
    return Op(
        worker=index,
        kind=kind,
        started=started,
        ended=time.monotonic(),
        outcome=outcome,
        code=code,
        key=name,
        asked=asked,
        status=status,
        value=value,
        pages=tuple(trace.pages) if kind == "list" else (),
        after=after,
        attempts=trace.requests,
    )


def _walk(
    api: Any, rng: random.Random, book: Recorder, trace: _Trace, status: str
) -> tuple[str, int]:
    """One list walk of the three kinds; returns its status and the id it continued
    after (0 from the first page). Remembers the cursor to the last page of a walk
    that reached it. Raises the client's errors."""
    latest = book.cursors[-1] if book.cursors else None  # other threads only append
    choice = rng.randrange(3)
    after = 0
    if choice == 1 and latest is not None and latest[0] > time.monotonic() - CURSOR_AGE:
        _, status, url, after = latest
        # The client's own request with its retries: it has no public call for a link.
        page = decode_page(api._send("GET", "pets", params=next_params(url)))
        for _ in range(9):  # at most 10 pages
            if page.next_url is None:
                break
            page = decode_page(api._send("GET", "pets", params=next_params(page.next_url)))
    elif choice in (0, 1):
        status = str(RARE)
        for _ in itertools.islice(api.iter_pets(status, limit=100), 20_000):
            pass
    else:
        for _ in itertools.islice(api.iter_pets(status, limit=100), 300):
            pass
    pages, links = trace.pages, trace.links
    if len(pages) >= 2 and not pages[-1].more and links[-2] and pages[-2].ids:
        book.cursors.append((pages[-2].ended, status, links[-2], pages[-2].ids[-1]))
    return status, after


@contextmanager
def load(
    cluster: Cluster, key: str, workers: int, *, prefix: str = "w", readers: int = 0
) -> Iterator[Recorder]:
    """``workers`` threads of :func:`worker` (on hosts ``client1``..) for as long as
    the block runs, naming their animals with ``prefix``, the last ``readers`` of them
    (fewer than ``workers``) readers of :data:`READER_MIX`; the recorder they fill."""
    book, stop = Recorder(), threading.Event()
    mixes = [MIX] * (workers - readers) + [READER_MIX] * readers
    threads = [
        threading.Thread(
            target=worker, args=(i, cluster, key, book, stop, prefix, mix), daemon=True
        )
        for i, mix in enumerate(mixes)
    ]
    for thread in threads:
        thread.start()
    try:
        yield book
    finally:
        stop.set()
        for thread in threads:
            thread.join(180)
