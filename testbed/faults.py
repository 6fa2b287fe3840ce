"""The faults of ``make chaos-network`` (:mod:`testbed.chaos_network`), each a kind
name and what breaks the deployment of a :class:`~testbed.cluster.Cluster` on test
hosts and repairs it again. A fault returns once the deployment is whole again (every
data node replicating, every instance in HAProxy's rotation); raises
ServerUnavailableError when it does not become whole in time.

Partitions are iptables drop rules inside the test hosts (:mod:`testbed.hosts`); a
pause is SIGSTOP, then SIGCONT; a lost host is SIGKILL of every process of it.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from testbed import renewal
from testbed.availability import D27, D27_LOSSY, D27_PRIMARY, Bound
from testbed.cluster import Cluster
from testbed.disks import refuses_writes
from testbed.failover import NODES
from testbed.hosts import Network
from testbed.overlap import Joint
from testbed.processes import ServerUnavailableError, kill_group, wait_for

#: The kinds that cut links (a partition or lost packets): the short run's set.
PARTITIONS = (
    "instance cut from the database",
    "primary isolated from monitor and secondaries",
    "secondary cut off and primary killed",
    "Redis cut off",
    "packets lost between instances and database",
)
#: Every kind, in the order of the issue.
KINDS = (
    *PARTITIONS,
    "instance paused",
    "primary's PostgreSQL paused",
    "data node host lost",
    "instance killed",
    "rolling restart",
    "Redis restarted",
    "both secondaries cut off and primary lost",
    "monitor lost",
    "instance cannot answer the load balancer",
    "primary cannot hear its secondaries",
    "slow link between instances and primary",
    "monitor lost while the primary is lost",
    "active load balancer's host lost",
    "active load balancer paused",
    "data node's disk full",
    "certificates renewed",
)
#: The kinds that take two hosts by design (two data nodes, or the monitor with the
#: primary): outside D27, which bounds the loss of one host.
TWO_HOSTS = (
    "secondary cut off and primary killed",
    "both secondaries cut off and primary lost",
    "monitor lost while the primary is lost",
)
#: The primary data node's faults that a failover ends (a data node lost is the
#: primary a third of the time): D27's bound for the primary.
FAILED_OVER = (
    "data node host lost",
    "primary isolated from monitor and secondaries",
    "primary's PostgreSQL paused",
)
#: The primary's faults that pg_auto_failover does not fail over, the primary being up
#: and answering: creates wait until it commits again, as long as the fault lasts (D27).
NOT_FAILED_OVER = ("data node's disk full", "primary cannot hear its secondaries")
#: Why each kind outside D27's seconds is not judged, for :func:`testbed.availability.judge`.
OUTSIDE: dict[str, str] = {
    **dict.fromkeys(TWO_HOSTS, "more than one host"),
    **dict.fromkeys(NOT_FAILED_OVER, "no failover, creates wait for the fault's end"),
}
#: The path to the database degraded for every instance at once (D27's bound for it).
LOSSY = ("packets lost between instances and database",)
#: The bound of each other kind (D27), for :func:`testbed.availability.judge`.
BOUNDS: dict[str, Bound] = {
    kind: D27_PRIMARY if kind in FAILED_OVER else D27_LOSSY if kind in LOSSY else D27
    for kind in KINDS
    if kind not in OUTSIDE
}
#: The kind that needs each data node's folder on a small disk of its own.
DISK_FULL = "data node's disk full"

#: The short run of ``make test``: the partitions, the monitor lost with the primary
#: (D27: what that does is shown by a test), and every certificate renewed in place
#: (docs/operations/tls.md: without downtime).
SHORT_RUN = (*PARTITIONS, "monitor lost while the primary is lost", "certificates renewed")

Fault = Callable[[], None]


@dataclass(kw_only=True)
class Notes:
    """What the faults tell the run: promises of the deployment they saw broken,
    figures they measured (how long the virtual address took to move), and when Redis
    was out of reach (from, to: monotonic seconds) in each fault on it."""

    broken: list[str] = field(default_factory=list)
    measured: list[str] = field(default_factory=list)
    redis_outages: list[tuple[float, float]] = field(default_factory=list)


def faults(
    cluster: Cluster, rng: random.Random, *, hold: float, notes: Notes, joint: Joint | None = None
) -> dict[str, Fault]:
    """Each kind's fault on ``cluster`` (on test hosts), choosing its victim and
    lengths from ``rng``; a partition lasts about ``hold`` seconds. What a fault saw
    and measured goes to ``notes``. With ``joint``, two faults may run at once
    (:mod:`testbed.overlap`): each heals through it."""
    net, pg, lbs = cluster.hosts, cluster.postgres, cluster.balancers
    assert isinstance(net, Network)
    apps = [f"app{i + 1}" for i in range(len(cluster.instances))]
    dbs = [f"db{i + 1}" for i in range(NODES)]

    def whole() -> None:
        if joint is None:
            heal_all()
        else:
            joint.heal(heal_all)

    def heal_all() -> None:
        lost = [name for name in lbs.names if lbs.haproxy[name] is None]
        for name in lost:  # what its killed keepalived left, gone before the link is back
            lbs.release(name)
        net.heal()
        for name in lost:
            lbs.start_one(name)
        wait_for(lambda: len(lbs.holders()) == 1, what="one load balancer with the address")
        if pg.monitor is None:
            pg.start_monitor()
        for index, daemon in enumerate(cluster.instances):
            if daemon is None:
                cluster.start_instance(index)
        for index, node in enumerate(pg.nodes):
            if node is None:
                pg.start_node(index)
        pg.wait_until_replicated(seconds=180)
        cluster.wait_in_rotation(range(len(apps)), seconds=60)

    def in_rotation(index: int) -> bool | None:
        """Whether every running HAProxy has instance ``index`` UP (True), DOWN
        (False), or they differ (None)."""
        states = {cluster.lb_states(lb).get(f"i{index + 1}") for lb in lbs.running()}
        return True if states == {"UP"} else False if states == {"DOWN"} else None

    def cut_instance() -> None:
        # D27: out of rotation within 3 s (its /readyz fails), back once it can reach.
        index = rng.randrange(len(apps))
        net.cut([apps[index]], [*dbs, "monitor"])
        began = time.monotonic()
        wait_for(lambda: in_rotation(index) is False, what=f"app{index + 1} out", seconds=30)
        out = time.monotonic() - began
        time.sleep(max(0.0, hold - out))
        net.heal([apps[index]])  # its own rules only: a fault alongside stays
        healed = time.monotonic()
        back = ""
        if joint is None or joint.barrier is None:  # alone: a fault alongside may keep
            # every instance from the database until both heal, so none is waited for
            wait_for(lambda: in_rotation(index) is True, what=f"app{index + 1} back")
            back = f", back {time.monotonic() - healed:.1f} s after the cut healed"
        notes.measured.append(
            f"app{index + 1} cut from the database: out of rotation in {out:.1f} s{back}"
        )
        if out > 3:
            notes.broken.append(f"app{index + 1} stayed in rotation {out:.1f} s after its cut")
        whole()

    def isolate_primary() -> None:
        primary = pg.primary()
        others = [i for i in range(NODES) if i != primary]
        net.cut([dbs[primary]], ["monitor", *(dbs[i] for i in others)])
        pg.wait_for_promotion(others, seconds=90)
        time.sleep(hold / 2)
        whole()

    def secondary_then_primary() -> None:
        # Two data nodes out: the third may lack a commit the cut one acknowledged,
        # so the monitor must not promote it (D26): no primary until the cut heals.
        primary = pg.primary()
        secondary, third = rng.sample([i for i in range(NODES) if i != primary], 2)
        net.cut([dbs[secondary]], [h for h in net.names if h != dbs[secondary]])
        time.sleep(1)
        pg.kill_node(primary)
        time.sleep(hold)
        if pg.writable(third):
            notes.broken.append(f"node{third + 1} was promoted with two data nodes out")
        whole()

    def both_secondaries_then_primary() -> None:
        # D26: with one data node reachable no create may be acknowledged, so losing
        # that node afterwards must lose nothing acknowledged.
        primary = pg.primary()
        net.cut([dbs[primary]], [dbs[i] for i in range(NODES) if i != primary])
        time.sleep(hold * 1.5)  # longer than an instance's statement timeout
        pg.kill_node(primary)
        net.heal([dbs[primary]])
        pg.wait_for_promotion([i for i in range(NODES) if i != primary], seconds=90)
        whole()

    def cut_redis() -> None:
        out = time.monotonic()
        net.cut(["redis"], apps)
        time.sleep(hold)
        net.heal(["redis"])
        notes.redis_outages.append((out, time.monotonic()))
        whole()

    def lose_packets() -> None:
        net.cut(apps, dbs, probability=rng.uniform(0.2, 0.5))
        time.sleep(hold * 2)
        whole()

    def pause_instance() -> None:
        daemon = cluster.instances[rng.randrange(len(apps))]
        assert daemon is not None
        kill_group(daemon.pid, signal.SIGSTOP)
        time.sleep(rng.uniform(3, 6))  # HAProxy: checks every 1 s, out after 2
        kill_group(daemon.pid, signal.SIGCONT)
        whole()

    def pause_primary() -> None:
        pids = _postgres_processes(pg.postgres_pid(pg.primary()))
        for pid in pids:
            _signal(pid, signal.SIGSTOP)
        time.sleep(rng.uniform(10, 30))
        for pid in pids:
            _signal(pid, signal.SIGCONT)
        whole()

    def lose_node() -> None:
        pg.kill_node(rng.randrange(NODES))
        time.sleep(3)
        whole()

    def kill_instance() -> None:
        cluster.stop_instance(rng.randrange(len(apps)), signal.SIGKILL)
        time.sleep(2)
        whole()

    def rolling_restart() -> None:
        for index in range(len(apps)):
            cluster.stop_instance(index, signal.SIGTERM)
            cluster.start_instance(index)
            cluster.wait_in_rotation([index])

    def restart_redis() -> None:
        out = time.monotonic()
        cluster.stop_redis()
        time.sleep(1)
        cluster.start_redis()
        notes.redis_outages.append((out, time.monotonic()))

    def lose_monitor() -> None:
        # Serving goes on without the monitor: no failover decision is needed.
        pg.kill_monitor()
        wait_for(lambda: not pg.monitor_answers(), what="the monitor gone", seconds=10)
        time.sleep(30)
        whole()

    def mute_instance() -> None:
        # It receives HAProxy's requests and checks but its answers never arrive:
        # HAProxy must take it out of rotation, and clients retry elsewhere.
        index = rng.randrange(len(apps))
        net.cut_one_way(apps[index], cluster.balancers.names, hears=True)
        wait_for(
            lambda: in_rotation(index) is False,
            what=f"app{index + 1} out of HAProxy's rotation",
            seconds=15,
        )
        time.sleep(hold)
        whole()

    def deafen_primary() -> None:
        # Its WAL still leaves, the standbys' acknowledgements never arrive: a
        # synchronous commit must wait, never be acknowledged on the primary alone.
        primary = pg.primary()
        secondaries = [dbs[i] for i in range(NODES) if i != primary]
        net.cut_one_way(dbs[primary], secondaries, hears=False)
        wait_for(
            lambda: pg.streaming_standbys(primary) == 0,
            what=f"node{primary + 1} deaf to its standbys",
            seconds=30,
        )
        time.sleep(hold)
        whole()

    def slow_link() -> None:
        primary = dbs[pg.primary()]
        net.slow(primary, apps, rate="256kbit")
        for app in apps:
            net.slow(app, [primary], rate="256kbit")
        wait_for(lambda: net.slowed(primary) > 0, what="traffic on the slow link", seconds=20)
        time.sleep(hold * 2)
        whole()

    def lose_monitor_and_primary() -> None:
        # No failover without the monitor: creates wait or fail (503) until it is back
        # and has promoted a secondary; nothing acknowledged may be lost meanwhile.
        primary = pg.primary()
        pg.kill_monitor()
        wait_for(lambda: not pg.monitor_answers(), what="the monitor gone", seconds=10)
        pg.kill_node(primary)
        wait_for(lambda: not pg.writable(primary), what=f"node{primary + 1} gone", seconds=10)
        time.sleep(hold)
        pg.start_monitor()
        pg.wait_for_promotion([i for i in range(NODES) if i != primary], seconds=90)
        whole()

    def move_address(stop: Callable[[str], None]) -> str:
        """Stop the host holding the virtual address with ``stop`` and wait until the
        other holds it too; returns the stopped host."""
        (active,) = lbs.holders()
        other = next(name for name in lbs.names if name != active)
        began = time.monotonic()
        stop(active)
        wait_for(lambda: other in lbs.holders(), what=f"the address on {other}", seconds=15)
        notes.measured.append(f"the address moved from {active} to {other} in "
                    f"{time.monotonic() - began:.1f} s")  # fmt: skip
        return active

    def lose_balancer() -> None:
        # Its HAProxy and keepalived killed, its link down: the other keepalived
        # hears no advert for about 1.8 s (3 of 0.5 s, and its skew) and takes the address.
        def lose(name: str) -> None:
            lbs.lose(name)
            net.unplug(name)

        move_address(lose)
        time.sleep(hold)
        whole()

    def pause_balancer() -> None:
        # Its kernel still holds the address and acknowledges what is sent to it, its
        # processes are silent; when they resume, VRRP's two masters settle by
        # priority (nopreempt covers a backup only), which is measured.
        paused = move_address(lambda name: lbs.pause(name, signal.SIGSTOP))
        time.sleep(hold)
        lbs.pause(paused, signal.SIGCONT)
        whole()
        notes.measured.append(f"{paused} resumed: the address is on {', '.join(lbs.holders())}")

    def renew_certificates() -> None:
        renewed = renewal.renew(cluster)
        notes.measured.append(f"certificates renewed: {len(renewed)} servers serve a new one")

    def fill_disk() -> None:
        # The primary's: a create that needs a new page fails there (503, nothing
        # acknowledged); one that fits a page already allocated (space freed by
        # aborted ones) still succeeds. Writes come back once the space does.
        index = pg.primary()
        disk = pg.disks[index]
        disk.fill()
        if not refuses_writes(pg.node_url(index)):
            raise ServerUnavailableError(f"node{index + 1} still writes with its disk full")
        end = time.monotonic() + hold * 2
        while time.monotonic() < end:  # what PostgreSQL frees is taken at once too
            time.sleep(0.01)
            disk.fill()
        disk.empty()
        whole()

    return dict(
        zip(
            KINDS,
            [cut_instance, isolate_primary, secondary_then_primary, cut_redis, lose_packets,
             pause_instance, pause_primary, lose_node, kill_instance, rolling_restart,
             restart_redis, both_secondaries_then_primary, lose_monitor, mute_instance,
             deafen_primary, slow_link, lose_monitor_and_primary, lose_balancer,
             pause_balancer, fill_disk, renew_certificates],
            strict=True,
        )
    )  # fmt: skip


def schedule(rng: random.Random, kinds: list[str]) -> Iterator[str]:
    """Faults without end: rounds of every one of ``kinds``, each round in an order
    shuffled by ``rng``."""
    while True:
        yield from rng.sample(kinds, len(kinds))


def _postgres_processes(postmaster: int | None) -> list[int]:
    """The postmaster ``postmaster`` and its children (backends, walsenders...),
    the postmaster first, so that it forks no new one while they are stopped."""
    if postmaster is None:
        return []
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == postmaster:
            children.append(int(stat.parent.name))
    return [postmaster, *children]


def _signal(pid: int, signum: int) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, signum)
