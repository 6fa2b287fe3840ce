"""The client workers of ``make chaos-network`` (:mod:`testbed.chaos_network`), each on
a test host of its own, and what they record (:class:`testbed.history.Op`).

Each worker runs :class:`petstore.client.Client` through HAProxy as callers would,
with the client's own retries: creates with an Idempotency-Key (6 in 10), getPet of
an id any worker had acknowledged (2), and list walks of up to three pages of 100
following ``rel="next"`` (2), each page recorded with its own times.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from petstore.client import EventHooks, PetStatus
from petstore.client.errors import NotFoundError, PetstoreClientError
from testbed.chaos import client
from testbed.cluster import Cluster
from testbed.history import Op, Page, Pet
from testbed.hosts import Network

_STATUSES = list(PetStatus)


class Recorder:
    """What the workers did (``ops``), shared by them (appends only), and the ids
    acknowledged so far, which any worker reads back."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.acknowledged: list[int] = []


def _outcome(exc: PetstoreClientError) -> tuple[str, int]:
    """``failed`` with the HTTP status, or ``unknown`` when no answer came."""
    return ("failed", exc.status) if exc.status is not None else ("unknown", 0)


def worker(index: int, cluster: Cluster, key: str, book: Recorder, stop: threading.Event) -> None:
    """On host ``client<index+1>``: creates (6 in 10, each with its Idempotency-Key),
    getPet of an id any worker had acknowledged (2) and list walks of up to three
    pages of 100 following ``rel="next"`` (2), until ``stop``."""
    rng = random.Random(index)
    pages: list[Page] = []
    sent: dict[int, float] = {}

    def request(req: httpx.Request) -> None:
        sent[id(req)] = time.monotonic()

    def response(res: httpx.Response) -> None:
        if res.status_code == 200 and res.request.url.path.endswith("/pets"):
            res.read()
            ids = tuple(pet["id"] for pet in res.json())
            more = 'rel="next"' in res.headers.get("link", "")
            pages.append(Page(sent.pop(id(res.request), 0.0), time.monotonic(), ids, more))

    assert isinstance(cluster.hosts, Network)
    hooks: EventHooks = {"request": [request], "response": [response]}
    with cluster.hosts.entered(f"client{index + 1}"), client(cluster.url, key, hooks) as api:
        for n in itertools.count():
            if stop.is_set():
                return
            what = ("create",) * 6 + ("read",) * 2 + ("list",) * 2
            kind = what[n % 10] if book.acknowledged else "create"
            book.ops.append(_one(api, kind, index, n, rng, book, pages))


def _one(
    api: Any, kind: str, index: int, n: int, rng: random.Random, book: Recorder, pages: list[Page]
) -> Op:
    """One operation of worker ``index``, recorded whatever its outcome."""
    started, outcome, code = time.monotonic(), "ok", 0
    name, asked, status = f"w{index}-{n}", 0, rng.choice(_STATUSES)
    value: Pet | None = None
    pages.clear()
    try:
        if kind == "create":
            pet = api.create_pet(name, category_id=1 + n % 7, status=status, idempotency_key=name)
            value = (pet.id, pet.name, pet.category_id, str(pet.status))
            book.acknowledged.append(pet.id)
        elif kind == "read":
            asked = rng.choice(book.acknowledged[-500:])
            try:
                pet = api.get_pet(asked)
                value = (pet.id, pet.name, pet.category_id, str(pet.status))
            except NotFoundError:
                value = None
        else:
            for _ in itertools.islice(api.iter_pets(status, limit=100), 300):
                pass
    except (PetstoreClientError, OSError) as exc:
        outcome, code = _outcome(exc) if isinstance(exc, PetstoreClientError) else ("unknown", 0)
    return Op(
        index, kind, started, time.monotonic(), outcome, code=code, key=name, asked=asked,
        status=str(status), value=value, pages=tuple(pages) if kind == "list" else (),
    )  # fmt: skip


@contextmanager
def load(cluster: Cluster, key: str, workers: int) -> Iterator[Recorder]:
    """``workers`` threads of :func:`worker` (on hosts ``client1``..) for as long as
    the block runs; the recorder they fill."""
    book, stop = Recorder(), threading.Event()
    threads = [
        threading.Thread(target=worker, args=(i, cluster, key, book, stop), daemon=True)
        for i in range(workers)
    ]
    for thread in threads:
        thread.start()
    try:
        yield book
    finally:
        stop.set()
        for thread in threads:
            thread.join(180)
