"""``python -m bench`` (``make bench``): seed, serve, capture, load, report.

Everything it starts (the service, the baseline, wrk) is stopped on the way out,
after a failure, Ctrl-C or SIGTERM too; the seeded database is removed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from bench import capture, report, scenarios, seed, servers, wrk
from bench.report import Figures

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def add_database_arguments(parser: argparse.ArgumentParser) -> None:
    """``--backend``, ``--pets`` and ``--postgres-url``: the seeded database, as
    ``make bench`` and ``make compare`` both take it."""
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--pets", type=int, default=10_000, help="animals seeded")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("PETSTORE_BENCH_POSTGRES_URL", DEFAULT_POSTGRES_URL),
        help="server where the bench database is created and dropped [PETSTORE_BENCH_POSTGRES_URL]",
    )


def select_scenarios(parser: argparse.ArgumentParser, names: str) -> list[scenarios.Scenario]:
    """The scenarios named in ``names``; exits through ``parser.error`` on an unknown one."""
    try:
        return scenarios.select(names)
    except ValueError as exc:
        parser.error(str(exc))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Load benchmark of petstore serve against a raw ASGI baseline (issue 6).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_database_arguments(parser)
    parser.add_argument("--scenarios", default="S1,S2,S3,S4,S5,S6", help="e.g. S1,S3")
    parser.add_argument("--duration", type=float, default=10, help="seconds per measured run")
    parser.add_argument("--warmup", type=float, default=2, help="seconds of load before each")
    parser.add_argument("--repeat", type=int, default=3, help="runs per scenario and server")
    parser.add_argument("--connections", type=int, default=64, help="wrk connections")
    parser.add_argument("--threads", type=int, default=1, help="wrk threads")
    parser.add_argument("--server-cpu", type=int, default=0, help="core the servers run on")
    parser.add_argument("--wrk-cpu", type=int, default=1, help="core wrk runs on")
    parser.add_argument("--s5-limit", type=int, default=20, help="animals per S5 page")
    parser.add_argument("--s5-pages", type=int, default=50, help="deep pages S5 cycles through")
    args = parser.parse_args(argv)
    args.selected = select_scenarios(parser, args.scenarios)
    if args.pets < 200 or args.repeat < 1 or args.duration < 1 or args.connections < 1:
        parser.error("need --pets >= 200, --repeat >= 1, --duration >= 1, --connections >= 1")
    return args


def stop_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so the finally blocks stop the servers."""

    def leave(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, leave)


def _command(argv: list[str]) -> str:
    if "MAKELEVEL" in os.environ:
        return f"make bench ARGS={shlex.quote(shlex.join(argv))}" if argv else "make bench"
    return shlex.join(["python", "-m", "bench", *argv])


def _database_version(backend: str, url: str) -> str:
    if backend == "sqlite":
        return report.sqlite_version()
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return f"PostgreSQL {row[0] if row else '?'}"


def measure(
    args: argparse.Namespace,
    *,
    wrk_path: str,
    service: servers.Server,
    baseline: servers.Server,
    env: dict[str, str],
) -> list[Figures]:
    """Every selected scenario ``--repeat`` times on both servers, baseline first, each
    measured run after its own warm-up."""
    load = wrk.Load(
        wrk=wrk_path, cpu=args.wrk_cpu, threads=args.threads, connections=args.connections
    )
    all_figures = [Figures(scenario) for scenario in args.selected]
    for number in range(1, args.repeat + 1):
        for figures in all_figures:
            for server, results in ((baseline, figures.baseline), (service, figures.service)):
                script = figures.scenario.script
                if args.warmup > 0:
                    wrk.run(load, url=server.url, script=script, seconds=args.warmup, env=env)
                results.append(
                    wrk.run(load, url=server.url, script=script, seconds=args.duration, env=env)
                )
            print(report.run_line(figures, number, args.repeat), file=sys.stderr)
    return all_figures


@dataclass(frozen=True, slots=True)
class Stage:
    """What the measurement needs once everything is up."""

    database_url: str
    service: servers.Server
    baseline: servers.Server
    env: dict[str, str]


