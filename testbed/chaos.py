"""``make chaos``: client workers run through HAProxy while the deployment is broken,
one fault after another, and then the store is checked against what the clients
were told.

    python -m testbed.chaos [--rounds 2] [--instances 3] [--workers 8]

The faults, in order, each round: an instance is SIGKILLed and restarted; every
instance is restarted in turn (a rolling deploy: SIGTERM, drain, start, back in
rotation); the PostgreSQL primary is SIGKILLed with its keeper (a lost machine), a
secondary promoted, the old primary brought back as a secondary; Redis is
restarted. The workers use :class:`petstore.client.Client` as any caller would:
creates with an Idempotency-Key, lists following ``rel="next"``, reads; the client
retries on its own (connection errors, 429, 503) for about half a minute.

It prints a table per fault and, last, ``chaos: acknowledged N, lost L, duplicated
D, failed F``: N creates answered 201; L of them missing or changed in the store; D
names stored more than once; F operations that failed after the client's retries.
Exit status 0 when L, D and F are all 0. Loopback only; everything it started is
stopped when it ends, interrupted or not.
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
import signal
import socket
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import msgspec

from petstore.client import Client, EventHooks, Pet, PetStatus
from petstore.client.errors import PetstoreClientError
from testbed.cluster import Cluster
from testbed.failover import NODES

#: The workers' client: retries after the first attempt, and each attempt's timeout (s).
RETRIES, TIMEOUT = 30, 10.0
#: TCP keepalives on the workers' connections: a probe after 1 s without traffic,
#: then every 1 s, 3 unanswered and the connection is dropped. A request sent to a
#: load balancer that froze is acknowledged by its kernel and never answered; once
#: the address has moved (D27), the next probe reaches the other load balancer, which
#: resets the connection, and the client retries at once instead of waiting its
#: 10 s timeout (docs/operations/deploy.md, step 10b).
KEEPALIVES = [
    (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
    (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 1),
    (socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 1),
    (socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3),
]


def client(cluster: Cluster, key: str, hooks: EventHooks | None = None) -> Client:
    """A client of ``cluster``'s service as the workers use it: over TLS, HAProxy's
    certificate verified against the test bed's CA (:meth:`Balancers.trust
    <testbed.balancers.Balancers.trust>`), with its own retry budget: 30 retries (no
    time bound), 0.25 s doubling to at most 2 s apart, or the service's Retry-After:
    about 30 s of sleeps, more than a database failover takes; each attempt waits up
    to 10 s for its answer, and a connection whose peer vanished is dropped within
    about 1 s (:data:`KEEPALIVES`)."""
    transport = httpx.HTTPTransport(verify=cluster.balancers.trust(), socket_options=KEEPALIVES)
    return Client(
        cluster.url, api_key=key, max_retries=RETRIES, retry_for=math.inf, backoff=0.25,
        max_sleep=2.0, timeout=TIMEOUT, transport=transport, event_hooks=hooks,
    )  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class Operation:
    """One call of a worker: what, when (monotonic seconds), whether it failed, and
    the status of each HTTP answer it got (0 for an attempt that got none)."""

    kind: str
    started: float
    ended: float
    failed: bool
    answers: tuple[int, ...] = ()


@dataclass(slots=True)
class Ledger:
    """What the workers did and were told, shared by them (appends only)."""

    operations: list[Operation] = field(default_factory=list)
    #: Each acknowledged animal by name: the answer, holding what was sent.
    acknowledged: dict[str, Pet] = field(default_factory=dict)
    attempted: set[str] = field(default_factory=set)
    requests: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class Fault:
    """A fault's window, from its start to the end of its settling time."""

    name: str
    started: float
    ended: float


def worker(index: int, cluster: Cluster, key: str, ledger: Ledger, stop: threading.Event) -> None:
    """Creates (6 in 10), reads of its own animals (2), and lists of up to 250
    animals following ``rel="next"`` (2), until ``stop``; records every outcome."""
    rng = random.Random(index)
    answers: list[int] = []

    def sent(_request: object) -> None:
        ledger.requests.append(time.monotonic())
        answers.append(0)

    def answered(response: httpx.Response) -> None:
        answers[-1] = response.status_code

    hooks: EventHooks = {"request": [sent], "response": [answered]}
    mine: list[int] = []
    with client(cluster, key, hooks) as petstore:
        for n in itertools.count():
            if stop.is_set():
                return
            kind = ("create",) * 6 + ("read",) * 2 + ("list",) * 2
            what = kind[n % 10] if mine else "create"
            started = time.monotonic()
            answers.clear()
            try:
                if what == "create":
                    name, status = f"chaos-{index}-{n}", rng.choice(list(PetStatus))
                    ledger.attempted.add(name)
                    category = 1 + n % 7
                    pet = petstore.create_pet(
                        name, category_id=category, status=status, idempotency_key=name
                    )
                    ledger.acknowledged[name] = msgspec.structs.replace(
                        pet, name=name, category_id=category, status=status
                    )
                    mine.append(pet.id)
                elif what == "read":
                    petstore.get_pet(rng.choice(mine))
                else:
                    status = rng.choice(list(PetStatus))
                    for _ in itertools.islice(petstore.iter_pets(status, limit=100), 250):
                        pass
                failed = False
            except (PetstoreClientError, OSError) as exc:
                failed = True
                ledger.errors.append(f"{what}: {type(exc).__name__}: {exc}")
            ended = time.monotonic()
            ledger.operations.append(
                Operation(
                    kind=what, started=started, ended=ended, failed=failed, answers=tuple(answers)
                )
            )


@contextmanager
def load(cluster: Cluster, key: str, workers: int) -> Iterator[Ledger]:
    """``workers`` threads of :func:`worker` for as long as the block runs."""
    ledger, stop = Ledger(), threading.Event()
    threads = [
        threading.Thread(target=worker, args=(i, cluster, key, ledger, stop), daemon=True)
        for i in range(workers)
    ]
    for thread in threads:
        thread.start()
    try:
        yield ledger
    finally:
        stop.set()
        for thread in threads:
            thread.join(120)


def faults(cluster: Cluster) -> list[tuple[str, Callable[[], None]]]:
    """The faults of one round, each a name and what breaks and repairs it."""

    def kill_instance() -> None:
        cluster.stop_instance(0, signal.SIGKILL)
        time.sleep(2)
        cluster.start_instance(0)
        cluster.wait_in_rotation([0])

    def rolling_deploy() -> None:
        for index in range(len(cluster.instances)):
            cluster.stop_instance(index, signal.SIGTERM)
            cluster.start_instance(index)
            cluster.wait_in_rotation([index])

    def kill_primary() -> None:
        primary = cluster.postgres.primary()
        cluster.postgres.kill_node(primary)
        cluster.postgres.wait_for_promotion([i for i in range(NODES) if i != primary])
        cluster.postgres.start_node(primary)
        cluster.postgres.wait_until_replicated()

    def restart_redis() -> None:
        cluster.stop_redis()
        time.sleep(1)
        cluster.start_redis()

    return [
        ("instance SIGKILLed, restarted", kill_instance),
        ("rolling restart of every instance", rolling_deploy),
        ("PostgreSQL primary killed, secondary promoted", kill_primary),
        ("Redis restarted", restart_redis),
    ]


def run(
    root: Path,
    *,
    rounds: int,
    instances: int,
    workers: int,
    settle: float,
    overrides: dict[str, str] | None = None,
    out: Any = sys.stdout,
) -> dict[str, int]:
    """Bring the topology up under ``root``, run the faults ``rounds`` times under
    load, check the store, print the tables and the last line; returns the counts
    (``acknowledged``, ``lost``, ``duplicated``, ``failed``). Stops everything."""
    warnings.simplefilter("ignore", DeprecationWarning)  # getPet's, on every read
    cluster = Cluster(root, instances=instances, overrides=overrides)
    windows: list[Fault] = []
    try:
        started = time.monotonic()
        key = cluster.up()
        print(f"Topology up in {time.monotonic() - started:.1f} s: {cluster.url}", file=out)
        with load(cluster, key, workers) as ledger:
            began = time.monotonic()
            time.sleep(settle)
            windows.append(Fault(name="no fault (baseline)", started=began, ended=time.monotonic()))
            for _ in range(rounds):
                for name, fault in faults(cluster):
                    began = time.monotonic()
                    fault()
                    time.sleep(settle)
                    windows.append(Fault(name=name, started=began, ended=time.monotonic()))
        stored = _stored(cluster, key)
    finally:
        cluster.down()
    return report(ledger, windows, stored, out=out)


def _stored(cluster: Cluster, key: str) -> dict[str, list[Pet]]:
    """Every animal in the store by name, read through the service."""
    stored: dict[str, list[Pet]] = {}
    with client(cluster, key) as petstore:
        for pet in petstore.iter_pets(limit=100):
            stored.setdefault(pet.name, []).append(pet)
    return stored


def report(
    ledger: Ledger,
    windows: list[Fault],
    stored: dict[str, list[Pet]],
    *,
    out: Any = sys.stdout,
) -> dict[str, int]:
    """Print one row per fault window and the last line; returns the counts.

    An operation counts in the window it ended in: one that started just before a
    fault and waited through it is that fault's. ``requests`` are the HTTP requests
    sent in the window, the client's retries included."""
    print(
        "\n| fault | seconds | requests | operations | failed after retries "
        "| longest without a write (s) | p99 (ms) | max (ms) |\n|---|---|---|---|---|---|---|---|",
        file=out,
    )
    for window in windows:
        ops = [op for op in ledger.operations if window.started <= op.ended < window.ended]
        requests = sum(window.started <= t < window.ended for t in ledger.requests)
        writes = sorted(
            op.ended for op in ledger.operations
            if op.kind == "create" and not op.failed and window.started <= op.ended < window.ended
        )  # fmt: skip
        edges = [window.started, *writes, window.ended]
        gap = max(b - a for a, b in itertools.pairwise(edges))
        durations = sorted(op.ended - op.started for op in ops)
        p99 = durations[int(0.99 * (len(durations) - 1))] * 1000 if durations else 0.0
        longest = durations[-1] * 1000 if durations else 0.0
        failed = sum(op.failed for op in ops)
        print(
            f"| {window.name} | {window.ended - window.started:.1f} | {requests} | {len(ops)} "
            f"| {failed} | {gap:.2f} | {p99:.0f} | {longest:.0f} |",
            file=out,
        )
    lost = sum(1 for name, pet in ledger.acknowledged.items() if stored.get(name, [None])[0] != pet)
    duplicated = sum(len(stored.get(name, [])) > 1 for name in ledger.attempted)
    failed = sum(op.failed for op in ledger.operations)
    unacknowledged = sum(name in stored for name in ledger.attempted - ledger.acknowledged.keys())
    print(f"\nAnimals stored without a 201 reaching the client: {unacknowledged}.", file=out)
    for op in sorted(ledger.operations, key=lambda op: op.started - op.ended)[:5]:
        statuses = " ".join(str(status or "no answer") for status in op.answers)
        print(f"  slowest: {op.kind} {op.ended - op.started:.2f} s, answers: {statuses}", file=out)
    for error in ledger.errors[:10]:
        print(f"  failed: {error}", file=out)
    counts = {
        "acknowledged": len(ledger.acknowledged),
        "lost": lost,
        "duplicated": duplicated,
        "failed": failed,
    }
    print(
        f"chaos: acknowledged {counts['acknowledged']}, lost {lost}, "
        f"duplicated {duplicated}, failed {failed}",
        file=out,
    )
    return counts


def main(argv: list[str] | None = None) -> int:
    """The command line of ``make chaos``; exit 0 when nothing was lost, duplicated
    or failed, 1 otherwise."""
    parser = argparse.ArgumentParser(prog="python -m testbed.chaos", description=__doc__)
    parser.add_argument("--rounds", type=int, default=2, help="times through the faults")
    parser.add_argument("--instances", type=int, default=3)
    parser.add_argument("--workers", type=int, default=8, help="client threads")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after each fault")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="petstore-chaos-") as folder:
        counts = run(
            Path(folder),
            rounds=args.rounds,
            instances=args.instances,
            workers=args.workers,
            settle=args.settle,
        )
    return 0 if counts["lost"] == counts["duplicated"] == counts["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
