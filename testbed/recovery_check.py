"""The judgement of ``make recovery-drill`` (:mod:`testbed.recovery_drill`), in the
terms of its last line. No I/O: the drill records what happened (:class:`Drill`) and
the history of its workers (:class:`~testbed.ops.Op`), this module compares them with
what each restore brought back.

- **missing**: an animal acknowledged before the mistake, or there before the drill
  (a seeded store's), absent from the restore to the moment before it; **changed**:
  there but different, or an Idempotency-Key used before the mistake answered with
  another animal after it;
- **extra**: an animal restored whose create began after the mistake, or one no
  worker created that was not there before the drill;
- **ids reused**: a create that began after a restore began, acknowledged with an id
  at or below the highest any client had been answered before it (D5);
- **lost**: an animal acknowledged before every data node was lost, and in the
  database then, absent from the restore through the newest archived WAL; with the
  seconds before the loss that the lost ones span;
- **gaps**: holes in the WAL archive after the primary was lost mid-load
  (:func:`gaps`), which would make a moment unreachable by a restore.
"""

from __future__ import annotations

import itertools
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from testbed import DEPLOY
from testbed.ops import Op, shown
from testbed.restore import Restored

#: D28's bounds: the seconds of acknowledged creates a total loss may lose, and the
#: seconds a restore to the latest point may take to serve again.
LOSS_BOUND, SERVING_BOUND = 60.0, 600.0


@dataclass(frozen=True, kw_only=True)
class Moment:
    """When a mistake began: PostgreSQL's clock (a ``--target`` for the restore), and
    this process's monotonic clock just before and just after reading it."""

    timestamp: str
    before: float
    after: float


@dataclass(kw_only=True)
class Drill:
    """What happened, for the judgement: the moment of the (first) mistake, the
    highest id and the number of animals before the drill, what each restore brought
    back, when each began, the replays' differences, the loss, and the archive's gaps
    after the primary was lost (:func:`gaps`)."""

    moment: Moment | None = None
    before_drill: int = 0
    first: Restored | None = None
    first_began: float = 0.0
    replays_differ: int = 0
    replayed: int = 0
    lost_at: float = 0.0
    latest: Restored | None = None
    ready_after: float = 0.0
    before_count: int = 0
    gaps: list[str] = field(default_factory=list)


def acknowledged(op: Op) -> bool:
    """Whether ``op`` is a create answered 201."""
    return op.kind == "create" and op.outcome == "ok" and op.value is not None


def judge(ops: list[Op], drill: Drill, *, out: Any = sys.stdout) -> dict[str, float]:
    """Compare the history with what each restore brought back; print the findings
    and the last line; returns the counts."""
    assert drill.moment is not None
    assert drill.first is not None
    assert drill.latest is not None
    acked = [op for op in ops if acknowledged(op)]
    moment, first = drill.moment, drill.first
    by_id = {pet.id: pet for pet in first.pets}
    by_name = {op.key: op for op in ops if op.kind == "create"}
    before = [op for op in acked if op.ended < moment.before]
    missing = [op for op in before if op.value and op.value.id not in by_id]
    # The animals there before the drill (a seeded store's): all of them, at the moment.
    absent = max(
        0, drill.before_count - sum(1 for pet in first.pets if pet.id <= drill.before_drill)
    )
    changed = [op for op in before if op.value and by_id.get(op.value.id, op.value) != op.value]
    # Created after the mistake: by the workers, or by no one we know of (an animal
    # that was there before the drill is neither).
    extra = [
        pet for pet in first.pets
        if (pet.name in by_name and by_name[pet.name].started > moment.after)
        or (pet.name not in by_name and pet.id > drill.before_drill)
    ]  # fmt: skip
    reused = _reused(acked, ops, drill.first_began) + _reused(acked, ops, drill.lost_at)
    # What the total loss could lose: acknowledged before it, and in the database then
    # (before the mistake, or created on the restored nodes).
    latest = {pet.id: pet for pet in drill.latest.pets}
    held = [
        op for op in acked
        if op.value and op.ended < drill.lost_at
        and (op.ended < moment.before or op.value.id >= first.next_id)
    ]  # fmt: skip
    lost = [op for op in held if op.value and latest.get(op.value.id) != op.value]
    span = drill.lost_at - min((op.ended for op in lost), default=drill.lost_at)
    for name, found in (("missing", missing), ("changed", changed), ("lost", lost)):
        for op in found[:5]:
            print(f"  {name}: {shown(op.value)} acknowledged at {op.ended:.2f} s", file=out)
    for pet in extra[:5]:
        print(f"  extra: {shown(pet)}", file=out)
    if absent:
        print(f"  missing: {absent} of the {drill.before_count} animals there before the drill",
              file=out)  # fmt: skip
    for gap in drill.gaps:
        print(f"  archive gap: {gap}", file=out)
    print(f"  Idempotency-Keys used before the mistake, replayed: {drill.replayed}, "
          f"answered another animal: {drill.replays_differ}", file=out)  # fmt: skip
    timeout = archive_timeout()
    print(
        f"recovery-drill: acknowledged {len(acked)}; before the mistake: missing "
        f"{len(missing) + absent}, changed {len(changed) + drill.replays_differ}, "
        f"extra {len(extra)}, ids reused {reused}; every data node lost: lost {len(lost)} "
        f"acknowledged of the last {span:.1f} s (archive_timeout {timeout} s), serving again after "
        f"{drill.ready_after:.1f} s",
        file=out,
    )
    return {
        "acknowledged": len(acked), "missing": len(missing) + absent, "gaps": len(drill.gaps),
        "changed": len(changed) + drill.replays_differ, "extra": len(extra),
        "reused": reused, "lost": len(lost), "span": span, "serving": drill.ready_after,
        "replayed": drill.replayed,
    }  # fmt: skip


