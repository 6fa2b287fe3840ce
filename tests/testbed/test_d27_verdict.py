"""D27's verdict under ``make chaos-network``'s availability table
(testbed/availability.py's ``judge``, testbed/faults.py's bounds): each single-host
kind's longest gaps against its bound, a miss counted and marked, the kinds that take
two hosts by design named and not judged, and the count on the run's last line."""

from __future__ import annotations

import io

from testbed import chaos_network, faults
from testbed.availability import D27, D27_LOSSY, D27_PRIMARY, Availability, Bound, judge
from testbed.history import Op, Window
from testbed.limit_probe import Judgement
from tests.testbed.animals import pet


def row(kind: str, create_gap: float, read_gap: float) -> Availability:
    return Availability(
        kind=kind,
        times=1,
        operations=10,
        failed=0,
        first_try=1.0,
        within_1s=1.0,
        within_5s=1.0,
        create_gap=create_gap,
        read_gap=read_gap,
        p99_ms=50.0,
    )


def test_a_gap_over_its_bound_is_a_miss_and_one_at_it_is_met() -> None:
    bounds = {"a": Bound(creates=15.0, reads=5.0), "b": Bound(creates=15.0, reads=5.0)}
    verdict = judge([row("a", 15.0, 5.04), row("b", 3.0, 7.2)], bounds, {})
    assert (verdict.judged, verdict.missed) == (2, 1)
    assert verdict.lines == [
        "  D27 a: without a create 15.0 s (at most 15), without a read 5.0 s (at most 5)",
        "  D27 b: without a create 3.0 s (at most 15), without a read 7.2 s (at most 5) MISSED",
    ]


def test_a_kind_missing_both_bounds_counts_once() -> None:
    verdict = judge([row("a", 16.0, 16.0)], {"a": D27}, {})
    assert (verdict.judged, verdict.missed) == (1, 1)
    assert verdict.lines[0].count("MISSED") == 2


def test_kinds_without_a_bound_are_named_not_judged_and_the_baseline_left_out() -> None:
    rows = [row("no fault (baseline)", 0.2, 0.3), row("x + y", 30.0, 30.0), row("z", 9.0, 9.0)]
    verdict = judge([*rows, row("a", 1.0, 1.0)], {"a": D27}, {"z": "no failover"})
    assert (verdict.judged, verdict.missed) == (1, 0)
    assert verdict.lines[1:] == [
        "  D27 not judged, more than one host: x + y",
        "  D27 not judged, no failover: z",
    ]
    assert not any("baseline" in line for line in verdict.lines)


def test_each_kind_is_judged_against_its_bound_or_named_outside_d27() -> None:
    assert set(faults.BOUNDS) | set(faults.OUTSIDE) == set(faults.KINDS)
    assert not set(faults.BOUNDS) & set(faults.OUTSIDE)
    for kind in ("both secondaries cut off and primary lost", "data node's disk full"):
        assert kind in faults.OUTSIDE
    assert faults.BOUNDS["primary isolated from monitor and secondaries"] == D27_PRIMARY
    assert faults.BOUNDS["active load balancer paused"] == D27
    assert faults.BOUNDS["packets lost between instances and database"] == D27_LOSSY
    assert {kind for kind, bound in faults.BOUNDS.items() if bound != D27} == {
        *faults.FAILED_OVER,
        *faults.LOSSY,
    }
    assert (D27.creates, D27.reads, D27_PRIMARY.creates, D27_PRIMARY.reads) == (15, 5, 20, 20)
    assert (D27_LOSSY.creates, D27_LOSSY.reads) == (20, 20)


def test_the_last_line_counts_the_kinds_that_missed() -> None:
    """A create acknowledged, then none for 17 s in a single-host kind's window: one
    miss of one kind judged; a two-host kind's window is not counted."""
    ops = [
        Op(
            worker=0,
            kind="create",
            started=0.0,
            ended=0.1,
            outcome="ok",
            key="a",
            value=pet(1, "a"),
        ),
        Op(worker=0, kind="read", started=0.2, ended=0.3, outcome="ok", asked=1, value=pet(1, "a")),
        Op(
            worker=0,
            kind="read",
            started=17.0,
            ended=17.1,
            outcome="ok",
            asked=1,
            value=pet(1, "a"),
        ),
    ]
    windows = [
        Window(kind="instance killed", started=0.0, ended=18.0),
        Window(kind="monitor lost while the primary is lost", started=18.0, ended=40.0),
    ]
    out = io.StringIO()
    counts = chaos_network.report(
        ops,
        windows,
        [pet(1, "a")],
        [],
        Judgement(
            calls=0, over_limit=0, failing_open=0, open_seconds=0.0, longest_return=0.0, late=0
        ),
        out=out,
    )
    text = out.getvalue()
    lines = text.splitlines()
    assert (counts["d27_missed"], counts["d27_judged"]) == (1, 1)
    assert lines[-1].endswith("failed 0 of 3 (retry budget 310 s), D27 missed 1 of 1")
    assert "  D27 instance killed: without a create 17.9 s (at most 15) MISSED, " in text
    assert "  D27 not judged, more than one host: monitor lost while the primary is lost" in lines
