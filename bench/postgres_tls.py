"""What TLS to PostgreSQL costs the service: ``make bench --backend postgres``'s
scenarios on one ``petstore serve`` that reaches its database with
``sslmode=verify-full`` and one that reaches it with ``sslmode=disable``, in turns,
in one run (issue 59, "What it may cost").

    python -m bench.postgres_tls [--rounds 5] [--duration 8] [--scenarios S3,S4] [--together]

Both sides reach one PostgreSQL server made for the run (``bench.postgres_server``:
``initdb``, PostgreSQL's own settings, durability on, ``ssl=on`` with a certificate
of 127.0.0.1 from a CA of the run's own, which the TLS side verifies) over TCP on
127.0.0.1, the same seeded database with the same key: only TLS differs. Each round
starts both services anew, with one cursor secret (S5's cursors verify on both), and
loads each scenario on both, each side first in every other round, every measured run
after a warm-up of its own: one side after the other, or with ``--together`` both at
once by two wrk processes, as ``make compare`` loads two versions, so that other work
on the machine slows both sides alike and their quotient is that of their CPU time a
request on the shared core. The services are pinned to core 0 and wrk to core 1,
PostgreSQL unpinned, as ``make bench`` runs them. Besides requests a second, the CPU
time a request (user plus system, from psutil) of the service's processes and of the
PostgreSQL backends of its connections says what TLS costs where, and moves less than
requests a second when other work shares the cores. After each round ``pg_stat_ssl``
must show every connection of the TLS side encrypted and none of the plain side's.
One line per run goes to stderr; the Markdown report to stdout.
"""

from __future__ import annotations

import argparse
import itertools
import os
import secrets
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from pathlib import Path

import psutil
import psycopg
from psycopg.rows import TupleRow

from bench import capture, compare, postgres_server, report, seed, servers, wrk
from bench.postgres_server import NAMES, SIDES
from bench.run import guarded, select_scenarios
from testbed.processes import child_pids

#: The largest cost the issue allows: TLS/plain req/s at least this on every scenario.
WITHIN = 0.95


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.postgres_tls",
        description="The service's PostgreSQL bench with sslmode=verify-full against plain.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--scenarios", default="S1,S2,S3,S4,S5,S6", help="e.g. S3,S4")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, each side once a scenario")
    parser.add_argument("--duration", type=float, default=8, help="seconds per measured run")
    parser.add_argument("--warmup", type=float, default=3, help="seconds of load before each")
    parser.add_argument("--pets", type=int, default=10_000, help="animals seeded")
    parser.add_argument("--connections", type=int, default=64, help="wrk connections")
    parser.add_argument(
        "--together", action="store_true", help="load both sides at once (make compare's way)"
    )
    args = parser.parse_args(argv)
    args.selected = select_scenarios(parser, args.scenarios)
    if args.pets < 200 or args.rounds < 1 or args.duration < 1:
        parser.error("need --pets >= 200, --rounds >= 1, --duration >= 1")
    return args


@dataclass(frozen=True, slots=True)
class Run:
    """One measured run of one side: wrk's figures, and the CPU time a request (user
    plus system, microseconds) of the service (main process and worker) and of the
    PostgreSQL backends serving its connections."""

    result: wrk.Result
    service_us: float
    postgres_us: float


def cpu_seconds(pids: Iterable[int]) -> dict[int, float]:
    """User plus system CPU seconds of each process of ``pids`` still running."""
    seconds = {}
    for pid in pids:
        with suppress(psutil.NoSuchProcess):
            times = psutil.Process(pid).cpu_times()
            seconds[pid] = times.user + times.system
    return seconds


