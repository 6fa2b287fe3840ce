"""``make recovery-drill``: D28 on test hosts, under the closed-loop load of the chaos
runs (:mod:`testbed.workload`), its history checked.

    python -m testbed.recovery_drill [--workers 4] [--load 30] [--mistakes 2] [--animals 0]

1. The deployment comes up on test hosts with its pgBackRest repository on host
   ``backup`` (:class:`~testbed.cluster.Cluster`); with ``--animals N``, N animals
   are put in first by ``COPY``, as ``make bench`` seeds
   (:func:`bench.seed.fill_postgres`); a full backup, its time and size printed; load.
   (``make test`` runs the drill on the deployment of the short ``make chaos-network``
   once its faults are over: :func:`on`.)
2. The primary's last seconds (:func:`testbed.primary_loss.fail_primary`): cut from
   the repository's host, so that its archive falls behind, it takes an operator's
   mistake at a recorded moment T (``DELETE`` of a third of the animals) and finishes
   that WAL segment; then it is lost (its keeper, PostgreSQL and pgBackRest SIGKILLed)
   and a secondary promoted, which archives what the old primary had not
   (deploy/pgbackrest/petstore-pgbackrest-archive-push). The old node rejoins;
   ``pgbackrest verify`` must find every segment valid and none missing (else
   **gaps**). With ``--mistakes 2``, another third is deleted later on the new primary.
3. A restore to T onto new data nodes (:mod:`testbed.restore`, ``--type=time``): every
   animal acknowledged before T must be there unchanged (else **missing** or
   **changed**), every animal there before the drill too (else **missing**), none
   whose create began after T (else **extra**), and Idempotency-Keys used before T
   replay the same animal (else **changed**). The restore's copy, its recovery (and the
   WAL replayed) and the time until three nodes replicate are printed. After it, no
   id acknowledged or read before the restore may be acknowledged again for a create
   (else **ids reused**, D5), here or after step 4.
4. Every data node lost at once under load (keepers and PostgreSQL killed, data
   directories removed), and a restore through the newest archived WAL: the
   acknowledged creates that did not come back (**lost**) and how many seconds before
   the loss they span, and the seconds until ``/readyz`` answers 200 again through the
   load balancers' address.

The last line (one line, wrapped here)::

    recovery-drill: acknowledged A; before the mistake: missing 0, changed 0, extra 0,
    ids reused 0; every data node lost: lost L acknowledged of the last S s
    (archive_timeout T s), serving again after R s

Exit status 0 when missing, changed, extra, ids reused and gaps are 0, S is within
D28's 60 s and R within its 10 minutes; 1 otherwise; 2 when the deployment did not come up
or recover. Everything it started (processes, namespaces) is removed when it ends, on
an error or a signal (SIGINT, SIGTERM) too.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import tempfile
import threading
import time
import traceback
import warnings
from pathlib import Path
from types import FrameType
from typing import Any

import psycopg

from bench import seed as seed_store
from testbed import primary_loss, restore, workload
from testbed.chaos import client
from testbed.cluster import Cluster
from testbed.ops import Op, sent
from testbed.processes import ServerUnavailableError, answers
from testbed.recovery_check import (
    SERVING_BOUND,
    Drill,
    Moment,
    acknowledged,
    archive_timeout,
    judge,
    passed,
)

#: How many Idempotency-Keys used before the mistake are replayed after the restore.
REPLAYS = 20
#: What the drill's workers' animals are named with (``d0-17``): never a key that
#: a chaos run's workers on the same deployment used before.
PREFIX = "d"


def mistake(cluster: Cluster, remainder: int) -> Moment:
    """On the primary: the moment, then ``DELETE`` of the animals whose id is
    ``remainder`` modulo 3 (a third), committed."""
    with psycopg.connect(cluster.postgres.url, autocommit=True) as connection:
        before = time.monotonic()
        row = connection.execute("SELECT clock_timestamp()::text").fetchone()
        after = time.monotonic()
        connection.execute("DELETE FROM pets WHERE id %% 3 = %s", (remainder,))
    assert row is not None
    return Moment(timestamp=row[0], before=before, after=after)


class Readiness:
    """When ``/readyz`` through the load balancers' address first answered 200 again
    after :meth:`watch` began (monotonic seconds; None: not yet): after it has failed
    at least once. Polled every 100 ms from the harness's host."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.ready_at: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self) -> None:
        """Start watching (before the data nodes go)."""
        self.ready_at = None
        self._stop.clear()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        lbs, failed = self.cluster.balancers, False
        with self.cluster.harness():
            while not self._stop.is_set():
                ready = answers(lbs.port, "/readyz", host=lbs.address, tls=lbs.trust())
                if ready and failed:
                    self.ready_at = time.monotonic()
                    return
                failed = failed or not ready
                time.sleep(0.1)

    def wait(self, seconds: float) -> float:
        """Wait up to ``seconds`` for the answer; returns when it came. Raises
        ServerUnavailableError when none came."""
        assert self._thread is not None
        self._thread.join(seconds)
        self._stop.set()
        if self.ready_at is None:
            raise ServerUnavailableError(f"/readyz not 200 again within {seconds:g} s")
        return self.ready_at


