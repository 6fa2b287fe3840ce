"""``python -m bench.tail`` (``make tail``): the slowest durable creates, measured
from outside and explained from inside.

Each variant sets up as ``make bench`` does (a fresh seeded database, ``petstore
serve`` with one worker and production settings, the baseline), with the probe of
``bench/probe/sitecustomize.py`` in the service, and runs the scenario (S4 by default)
``--repeat`` times on the baseline and then the service, variants in turns. It prints
wrk's latency distribution of every run, and from the probe: garbage collections,
the writer thread's commits (with the WAL file's size), group commit's batches, the
event loop's lateness and the access-log writes. Variants change one thing through
the probe's environment (``--variants shipped,gc-freeze,no-autocheckpoint``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench import report, run, servers, wrk
from testbed import processes

PROBE = servers.REPO / "bench" / "probe"

#: What each variant adds to the service's environment (read by the probe).
VARIANTS: dict[str, dict[str, str]] = {
    "shipped": {},
    "gc-freeze": {"PETSTORE_BENCH_PROBE_GC": "freeze"},
    "no-autocheckpoint": {"PETSTORE_BENCH_PROBE_WAL_AUTOCHECKPOINT": "0"},
    "log-on-the-loop": {"PETSTORE_BENCH_PROBE_LOG": "on-the-loop"},
}
PERCENTILES = ("p50", "p75", "p90", "p95", "p99", "p99.9", "p99.99", "max")


@dataclass
class Events:
    """The probe's lines of one run, by kind: (start s, milliseconds, n)."""

    by_kind: dict[str, list[tuple[float, float, int]]] = field(default_factory=dict)

    @classmethod
    def read(cls, folder: Path, *, since: float) -> Events:
        """The events of every process's file in ``folder`` started after ``since``
        (a ``time.perf_counter`` value: CLOCK_MONOTONIC, shared by the processes)."""
        events = cls()
        for path in folder.glob("probe.*"):
            for line in path.read_text().splitlines():
                kind, started, ms, n = line.split()
                if float(started) >= since:
                    events.by_kind.setdefault(kind, []).append((float(started), float(ms), int(n)))
        return events

    def summary(self) -> list[str]:
        """One line per kind: count, median, p99, max milliseconds, and what n says."""
        lines = []
        for kind, found in sorted(self.by_kind.items()):
            ms = sorted(event[1] for event in found)
            p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
            line = (
                f"{kind}: {len(ms)}, median {statistics.median(ms):.2f} ms, "
                f"p99 {p99:.2f} ms, max {ms[-1]:.1f} ms, over 50 ms {sum(m > 50 for m in ms)}"
            )
            ns = [event[2] for event in found]
            if kind == "gc":
                for generation in (0, 1, 2):
                    mine = [e[1] for e in found if e[2] == generation]
                    if mine:
                        line += f"; gen{generation} {len(mine)} max {max(mine):.1f} ms"
            elif kind == "write":
                line += f"; WAL up to {max(ns):,} pages"
            elif kind == "checkpoint":
                line += f"; pages copied a checkpoint: mean {statistics.mean(ns):,.0f}"
            elif kind == "batch":
                line += f"; creates a batch: mean {statistics.mean(ns):.1f}, max {max(ns)}"
            elif kind == "log":
                line += f"; lines a write: mean {statistics.mean(ns):.0f}"
            lines.append(line)
        return lines

    def slowest(self, count: int = 8) -> list[str]:
        """The ``count`` longest events of every kind, in time order, relative to the first."""
        every = [
            (start, ms, kind, n) for kind, found in self.by_kind.items() for start, ms, n in found
        ]
        if not every:
            return []
        first = min(event[0] for event in every)
        top = sorted(sorted(every, key=lambda event: -event[1])[:count])
        return [
            f"  at {start - first:7.3f} s {kind} {ms:.1f} ms (n {n})" for start, ms, kind, n in top
        ]


