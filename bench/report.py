"""Medians, ratios to the baseline, and the Markdown table for docs/performance.md."""

from __future__ import annotations

import os
import platform
import sqlite3
import statistics
import subprocess
from dataclasses import dataclass, field
from importlib.metadata import version

from bench.scenarios import CREATE_P99_MS_TARGET, P99_FACTOR_TARGET, POSTGRES_TARGETS, Scenario
from bench.servers import REPO
from bench.wrk import Result


@dataclass
class Figures:
    """Every run of one scenario, on the service and on the baseline."""

    scenario: Scenario
    service: list[Result] = field(default_factory=list)
    baseline: list[Result] = field(default_factory=list)

    @staticmethod
    def _median(results: list[Result], attribute: str) -> float:
        return statistics.median(float(getattr(result, attribute)) for result in results)

    def median(self, attribute: str, *, baseline: bool = False) -> float:
        """The median of ``attribute`` (a Result field) over the runs."""
        return self._median(self.baseline if baseline else self.service, attribute)

    def _paired(self, attribute: str) -> float:
        """The median over the runs of the service's ``attribute`` over the baseline's
        in the same run (each service run follows its baseline run at once, so a
        machine that slows down or speeds up between runs moves both)."""
        return statistics.median(
            float(getattr(mine, attribute)) / float(getattr(theirs, attribute) or 1e-9)
            for mine, theirs in zip(self.service, self.baseline, strict=True)
        )

    @property
    def ratio(self) -> float:
        """Issue 6's figure of merit, "median ratio to the baseline of the same run":
        the median of the runs' service req/s over the baseline's."""
        return self._paired("requests_per_second")

    @property
    def p99_factor(self) -> float:
        """The median of the runs' service p99 over the baseline's."""
        return self._paired("p99_ms")

    @property
    def non_2xx(self) -> int:
        return sum(result.non_2xx + result.socket_errors for result in self.service)

    def target(self, backend: str) -> float | None:
        if backend == "sqlite":
            return self.scenario.target
        return POSTGRES_TARGETS.get(self.scenario.name)

    def verdict(self, backend: str) -> str:
        """``met`` or ``missed`` against the backend's targets (SQLite: issue 6;
        PostgreSQL: issue 28; S4's p99 on both: issue 62), ``-`` where none is set."""
        target = self.target(backend)
        if target is None:
            return "-"
        met = self.ratio >= target and self.non_2xx == 0
        if backend == "sqlite" and self.scenario.reads_only:
            met = met and self.p99_factor <= P99_FACTOR_TARGET
        if self.scenario.name == "S4":
            met = met and self.median("p99_ms") <= CREATE_P99_MS_TARGET
        return "met" if met else "missed"


def run_line(figures: Figures, number: int, repeat: int) -> str:
    """One progress line after a scenario's service and baseline runs."""
    service, baseline = figures.service[-1], figures.baseline[-1]
    return (
        f"{figures.scenario.name} run {number}/{repeat}: "
        f"service {service.requests_per_second:,.0f} req/s p50 {service.p50_ms:.2f} ms "
        f"p99 {service.p99_ms:.2f} ms non-2xx {service.non_2xx} | "
        f"baseline {baseline.requests_per_second:,.0f} req/s p99 {baseline.p99_ms:.2f} ms | "
        f"ratio {service.requests_per_second / max(baseline.requests_per_second, 1e-9):.3f}"
    )


def table(all_figures: list[Figures], *, backend: str) -> str:
    """The Markdown table: one row per scenario, medians of the runs."""
    rows = [
        "| scenario | request | req/s | p50 ms | p99 ms | non-2xx | baseline req/s "
        "| baseline p99 ms | ratio | p99 / baseline | target | verdict |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for figures in all_figures:
        target = figures.target(backend)
        rows.append(
            f"| {figures.scenario.name} | {figures.scenario.title} "
            f"| {figures.median('requests_per_second'):,.0f} "
            f"| {figures.median('p50_ms'):.2f} | {figures.median('p99_ms'):.2f} "
            f"| {figures.non_2xx} "
            f"| {figures.median('requests_per_second', baseline=True):,.0f} "
            f"| {figures.median('p99_ms', baseline=True):.2f} "
            f"| {figures.ratio:.3f} | {figures.p99_factor:.1f}x "
            f"| {'-' if target is None else f'>= {target:.2f}'} | {figures.verdict(backend)} |"
        )
    return "\n".join(rows)


def warnings(all_figures: list[Figures]) -> list[str]:
    """Anything that makes a baseline figure suspect: its failures, socket errors."""
    lines = []
    for figures in all_figures:
        bad = sum(r.non_2xx + r.socket_errors for r in figures.baseline)
        if bad:
            lines.append(f"warning: the baseline failed {bad} requests in {figures.scenario.name}")
        errors = sum(r.socket_errors for r in figures.service)
        if errors:
            lines.append(
                f"warning: {errors} socket errors on the service in {figures.scenario.name} "
                "(counted as non-2xx)"
            )
    return lines


def cpu_model() -> str:
    """The CPU model from /proc/cpuinfo, else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_revision() -> str:
    done = subprocess.run(
        ["git", "describe", "--always", "--dirty"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "unknown"


def environment(*, wrk_version: str, database: str) -> list[str]:
    """The machine and versions, one Markdown list item each."""
    return [
        f"- machine: {cpu_model()}, {os.cpu_count()} cores, {platform.system()} "
        f"{platform.release()}",
        f"- versions: Python {platform.python_version()}, granian {version('granian')}, "
        f"petstore {version('petstore')} ({_git_revision()}), {wrk_version}, {database}",
    ]


def sqlite_version() -> str:
    return f"SQLite {sqlite3.sqlite_version}"


def memory_line(name: str, sizes: dict[str, int]) -> str:
    """``name: main 40.1 MiB, worker 75.3 MiB`` from VmRSS figures in KiB."""
    if not sizes:
        return f"- {name}: not running"
    parts = ", ".join(f"{part} {kib / 1024:.1f} MiB" for part, kib in sizes.items())
    return f"- {name}: {parts}"