def run(
    root: Path, *, workers: int, load: float, mistakes: int, before_loss: float | None = None,
    seed: int = 54, animals: int = 0, out: Any = sys.stdout,
) -> dict[str, float]:  # fmt: skip
    """The drill (:func:`on`) on a deployment of its own on test hosts under
    ``root``, with ``workers`` client hosts, ``animals`` put in first; removes
    everything. Raises ServerUnavailableError when the deployment does not come up or
    recover."""
    warnings.simplefilter("ignore", DeprecationWarning)  # getPet's, on every read
    cluster = Cluster(root, instances=2, on_hosts=True, clients=workers)
    try:
        began = time.monotonic()
        key = cluster.up()
        print(f"Test hosts up, stanza created, full backup taken in "
              f"{time.monotonic() - began:.1f} s: {cluster.url}", file=out, flush=True)  # fmt: skip
        with cluster.harness():
            if animals:
                began = time.monotonic()
                seed_store.fill_postgres(cluster.postgres.url, pets=animals)
                print(f"  {animals} animals put in by COPY in {time.monotonic() - began:.1f} s",
                      file=out, flush=True)  # fmt: skip
            return on(cluster, key, workers=workers, load=load, mistakes=mistakes,
                      before_loss=before_loss, seed=seed, out=out)  # fmt: skip
    finally:
        cluster.down()


def on(
    cluster: Cluster, key: str, *, workers: int, load: float, mistakes: int,
    before_loss: float | None = None, seed: int = 54, out: Any = sys.stdout,
) -> dict[str, float]:  # fmt: skip
    """The drill on ``cluster`` (up, on test hosts, with its repository; called in
    its harness's host) with ``key``: a full backup, then ``workers`` workers (on hosts
    ``client1``..) for the rest; ``load`` seconds of load before the first mistake
    (and shares of it between the other steps), ``mistakes`` of them (1 or 2), and
    ``before_loss`` seconds between the backup after the first restore and the loss
    (None: archive_timeout and a random share of it more). Prints the steps and the
    last line; returns the counts. On an error the cluster is taken down at once (so
    that the workers end) and the error raised: ServerUnavailableError when the
    deployment does not recover."""
    assert cluster.repository is not None
    drill = Drill()
    rng = random.Random(seed)
    began = time.monotonic()
    cluster.repository.backup("full")
    took = time.monotonic() - began
    size = cluster.repository.info()["backup"][-1]["info"]
    with psycopg.connect(cluster.postgres.url) as connection:  # what was there before
        row = connection.execute("SELECT coalesce(max(id), 0), count(*) FROM pets").fetchone()
    drill.before_drill, drill.before_count = (row[0], row[1]) if row else (0, 0)
    print(f"  full backup of {drill.before_count} animals: {took:.1f} s, database "
          f"{size['size'] / 2**20:.0f} MiB, {size['repository']['size'] / 2**20:.0f} MiB "
          f"in the repository", file=out, flush=True)  # fmt: skip
    with workload.load(cluster, key, workers, prefix=PREFIX) as book:
        try:
            _steps(cluster, key, book, drill, rng, load=load, mistakes=mistakes,
                   before_loss=before_loss, out=out)  # fmt: skip
        except BaseException:  # down before the workers are joined: they end at once
            # Said first: down() ends every process in the test hosts, this one among
            # them when it runs in the harness's host.
            traceback.print_exc()
            cluster.down()
            raise
    return judge(book.ops, drill, out=out)