def measured(load: wrk.Load, monitor: psycopg.Connection[TupleRow], *,
             started: dict[str, servers.Server], script: str, args: argparse.Namespace,
             env: dict[str, str]) -> dict[str, Run]:  # fmt: skip
    """A warm-up, then one measured run of ``script`` on each side's service of
    ``started`` at the same time (one wrk each, started in ``started``'s order), and
    the CPU each side's service and backends (found through ``monitor``) spent
    meanwhile; by side."""
    urls = [service.url for service in started.values()]
    if args.warmup > 0:
        compare.together(load, urls, script, args.warmup, env)
    serving = {}
    for side, service in started.items():
        assert service.daemon is not None  # started by servers.running
        serving[side] = [service.daemon.pid, *child_pids(service.daemon.pid)]

    def reading() -> dict[str, tuple[dict[int, float], dict[int, float]]]:
        rows = monitor.execute(
            "SELECT application_name, pid FROM pg_stat_activity WHERE application_name = ANY(%s)",
            [[NAMES[side] for side in started]],
        ).fetchall()
        return {
            side: (cpu_seconds(serving[side]),
                   cpu_seconds(int(pid) for name, pid in rows if name == NAMES[side]))
            for side in started
        }  # fmt: skip

    before = reading()
    results = dict(zip(started, compare.together(load, urls, script, args.duration, env),
                       strict=True))  # fmt: skip
    after = reading()
    runs = {}
    for side, result in results.items():
        served = max(result.requests_per_second * round(args.duration), 1.0)
        (service_before, backends_before), (service_after, backends_after) = (
            before[side],
            after[side],
        )
        runs[side] = Run(
            result,
            service_us=_spent(service_before, service_after) / served * 1e6,
            postgres_us=_spent(backends_before, backends_after) / served * 1e6,
        )
    return runs


def _spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two readings (a process new since ``before`` counts
    from its start)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def _run(args: argparse.Namespace, argv: list[str]) -> int:
    load = wrk.Load(wrk=wrk.ensure_installed(), cpu=1, threads=1, connections=args.connections)
    runs: dict[tuple[str, str], list[Run]] = {}
    loads = [os.getloadavg()]
    with ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="petstore-pgtls-")))
        admin_url, certificates = stack.enter_context(postgres_server.running())
        database_url = stack.enter_context(seed.postgres_database(admin_url, pets=args.pets))
        monitor = stack.enter_context(psycopg.connect(database_url, autocommit=True))
        key, secret = seed.create_key(database_url), secrets.token_urlsafe(36)
        env = {"BENCH_KEY": key, "BENCH_PETS": str(args.pets)}
        urls = {
            side: postgres_server.side_url(database_url, side, ca=certificates.ca) for side in SIDES
        }
        negotiated = ""
        for number in range(1, args.rounds + 1):
            order = list(SIDES) if number % 2 else list(reversed(SIDES))
            with ExitStack() as round_stack:
                started = {}
                for side in order:
                    service = servers.service(
                        database_url=urls[side], cpu=0, log=root / f"{side}-{number}.log"
                    )
                    service.env["PETSTORE_CURSOR_SECRET"] = secret
                    started[side] = round_stack.enter_context(servers.running(service))
                if "BENCH_DEEP_PATHS" not in env and any(s.name == "S5" for s in args.selected):
                    env["BENCH_DEEP_PATHS"] = _deep_paths(started[order[0]], key, args, root)
                # Sides loaded one after the other, or both at once.
                turns = [order] if args.together else [[side] for side in order]
                for scenario, turn in itertools.product(args.selected, turns):
                    sides = {side: started[side] for side in turn}
                    got_runs = measured(load, monitor, started=sides, script=scenario.script,
                                        args=args, env=env)  # fmt: skip
                    for side, run in got_runs.items():
                        runs.setdefault((scenario.name, side), []).append(run)
                        got = run.result
                        print(f"round {number} {scenario.name} {side}: "
                              f"{got.requests_per_second:,.0f} req/s, p99 {got.p99_ms:.2f} ms, "
                              f"non-2xx {got.non_2xx + got.socket_errors}, CPU a request: "
                              f"service {run.service_us:.0f} us, PostgreSQL "
                              f"{run.postgres_us:.0f} us", file=sys.stderr)  # fmt: skip
                negotiated = postgres_server.check_encryption(
                    postgres_server.encryption(database_url)
                )
            loads.append(os.getloadavg())
        row = monitor.execute("SHOW server_version").fetchone()
    database = f"PostgreSQL {row[0] if row else '?'}"
    lines = _report(args, runs, argv=argv, loads=loads, database=database,
                    negotiated=negotiated, wrk_version=wrk.version(load.wrk))  # fmt: skip
    print("\n".join(lines))
    return 0


