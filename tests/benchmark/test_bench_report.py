"""The benchmark's figures of merit (issue 6): the median over the runs of each run's
service-to-baseline quotient, not the quotient of the two medians; and the same for
``bench.compare``'s rounds."""

from __future__ import annotations

import csv
import statistics

import pytest

from bench import compare
from bench.report import Figures
from bench.scenarios import BY_NAME, POSTGRES_TARGETS
from bench.wrk import Result
from tests import ROOT


def _runs(*rates_and_p99s: tuple[float, float]) -> list[Result]:
    return [Result(rate, p99 / 2, p99, 0, 0) for rate, p99 in rates_and_p99s]


def test_the_ratio_is_the_median_of_the_runs_own_ratios() -> None:
    # Per run: 0.4, 0.7, 0.25 -> median 0.4. The medians' quotient would be 100/200 = 0.5.
    figures = Figures(
        BY_NAME["S3"],
        service=_runs((40, 5), (140, 4), (100, 12)),
        baseline=_runs((100, 2), (200, 2), (400, 3)),
    )
    assert figures.ratio == pytest.approx(0.4)
    # p99 per run: 2.5, 2.0, 4.0 -> median 2.5 (the medians' quotient would be 5 / 2).
    assert figures.p99_factor == pytest.approx(2.5)
    assert figures.verdict("sqlite") == "missed"  # 0.4 < 0.60


def test_a_scenario_meets_its_target_only_with_every_run_paired_and_no_error() -> None:
    service = _runs((60, 4), (60, 4), (60, 4))
    baseline = _runs((100, 2), (100, 2), (100, 2))
    assert Figures(BY_NAME["S3"], service=service, baseline=baseline).verdict("sqlite") == "met"
    failing = [*service[:2], Result(60, 2, 4, non_2xx=1, socket_errors=0)]
    assert Figures(BY_NAME["S3"], service=failing, baseline=baseline).verdict("sqlite") == "missed"
    with pytest.raises(ValueError, match="longer"):
        _ = Figures(BY_NAME["S3"], service=service[:2], baseline=baseline).ratio


def test_on_postgres_every_scenario_must_reach_half_the_baseline() -> None:
    # Issue 28: 0.50 for each of S1-S6 on PostgreSQL, whatever SQLite's own target.
    baseline = _runs((100, 2), (100, 2), (100, 2))
    for name in BY_NAME:
        short = Figures(BY_NAME[name], service=_runs(*[(49, 4)] * 3), baseline=baseline)
        assert short.verdict("postgres") == "missed"
        half = Figures(BY_NAME[name], service=_runs(*[(50, 4)] * 3), baseline=baseline)
        assert half.verdict("postgres") == "met"
    s4 = Figures(BY_NAME["S4"], service=_runs(*[(45, 4)] * 3), baseline=baseline)
    assert (s4.verdict("sqlite"), s4.verdict("postgres")) == ("met", "missed")


def test_a_create_meets_its_target_only_with_a_p99_of_50_ms_at_most() -> None:
    # Issue 62: S4's slowest 1% within 50 ms on both stores, whatever its ratio.
    baseline = _runs((100, 2), (100, 2), (100, 2))
    for backend in ("sqlite", "postgres"):
        steady = Figures(BY_NAME["S4"], service=_runs(*[(60, 50)] * 3), baseline=baseline)
        assert steady.verdict(backend) == "met"
        slow = Figures(
            BY_NAME["S4"], service=_runs((60, 40), (60, 51), (60, 395)), baseline=baseline
        )
        assert slow.verdict(backend) == "missed"


def test_compare_pairs_rounds_in_order_and_takes_the_median_of_their_quotients() -> None:
    ratios, median = compare.summary([100.0, 50.0, 200.0], [110.0, 60.0, 180.0])
    assert ratios == pytest.approx([1.1, 1.2, 0.9])
    assert median == pytest.approx(1.1)
    with pytest.raises(ValueError, match="shorter"):
        compare.summary([1.0, 2.0], [1.0])


def test_compare_refuses_s5_and_too_short_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert compare.parse_args(["main", "."]).selected == [BY_NAME["S3"], BY_NAME["S6"]]
    for argv in (["main", ".", "--scenarios", "S5"], ["main", ".", "--rounds", "0"]):
        with pytest.raises(SystemExit) as exited:
            compare.parse_args(argv)
        assert exited.value.code == 2
    assert "S5 needs cursors" in capsys.readouterr().err


RESULTS = ROOT / "bench" / "results"


def test_the_recorded_full_runs_carry_the_verdict_of_their_targets() -> None:
    """bench/results/bench.csv: each recorded ratio is the median of its runs, and its
    verdict is make bench's: ``met`` only at or above its store's target, ``missed``
    below it (a run that misses is recorded as one)."""
    with (RESULTS / "bench.csv").open(newline="") as file:
        rows = [row for row in csv.DictReader(file) if row["ratio"]]
    assert {row["backend"] for row in rows} == {"sqlite", "postgres"}
    for row in rows:
        ratio, scenario = float(row["ratio"]), BY_NAME[row["scenario"]]
        if row["runs"].count(" ") == 2:
            assert statistics.median(map(float, row["runs"].split())) == ratio, row
        target = scenario.target if row["backend"] == "sqlite" else POSTGRES_TARGETS[scenario.name]
        assert row["verdict"] in {"met", "missed"}, row
        if ratio < target:
            assert row["verdict"] == "missed", row
        if row["verdict"] == "met":
            assert ratio >= target, row


def test_the_recorded_comparisons_have_their_median_within_their_rounds() -> None:
    with (RESULTS / "compare.csv").open(newline="") as file:
        rows = list(csv.DictReader(file))
    assert rows
    for row in rows:
        assert row["scenario"] in BY_NAME, row
        assert int(row["rounds"]) >= 3, row
        if row["low"]:
            assert float(row["low"]) <= float(row["median"]) <= float(row["high"]), row