def _steps(
    cluster: Cluster, key: str, book: workload.Recorder, drill: Drill, rng: random.Random,
    *, load: float, mistakes: int, before_loss: float | None, out: Any,
) -> None:  # fmt: skip
    readiness = Readiness(cluster)
    assert cluster.repository is not None
    time.sleep(load)
    began = time.monotonic()
    drill.moment, failover = primary_loss.fail_primary(cluster, lambda: mistake(cluster, 0))
    print(f"  mistake at {drill.moment.timestamp}: a third of the animals deleted; "
          f"{failover}", file=out, flush=True)  # fmt: skip
    drill.gaps, verified = primary_loss.archive_gaps(cluster)
    print(f"  after the failover and the old node's return ({time.monotonic() - began:.1f} s "
          f"from the cut), {verified}", file=out, flush=True)  # fmt: skip
    for remainder in range(1, mistakes):
        time.sleep(load / 3)
        later = mistake(cluster, remainder)
        print(f"  another at {later.timestamp}: another third deleted", file=out, flush=True)
    time.sleep(load / 3)

    drill.first_began = time.monotonic()
    readiness.watch()
    restore.stop_data_nodes(cluster)
    drill.first = restore.restore(cluster, target=drill.moment.timestamp)
    replicating = time.monotonic() - drill.first_began
    ready = readiness.wait(SERVING_BOUND) - drill.first_began
    print(f"  restored to {drill.moment.timestamp} onto new data nodes: "
          f"{len(drill.first.pets)} animals, ids from {drill.first.next_id}, serving again "
          f"after {ready:.1f} s, three nodes replicating after {replicating:.1f} s",
          file=out, flush=True)  # fmt: skip
    print(f"    {_steps_taken(drill.first)}", file=out, flush=True)
    drill.replayed, drill.replays_differ = _replay(cluster, key, book.ops, drill, rng)
    cluster.repository.backup("full")  # the guide's last step; it switches the WAL too
    # Past the backup's switch, at a moment drawn within archive_timeout's period,
    # unless told: what a loss finds not yet archived is then any share of it.
    timeout = archive_timeout()
    time.sleep(before_loss if before_loss is not None else timeout + rng.uniform(0, timeout))

    drill.lost_at = time.monotonic()
    readiness.watch()
    restore.lose_data_nodes(cluster)
    print("  every data node lost", file=out, flush=True)
    drill.latest = restore.restore(cluster, target=None)
    replicating = time.monotonic() - drill.lost_at
    drill.ready_after = readiness.wait(SERVING_BOUND) - drill.lost_at
    print(f"  restored through the newest archived WAL: {len(drill.latest.pets)} animals, "
          f"serving again after {drill.ready_after:.1f} s, three nodes replicating after "
          f"{replicating:.1f} s", file=out, flush=True)  # fmt: skip
    print(f"    {_steps_taken(drill.latest)}", file=out, flush=True)
    cluster.repository.backup("full")
    time.sleep(load / 3)
    info = cluster.repository.info()
    print(f"  repository ({info['cipher']}): {len(info['backup'])} backups, WAL archived "
          f"through {info['archive'][-1]['max']}", file=out)  # fmt: skip


def _steps_taken(restored: restore.Restored) -> str:
    """What a restore's steps took: the copy, the recovery, the replicas' copies."""
    return (f"pgbackrest restore {restored.copied:.1f} s, recovery {restored.recovered:.1f} s "
            f"({restored.replayed / 2**20:.0f} MiB of WAL from the backup's start), three "
            f"nodes replicating {restored.replicating:.1f} s after")  # fmt: skip


def _replay(
    cluster: Cluster, key: str, ops: list[Op], drill: Drill, rng: random.Random
) -> tuple[int, int]:
    """Repeat up to :data:`REPLAYS` creates acknowledged before the mistake with their
    Idempotency-Keys; returns how many were replayed and how many answered another
    animal."""
    assert drill.moment is not None
    before = [op for op in list(ops) if acknowledged(op) and op.ended < drill.moment.before]
    differ = 0
    chosen = rng.sample(before, min(REPLAYS, len(before)))
    with client(cluster, key) as api:
        for op in chosen:
            assert op.value is not None
            pet = api.create_pet(**sent(op.value), idempotency_key=op.key)
            differ += pet != op.value
    return len(chosen), differ


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    """The command line of ``make recovery-drill``."""
    parser = argparse.ArgumentParser(prog="python -m testbed.recovery_drill", description=__doc__)
    parser.add_argument("--workers", type=int, default=4, help="client hosts, one worker each")
    parser.add_argument("--load", type=float, default=30, help="seconds of load before the mistake")
    parser.add_argument("--mistakes", type=int, choices=[1, 2], default=2)
    parser.add_argument(
        "--before-loss", type=float, default=None,
        help="seconds from the backup after the first restore to the loss "
        "(default: archive_timeout and a random share of it more)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=54, help="the drawn moments' seed")
    parser.add_argument("--animals", type=int, default=0,
                        help="animals put in by COPY first (as make bench seeds)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.animals < 0:
        parser.error("--animals must be 0 or more")
    signal.signal(signal.SIGTERM, _interrupt)
    with tempfile.TemporaryDirectory(prefix="petstore-recovery-drill-") as folder:
        try:
            counts = run(Path(folder), workers=args.workers, load=args.load,
                         mistakes=args.mistakes, before_loss=args.before_loss,
                         seed=args.seed, animals=args.animals)  # fmt: skip
        except ServerUnavailableError as exc:
            print(f"Error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("Interrupted: every process and test host it started is gone.", file=sys.stderr)
            return 130
    return 0 if passed(counts) else 1


if __name__ == "__main__":
    sys.exit(main())
