"""``make recovery-drill``'s judgement (D28, :mod:`testbed.recovery_check`), without a
deployment: what counts as missing, changed, extra, a reused id and a loss, and what
the exit status says. The drill itself runs in ``make test`` on the short chaos run's
deployment (tests/testbed/test_chaos_network.py)."""

from __future__ import annotations

import io
from dataclasses import replace

from testbed import recovery_check
from testbed.ops import Op
from testbed.restore import Restored
from tests.testbed.animals import created, pet


def create(n: int, pet_id: int, started: float, ended: float) -> Op:
    return created(f"d0-{n}", pet_id, started, ended, status="available")


def drill(first: list[int], latest: list[int], *, next_id: int = 1000) -> recovery_check.Drill:
    """A mistake at 10 s, the first restore from 20 s (what ids ``first`` held), the
    loss at 40 s (``latest``), serving after 12 s."""
    pets = {
        i: pet(i, f"d0-{i if i < next_id else i - next_id + 100}", status="available")
        for i in (*first, *latest)
    }
    return recovery_check.Drill(
        moment=recovery_check.Moment(timestamp="2026-11-21 14:03:07+00", before=10.0, after=10.0),
        first=Restored(pets=[pets[i] for i in first], next_id=next_id), first_began=20.0,
        lost_at=40.0, latest=Restored(pets=[pets[i] for i in latest], next_id=next_id),
        ready_after=12.0,
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


def test_a_hole_in_a_timeline_or_before_a_switch_is_a_gap() -> None:
    """:func:`recovery_check.gaps` reads ``pgbackrest verify``'s runs of segments: one
    run per timeline, each later timeline beginning right after a segment an earlier
    one reached, is no gap; a timeline in two runs is one, and so is a timeline that
    begins where the previous one stopped short (what a lost primary had not
    archived when a secondary was promoted)."""
    whole = [("000000010000000000000003", "000000010000000000000009"),
             ("00000002000000000000000A", "00000002000000000000000F")]  # fmt: skip
    assert recovery_check.gaps(whole) == []
    # The primary's last two segments of timeline 1, never archived.
    short = [("000000010000000000000003", "000000010000000000000007"), whole[1]]
    assert recovery_check.gaps(short) == [
        "timeline 2 begins at segment A: no earlier timeline reaches 9"
    ]
    split = [("000000010000000000000003", "000000010000000000000004"),
             ("000000010000000000000006", "000000010000000000000009"), whole[1]]  # fmt: skip
    assert recovery_check.gaps(split) == ["timeline 1: segments 5 to 5 missing"]
    # A timeline may begin from one older than the previous (a restore to a moment).
    restored = [*whole, ("000000030000000000000005", "000000030000000000000006")]
    assert recovery_check.gaps(restored) == []


def test_an_animal_there_before_the_drill_and_absent_from_the_restore_is_missing() -> None:
    """A seeded store (``--animals``): the animals there before the drill were there
    at the moment, so the restore to it must hold every one."""
    ops = [create(11, 11, 1, 2)]
    seeded = [pet(i, f"Rex {i}", status="available") for i in range(1, 11)]
    made = drill([11], [11])
    for count, pets in ((10, seeded), (10, seeded[1:])):
        first = Restored(pets=[*pets, pet(11, "d0-11", status="available")], next_id=1000)
        one = replace(made, first=first, before_drill=10, before_count=count)
        counts = recovery_check.judge(ops, one, out=io.StringIO())
        assert (counts["missing"], counts["changed"], counts["extra"]) == (10 - len(pets), 0, 0)
