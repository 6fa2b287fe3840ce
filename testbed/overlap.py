"""Two faults at once, for ``make chaos-network ARGS="--overlap"``
(:mod:`testbed.chaos_network`): a kind drawn with a partner that breaks another part
of the deployment, both run together, the second starting up to a few seconds after
the first.

Each fault ends by making the deployment whole (healing every host, restarting what
it lost). Two at once must not heal each other early, so :class:`Joint` makes each
wait at that point until the other has got there too, and one of them heals for both.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

#: The part of the deployment each kind breaks. Kinds of one part are never paired,
#: nor the monitor's with the data nodes' (a failover needs the monitor). The kinds
#: that end without healing (a rolling restart, Redis restarted, certificates
#: renewed) are never paired.
PARTS = {
    "instance cut from the database": "instances",
    "instance paused": "instances",
    "instance killed": "instances",
    "instance cannot answer the load balancer": "instances",
    "active load balancer's host lost": "load balancers",
    "active load balancer paused": "load balancers",
    "Redis cut off": "Redis",
    "monitor lost": "monitor",
    "primary isolated from monitor and secondaries": "data nodes",
    "secondary cut off and primary killed": "data nodes",
    "packets lost between instances and database": "data nodes",
    "primary's PostgreSQL paused": "data nodes",
    "data node host lost": "data nodes",
    "both secondaries cut off and primary lost": "data nodes",
    "primary cannot hear its secondaries": "data nodes",
    "slow link between instances and primary": "data nodes",
    "monitor lost while the primary is lost": "data nodes",
    "data node's disk full": "data nodes",
}
_APART = {frozenset({"monitor", "data nodes"})}
#: How two kinds drawn together are named in the tables.
JOINED = " + "


def partners(kind: str, kinds: list[str]) -> list[str]:
    """The kinds of ``kinds`` that may run together with ``kind`` (none for a kind
    that cannot be paired)."""
    part = PARTS.get(kind)
    if part is None:
        return []
    return [
        other
        for other in kinds
        if (theirs := PARTS.get(other)) is not None
        and theirs != part
        and frozenset({part, theirs}) not in _APART
    ]


class Joint:
    """Where two faults running together meet before healing: each calls
    :meth:`heal`; the first to arrive waits for the other, then one heals for both
    while the other waits for it. With no pair running it heals at once."""

    def __init__(self) -> None:
        self.barrier: threading.Barrier | None = None

    def heal(self, heal: Callable[[], None]) -> None:
        """Run ``heal`` once for the faults running now."""
        barrier = self.barrier
        if barrier is None:
            heal()
            return
        if barrier.wait() == 0:
            try:
                heal()
            finally:
                barrier.wait()
        else:
            barrier.wait()


def run_pair(
    faults: dict[str, Callable[[], None]], kinds: tuple[str, str], joint: Joint,
    rng: random.Random, *, delay: float,
) -> None:  # fmt: skip
    """Run the faults ``kinds`` together, the second up to ``delay`` seconds after the
    first; returns when both have healed, raising the first's exception if one
    failed (the other is let go: the barrier is broken)."""
    joint.barrier = threading.Barrier(2, timeout=600)
    errors: list[BaseException] = []
    wait = rng.uniform(0, delay)

    def run(kind: str, after: float) -> None:
        time.sleep(after)
        try:
            faults[kind]()
        except threading.BrokenBarrierError:
            pass
        except BaseException as exc:  # handed to the caller
            errors.append(exc)
            assert joint.barrier is not None
            joint.barrier.abort()

    threads = [
        threading.Thread(target=run, args=(kind, after), daemon=True)
        for kind, after in zip(kinds, (0.0, wait), strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    joint.barrier = None
    if errors:
        raise errors[0]