def _deep_paths(service: servers.Server, key: str, args: argparse.Namespace, root: Path) -> str:
    """S5's pages, walked on ``service``, written to a file under ``root``; its path."""
    client = capture.Client(service.port, key)
    try:
        deep = capture.deep_paths(client, pets=args.pets, limit=20, count=50)
    finally:
        client.close()
    path = root / "deep-paths.txt"
    path.write_text("\n".join(deep) + "\n")
    return str(path)


def _report(
    args: argparse.Namespace,
    runs: dict[tuple[str, str], list[Run]],
    *,
    argv: list[str],
    loads: list[tuple[float, float, float]],
    database: str,
    negotiated: str,
    wrk_version: str,
) -> list[str]:
    """The Markdown report: the run, then a row per scenario, medians over the rounds;
    TLS / plain is the median of each round's own quotient of req/s."""
    ones = [one for one, _, _ in loads]
    lines = [
        f"## TLS to PostgreSQL: {args.pets:,} animals, {time.strftime('%Y-%m-%d')}",
        "",
        *report.environment(wrk_version=wrk_version, database=database),
        f"- TLS: {negotiated} (sslmode=verify-full against the run's CA)",
        f"- load average (1 min) from {min(ones):.1f} to {max(ones):.1f} over the run",
        f"- command: `{shlex.join(['python', '-m', 'bench.postgres_tls', *argv])}`",
        f"- load: wrk 1 thread, {args.connections} connections, {args.duration:g} s after "
        f"{args.warmup:g} s of warm-up, {args.rounds} rounds, the sides "
        f"{'loaded at once' if args.together else 'one after the other'}; services on core 0, "
        "wrk on core 1",
        "",
        "| scenario | TLS req/s | plain req/s | TLS / plain (rounds) | p99 ms TLS | plain "
        "| service CPU us/req TLS | plain | PostgreSQL CPU us/req TLS | plain | non-2xx |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    below = []
    for scenario in args.selected:
        tls, plain = runs[(scenario.name, "TLS")], runs[(scenario.name, "plain")]
        quotients = [
            t.result.requests_per_second / p.result.requests_per_second
            for t, p in zip(tls, plain, strict=True)
        ]
        ratio = statistics.median(quotients)
        if ratio < WITHIN:
            below.append(scenario.name)

        def median(side: list[Run], figure: Callable[[Run], float]) -> float:
            return statistics.median(figure(run) for run in side)

        failed = sum(r.result.non_2xx + r.result.socket_errors for r in [*tls, *plain])
        cells = [
            f"{scenario.name}, `{scenario.title}`",
            *(f"{median(s, lambda r: r.result.requests_per_second):,.0f}" for s in (tls, plain)),
            f"{ratio:.3f} ({min(quotients):.2f}-{max(quotients):.2f})",
            *(f"{median(s, lambda r: r.result.p99_ms):.1f}" for s in (tls, plain)),
            *(f"{median(s, lambda r: r.service_us):.0f}" for s in (tls, plain)),
            *(f"{median(s, lambda r: r.postgres_us):.0f}" for s in (tls, plain)),
            str(failed),
        ]
        lines.append(f"| {' | '.join(cells)} |")
    lines += ["", f"Below {WITHIN:.2f} of plain: {', '.join(below) or 'none'}."]
    return lines


def main(argv: list[str] | None = None) -> int:
    """Measure; the report on stdout, progress on stderr. Everything started is
    stopped on the way out, on SIGTERM and Ctrl-C too. Exit codes: 0 done, 1 a step
    failed, 2 bad flags, 130 interrupted."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    return guarded(lambda: _run(args, argv))


if __name__ == "__main__":
    sys.exit(main())
