"""``make recovery-drill``'s judgement (D28, :mod:`testbed.recovery_check`), without a
deployment: what counts as missing, changed, extra, a reused id and a loss, and what
the exit status says. The drill itself runs in ``make test`` on the short chaos run's
deployment (tests/testbed/test_chaos_network.py)."""

from __future__ import annotations

import io

from testbed import recovery_check
from testbed.ops import Op
from testbed.restore import Restored


def create(n: int, pet_id: int, started: float, ended: float) -> Op:
    name = f"d0-{n}"
    return Op(0, "create", started, ended, "ok", key=name, value=(pet_id, name, 1, "available"))


def drill(first: list[int], latest: list[int], *, next_id: int = 1000) -> recovery_check.Drill:
    """A mistake at 10 s, the first restore from 20 s (what ids ``first`` held), the
    loss at 40 s (``latest``), serving after 12 s."""
    pets = {
        i: (i, f"d0-{i if i < next_id else i - next_id + 100}", 1, "available")
        for i in (*first, *latest)
    }
    return recovery_check.Drill(
        moment=recovery_check.Moment("2026-11-21 14:03:07+00", 10.0, 10.0),
        first=Restored([pets[i] for i in first], next_id), first_began=20.0,
        lost_at=40.0, latest=Restored([pets[i] for i in latest], next_id), ready_after=12.0,
    )  # fmt: skip


def test_a_clean_drill_counts_nothing_and_a_late_create_is_not_extra() -> None:
    ops = [create(1, 1, 1, 2), create(2, 2, 3, 4), create(3, 3, 11, 12)]
    ops.append(create(100, 1000, 25, 26))  # after the first restore, past the counter
    counts = recovery_check.judge(ops, drill([1, 2], [1, 2, 1000]), out=io.StringIO())
    assert {
        k: counts[k] for k in ("missing", "changed", "extra", "reused", "lost")
    } == dict.fromkeys(("missing", "changed", "extra", "reused", "lost"), 0)
    assert recovery_check.passed(counts)


def test_missing_extra_reused_and_lost_are_each_counted() -> None:
    ops = [create(1, 1, 1, 2), create(2, 2, 3, 4), create(3, 3, 11, 12)]
    ops.append(create(100, 2, 25, 26))  # an id acknowledged before the restore, again
    ops.append(create(101, 1001, 30, 38))  # acknowledged 2 s before the loss
    # Animal 2 did not come back from the first restore, animal 3 (created after the
    # mistake) did; the loss took animal 1001 only.
    counts = recovery_check.judge(ops, drill([1, 3], [1, 2, 3]), out=io.StringIO())
    assert (counts["missing"], counts["extra"], counts["reused"]) == (1, 1, 1)
    assert counts["lost"] == 1
    assert counts["span"] == 2.0
    assert not recovery_check.passed(counts)


def test_the_drill_fails_on_a_missing_animal_or_a_loss_past_the_bound() -> None:
    """:func:`recovery_check.passed` is what the exit status says: clean counts pass,
    one anomaly or a bound crossed fails."""
    clean = {"missing": 0, "changed": 0, "extra": 0, "reused": 0, "span": 35.0,
             "serving": 40.0}  # fmt: skip
    assert recovery_check.passed(clean)
    for name, value in (("missing", 1), ("changed", 1), ("extra", 1), ("reused", 1),
                        ("span", 61.0), ("serving", 601.0)):  # fmt: skip
        assert not recovery_check.passed({**clean, name: value}), name