def _reused(acked: list[Op], ops: list[Op], restored_at: float) -> int:
    """Creates that began after a restore began and were acknowledged with an id at
    or below the highest id any client had been answered before it (D5)."""
    seen = [
        op.value.id for op in ops
        if op.value and op.ended < restored_at and op.kind in ("create", "read")
    ]  # fmt: skip
    highest = max(seen, default=0)
    after = [op.value.id for op in acked if op.started > restored_at and op.value]
    return sum(1 for pet_id in after if pet_id <= highest)


def archive_timeout() -> int:
    """deploy/postgres/archiving.conf's ``archive_timeout``, in seconds."""
    text = (DEPLOY / "postgres" / "archiving.conf").read_text()
    found = re.search(r"^archive_timeout\s*=\s*(\d+)", text, re.MULTILINE)
    assert found is not None
    return int(found[1])


def gaps(runs: list[tuple[str, str]]) -> list[str]:
    """The holes in an archive whose runs of consecutive WAL segments are ``runs``
    (:meth:`testbed.backups.Repository.verify`: first and last segment names, each
    the timeline's 8 hex digits, then the segment's 16): a timeline in more than one
    run, or a timeline after the first that begins where no other reaches the
    segment before (the previous timeline up to the switch: what a lost primary had
    not archived). Segments before the archive's oldest are not holes (expired).
    Returns one line per hole."""
    found: list[str] = []
    by_timeline: dict[str, list[tuple[int, int]]] = {}
    for first, last in runs:
        by_timeline.setdefault(first[:8], []).append((int(first[8:], 16), int(last[8:], 16)))
    oldest = min((start for spans in by_timeline.values() for start, _ in spans), default=0)
    for timeline, spans in sorted(by_timeline.items()):
        spans.sort()
        for (_, stop), (start, _) in itertools.pairwise(spans):
            found.append(f"timeline {int(timeline, 16)}: segments {stop + 1:X} to "
                         f"{start - 1:X} missing")  # fmt: skip
        begins = spans[0][0]
        if begins > oldest and not any(
            a <= begins - 1 <= b
            for other, others in by_timeline.items() if other < timeline
            for a, b in others
        ):  # fmt: skip
            found.append(f"timeline {int(timeline, 16)} begins at segment {begins:X}: "
                         f"no earlier timeline reaches {begins - 1:X}")  # fmt: skip
    return found


def passed(counts: dict[str, float]) -> bool:
    """Whether the drill kept D28: nothing missing, changed, extra or reused, no gap
    in the archive after the failover; the loss within :data:`LOSS_BOUND` and serving
    again within :data:`SERVING_BOUND`."""
    clean = not any(counts.get(name, 0) for name in ("missing", "changed", "extra", "reused",
                                                     "gaps"))  # fmt: skip
    return clean and counts["span"] <= LOSS_BOUND and counts["serving"] <= SERVING_BOUND