def waited(pid: int) -> dict[str, tuple[float, int]]:
    """By thread: the event loop (the main thread), then by name (``tokio-rt-worker``:
    granian's; ``python``: our other threads, the SQLite writer's and the log's): seconds
    the threads of ``pid`` have spent runnable but not running, waiting for a core, and
    the times they were put on one (``/proc/<pid>/task/*/schedstat``, its second and
    third fields): on a busy machine, what other processes took from the worker, and
    how long each hand-over between its threads waited."""
    found: dict[str, tuple[float, int]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = "event loop" if task.name == str(pid) else (task / "comm").read_text().strip()
            _, wait_ns, slices = (task / "schedstat").read_text().split()[:3]
        except (OSError, ValueError):  # a thread that ended meanwhile
            continue
        seconds, count = found.get(name, (0.0, 0))
        found[name] = (seconds + int(wait_ns) / 1e9, count + int(slices))
    return found


def waits_line(
    before: dict[str, tuple[float, int]], after: dict[str, tuple[float, int]], *, seconds: float
) -> str:
    """Each thread's wait for a core over a run: ms a second, and the mean wait each
    time it was put on a core."""
    cells = []
    for name, (waited_s, slices) in sorted(after.items()):
        old_s, old_slices = before.get(name, (0.0, 0))
        if slices - old_slices:
            cells.append(
                f"{name} {(waited_s - old_s) / seconds * 1e3:,.0f} ms/s, "
                f"{(waited_s - old_s) / (slices - old_slices) * 1e3:.2f} ms a time"
            )
    return "; ".join(cells)


def latency_line(
    name: str, result: wrk.Result, extras: dict[str, float], *, waited_ms: float
) -> str:
    """req/s, the latency percentiles (ms) of one run, and the worker's wait for a core."""
    cells = [f"{extras[f'{p}_us'] / 1000:.1f}" for p in PERCENTILES if f"{p}_us" in extras]
    return (
        f"| {name} | {result.requests_per_second:,.0f} | "
        + " | ".join(cells)
        + f" | {waited_ms:,.0f} |"
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.tail",
        description="The latency distribution of durable creates, and what the worker did.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    run.add_database_arguments(parser)
    parser.add_argument("--scenarios", default="S4")
    parser.add_argument("--variants", default="shipped", help=", ".join(VARIANTS))
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--warmup", type=float, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--wrk-cpu", type=int, default=1)
    args = parser.parse_args(argv)
    args.selected = run.select_scenarios(parser, args.scenarios)
    args.chosen = [name.strip() for name in args.variants.split(",")]
    if unknown := set(args.chosen) - VARIANTS.keys():
        parser.error(f"unknown variant {', '.join(sorted(unknown))}")
    args.s5_limit, args.s5_pages = 20, 50
    return args


def main(argv: list[str] | None = None) -> int:
    """Run every variant ``--repeat`` times in turns; Markdown on stdout."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    load = wrk.Load(
        wrk=wrk.ensure_installed(), cpu=args.wrk_cpu, threads=1, connections=args.connections
    )
    header = "| run | req/s | " + " | ".join(PERCENTILES) + " (ms) | waited for a core (ms/s) |"
    print(f"## Tail: {args.backend}, {args.scenarios}, {args.connections} connections\n")
    print(f"- {report.cpu_model()}; command: `python -m bench.tail {' '.join(argv)}`\n")
    for number in range(1, args.repeat + 1):
        for variant in args.chosen:
            with (
                ExitStack() as stack,
                tempfile.TemporaryDirectory(prefix="petstore-tail-") as folder,
            ):
                env = {
                    "PYTHONPATH": str(PROBE),
                    "PETSTORE_BENCH_PROBE": f"{folder}/probe",
                    **VARIANTS[variant],
                }
                stage = run.set_up(stack, args, service_env=env)
                for scenario in args.selected:
                    print(
                        f"\n### {scenario.name}, {variant}, round {number}; load average "
                        f"{' '.join(f'{x:.2f}' for x in psutil.getloadavg())}\n"
                    )
                    print(header)
                    print("|---|" + "---:|" * (len(PERCENTILES) + 2))
                    waits: list[str] = []
                    for name, server in (("baseline", stage.baseline), ("service", stage.service)):
                        if args.warmup > 0:
                            wrk.run(
                                load,
                                url=server.url,
                                script=scenario.script,
                                seconds=args.warmup,
                                env=stage.env,
                            )
                        assert server.daemon is not None
                        (worker,) = processes.child_pids(server.daemon.pid)
                        since, before = time.perf_counter(), waited(worker)
                        result, extras = wrk.run_with_extras(
                            load,
                            url=server.url,
                            script=scenario.script,
                            seconds=args.duration,
                            env=stage.env,
                        )
                        after, elapsed = waited(worker), time.perf_counter() - since
                        total = sum(w for w, _ in after.values()) - sum(
                            w for w, _ in before.values()
                        )
                        print(latency_line(name, result, extras, waited_ms=total / elapsed * 1e3))
                        waits.append(f"- {name}: {waits_line(before, after, seconds=elapsed)}")
                    print("\nEach thread's wait for a core:\n\n" + "\n".join(waits))
                    events = Events.read(Path(folder), since=since)
                    print("\nInside the service during its run:\n")
                    print("\n".join(f"- {line}" for line in events.summary()))
                    print("\nThe slowest events:\n\n```\n" + "\n".join(events.slowest()) + "\n```")
                    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