def set_up(
    stack: ExitStack, args: argparse.Namespace, *, service_env: dict[str, str] | None = None
) -> Stage:
    """Seed the database, start the service (``service_env`` added to its environment),
    capture its answers (and S5's deep pages), start the baseline; every step is undone
    when ``stack`` closes."""
    work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="petstore-bench-")))
    database_url = stack.enter_context(
        seed.database(args.backend, pets=args.pets, postgres_url=args.postgres_url)
    )
    key = seed.create_key(database_url)
    service = servers.service(
        database_url=database_url, cpu=args.server_cpu, log=work / "service.log"
    )
    service.env.update(service_env or {})
    stack.enter_context(servers.running(service))
    client = capture.Client(service.port, key)
    stack.callback(client.close)
    requests = scenarios.fixed_requests(pets=args.pets)
    env = {"BENCH_KEY": key, "BENCH_PETS": str(args.pets)}
    if any(scenario.name == "S5" for scenario in args.selected):
        deep = capture.deep_paths(client, pets=args.pets, limit=args.s5_limit, count=args.s5_pages)
        (work / "deep-paths.txt").write_text("\n".join(deep) + "\n")
        env["BENCH_DEEP_PATHS"] = str(work / "deep-paths.txt")
        requests.append(scenarios.Request("GET", deep[0]))
    for line in capture.answers(client, requests, into=work / "answers.json"):
        print(f"captured {line}", file=sys.stderr)
    baseline = servers.baseline(
        key=key, answers=work / "answers.json", cpu=args.server_cpu, log=work / "baseline.log"
    )
    stack.enter_context(servers.running(baseline))
    return Stage(database_url, service, baseline, env)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the report on stdout, progress on stderr. Exit codes:
    0 done, 1 a step failed, 2 bad flags, 130 interrupted."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    return guarded(lambda: _run(args, argv))


def guarded(run: Callable[[], int]) -> int:
    """``run()``'s exit code, everything it starts stopped on SIGTERM too; a failed
    step said in one message on stderr and 1, Ctrl-C 130."""
    stop_on_sigterm()
    try:
        return run()
    except KeyboardInterrupt:
        print("\ninterrupted: every process started was stopped", file=sys.stderr)
        return 130
    except subprocess.CalledProcessError as exc:
        print(f"failed: {shlex.join(map(str, exc.cmd))}\n{exc.stdout}{exc.stderr}",
              file=sys.stderr)  # fmt: skip
        return 1
    except (wrk.WrkError, capture.CaptureError, RuntimeError, OSError) as exc:
        print(f"failed: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace, argv: list[str]) -> int:
    wrk_path = wrk.ensure_installed()
    minutes = len(args.selected) * args.repeat * 2 * (args.warmup + args.duration) / 60
    print(
        f"benchmark: {args.scenarios} on {args.backend} with {args.pets:,} animals, "
        f"{args.repeat} x {args.duration:g} s each (about {minutes:.1f} min of load)",
        file=sys.stderr,
    )
    with ExitStack() as stack:
        stage = set_up(stack, args)
        all_figures = measure(
            args, wrk_path=wrk_path, service=stage.service, baseline=stage.baseline, env=stage.env
        )
        service_memory, baseline_memory = stage.service.memory(), stage.baseline.memory()
        database = _database_version(args.backend, stage.database_url)
    lines = [
        f"## Benchmark: {args.backend}, {args.pets:,} animals",
        "",
        *report.environment(wrk_version=wrk.version(wrk_path), database=database),
        f"- command: `{_command(argv)}`",
        f"- load: wrk {args.threads} thread(s), {args.connections} connections, "
        f"{args.duration:g} s after {args.warmup:g} s of warm-up, median of {args.repeat} runs; "
        f"server on core {args.server_cpu}, wrk on core {args.wrk_cpu}",
        "",
        report.table(all_figures, backend=args.backend),
        "",
        "Resident memory after the run (VmRSS; target: under 150 MB):",
        "",
        report.memory_line("petstore serve", service_memory),
        report.memory_line("baseline", baseline_memory),
    ]
    extra = report.warnings(all_figures)
    if extra:
        lines += ["", *extra]
    print("\n".join(lines))
    return 0
