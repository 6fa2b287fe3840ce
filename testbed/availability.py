"""Availability of a chaos run as figures, per fault kind: what share of operations
succeeded at their first attempt, what share was answered (successfully) within 1 s
and within 5 s, retries included, and the longest times without a successful create
and without a successful read. No I/O; :func:`table` gives the printed rows, and
:func:`judge` the longest gaps of each fault kind against D27's bounds."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from testbed.ops import Op, Window


@dataclass(frozen=True, slots=True, kw_only=True)
class Availability:
    """One fault kind's figures: its windows (``times``), the operations that ended
    in them, those that failed, the shares (0 to 1) that succeeded at the first
    attempt, within 1 s and within 5 s, the longest gaps (seconds) without a
    successful create and without a successful read, and the 99th percentile of
    the operations' durations (milliseconds)."""

    kind: str
    times: int
    operations: int
    failed: int
    first_try: float
    within_1s: float
    within_5s: float
    create_gap: float
    read_gap: float
    p99_ms: float


def unavailability(ops: Iterable[Op], windows: Iterable[Window]) -> dict[str, tuple[float, float]]:
    """Per fault kind, the longest time (seconds) in any of its windows without a
    successful create, and without a successful read (getPet or list); an edge of
    the window counts as a success."""
    done = sorted(ops, key=lambda op: op.ended)
    worst: dict[str, tuple[float, float]] = {}
    for window in windows:
        gaps = []
        for kinds in (("create",), ("read", "list")):
            edges = [window.started] + [
                op.ended for op in done
                if op.kind in kinds and op.outcome == "ok"
                and window.started <= op.ended < window.ended
            ] + [window.ended]  # fmt: skip
            gaps.append(max(b - a for a, b in itertools.pairwise(edges)))
        old = worst.get(window.kind, (0.0, 0.0))
        worst[window.kind] = (max(old[0], gaps[0]), max(old[1], gaps[1]))
    return worst


def availability(ops: Iterable[Op], windows: Iterable[Window]) -> list[Availability]:
    """The figures of each fault kind of ``windows`` (in the order they first
    occurred), over the operations of ``ops`` that ended in one of its windows."""
    ops, windows = list(ops), list(windows)
    rows = []
    for kind, gap in unavailability(ops, windows).items():
        mine = [w for w in windows if w.kind == kind]
        done = [op for op in ops if any(w.started <= op.ended < w.ended for w in mine)]
        durations = sorted(op.ended - op.started for op in done)
        p99 = durations[int(0.99 * (len(durations) - 1))] * 1000 if durations else 0.0
        ok = [op.ended - op.started for op in done if op.outcome == "ok"]

        def share(count: int, of: int = len(done)) -> float:
            return count / of if of else 1.0

        first = share(sum(op.first_try for op in done))
        within = (share(sum(t <= 1 for t in ok)), share(sum(t <= 5 for t in ok)))
        failed = len(done) - len(ok)
        rows.append(
            Availability(
                kind=kind, times=len(mine), operations=len(done), failed=failed,
                first_try=first, within_1s=within[0], within_5s=within[1],
                create_gap=gap[0], read_gap=gap[1], p99_ms=p99,
            )
        )  # fmt: skip
    return rows


def table(rows: Iterable[Availability]) -> list[str]:
    """The rows as a Markdown table, its header first; shares in percent."""
    lines = [
        "| fault | times | operations | failed | first attempt ok (%) | ok within 1 s (%) "
        "| ok within 5 s (%) | longest without a create (s) | longest without a read (s) "
        "| p99 (ms) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.kind} | {r.times} | {r.operations} | {r.failed} | {100 * r.first_try:.1f} "
            f"| {100 * r.within_1s:.1f} | {100 * r.within_5s:.1f} | {r.create_gap:.1f} "
            f"| {r.read_gap:.1f} | {r.p99_ms:.0f} |"
        )
    return lines


@dataclass(frozen=True, slots=True, kw_only=True)
class Bound:
    """The longest a fault may stop successful creates and successful reads (seconds)."""

    creates: float
    reads: float


#: D27: losing any one host stops creates for at most 15 s and reads for at most 5 s,
D27 = Bound(creates=15.0, reads=5.0)
#: but a fault of the primary data node that a failover ends (its host lost, cut off,
#: its PostgreSQL frozen) stops both for at most 20 s: the monitor's detection, its
#: wait for the old primary to step down, the promotion and the instances' new
#: connections (docs/reliability.md).
D27_PRIMARY = Bound(creates=20.0, reads=20.0)
#: and so does a fifth to half of the packets lost between the instances and the
#: database: every round trip of a request crosses the lossy path, where TCP's
#: retransmissions wait (200 ms, doubling), and a connection cut at the store's bound
#: (D25, D26) is replaced across the same path by one that takes six round trips (TCP,
#: TLS, SCRAM) (docs/reliability.md).
D27_LOSSY = Bound(creates=20.0, reads=20.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Judgement:
    """What :func:`judge` found: one printed line per fault kind run (``lines``), the
    number of kinds judged against a bound (``judged``) and of those that exceeded it
    (``missed``)."""

    lines: list[str]
    judged: int
    missed: int


def judge(
    rows: Iterable[Availability], bounds: Mapping[str, Bound], outside: Mapping[str, str]
) -> Judgement:
    """Each row's longest gaps against its kind's bound in ``bounds`` (D27). A kind
    without a bound is not counted: it is named on a line of its reason in
    ``outside`` (kind: reason), or of "more than one host" (two faults drawn
    together); the baseline is left out. A gap above its bound is a miss, marked
    ``MISSED``; one equal to it (as printed, to 0.1 s) is met."""
    lines, judged, missed = [], 0, 0
    unjudged: dict[str, list[str]] = {}
    for row in rows:
        bound = bounds.get(row.kind)
        if bound is None:
            if row.kind != "no fault (baseline)":
                reason = outside.get(row.kind, "more than one host")
                unjudged.setdefault(reason, []).append(row.kind)
            continue
        over = [
            round(gap, 1) > limit
            for gap, limit in ((row.create_gap, bound.creates), (row.read_gap, bound.reads))
        ]
        judged, missed = judged + 1, missed + any(over)
        marks = [" MISSED" if late else "" for late in over]
        lines.append(
            f"  D27 {row.kind}: without a create {row.create_gap:.1f} s (at most "
            f"{bound.creates:g}){marks[0]}, without a read {row.read_gap:.1f} s (at most "
            f"{bound.reads:g}){marks[1]}"
        )
    for reason, kinds in unjudged.items():
        lines.append(f"  D27 not judged, {reason}: {'; '.join(kinds)}")
    return Judgement(lines=lines, judged=judged, missed=missed)
