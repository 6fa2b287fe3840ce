"""``python -m bench.compare BEFORE AFTER`` (``make compare``): which of two versions
of the code serves more, measured through a noisy machine's noise.

``make bench`` loads the service and the baseline one after the other, so whatever
slows the machine between two runs (a neighbour on the host, steal time) lands in
the ratio: on a shared machine single runs of unchanged code spread by 10-30%. This
loads two ``petstore serve`` AT THE SAME TIME, both on one core, each on its own copy
of one seeded SQLite file, by two wrk processes on the other core. The scheduler
shares the core between the two workers, so a slower machine slows both alike, and
the ratio of their req/s is the inverse of the ratio of their CPU time a request.
Two servers of the same code give 0.98-1.02 (docs/performance.md).

A process keeps its own small bias for its whole life (where its memory lies, its
hash seed): rounds on the same two processes repeat it, and two runs of the same
comparison can differ by more than their rounds do. ``--fresh`` starts both anew
for each round, alternating which starts and is loaded first, so that the median is
taken over processes too; give it a warmup long enough for the servers' first
seconds (filling what they keep in memory) to be over.

BEFORE and AFTER are git revisions (checked out in temporary worktrees) or ``.``, the
working tree as it is. Both run as ``make bench`` runs the service: one worker,
production settings, everything on. With ``--backend postgres`` both serve one seeded
database (created for the run and dropped after it) on the PostgreSQL server.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

from bench import seed, servers, wrk
from bench.run import add_database_arguments, select_scenarios

WORKING_TREE = "."


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.compare",
        description="Serve two versions at once on one core; print AFTER/BEFORE req/s.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("before", help="git revision, or . for the working tree")
    parser.add_argument("after", help="git revision, or . for the working tree")
    add_database_arguments(parser)
    parser.add_argument("--scenarios", default="S3,S6", help="any of S1-S4, S6")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds per scenario")
    parser.add_argument("--duration", type=float, default=4, help="seconds per round")
    parser.add_argument("--warmup", type=float, default=2, help="seconds of load first")
    parser.add_argument("--server-cpu", type=int, default=0, help="core both servers share")
    parser.add_argument("--wrk-cpu", type=int, default=1, help="core both wrk run on")
    parser.add_argument(
        "--fresh", action="store_true", help="serve each round on two new processes"
    )
    args = parser.parse_args(argv)
    args.selected = select_scenarios(parser, args.scenarios)
    if any(scenario.name == "S5" for scenario in args.selected):
        parser.error("S5 needs cursors issued by each server; compare S1-S4 and S6")
    if args.pets < 200 or args.rounds < 1 or args.duration < 1:
        parser.error("need --pets >= 200, --rounds >= 1, --duration >= 1")
    return args


def summary(before: list[float], after: list[float]) -> tuple[list[float], float]:
    """Each round's AFTER/BEFORE req/s, and their median (rounds paired in order)."""
    ratios = [b / a for a, b in zip(before, after, strict=True)]
    return ratios, statistics.median(ratios)


def source(stack: ExitStack, revision: str, work: Path, name: str) -> Path:
    """The ``src`` folder of ``revision``: the working tree's, or a temporary
    worktree's (removed when ``stack`` closes). Raises CalledProcessError."""
    if revision == WORKING_TREE:
        return servers.REPO / "src"
    tree = work / name
    git = ["git", "-C", str(servers.REPO)]
    subprocess.run([*git, "worktree", "add", "--detach", "-q", str(tree), revision], check=True)
    stack.callback(subprocess.run, [*git, "worktree", "remove", "--force", str(tree)], check=False)
    return tree / "src"


def together(
    load: wrk.Load, urls: list[str], script: str, seconds: float, env: dict[str, str]
) -> list[wrk.Result]:
    """Run ``script`` against every server in ``urls`` at once; their results."""
    with ThreadPoolExecutor(len(urls)) as pool:
        runs = [
            pool.submit(wrk.run, load, url=url, script=script, seconds=seconds, env=env)
            for url in urls
        ]
        return [run.result() for run in runs]


def main(argv: list[str] | None = None) -> int:
    """Compare; a line per round on stderr, the summary on stdout. Exit codes: 0 done,
    1 a step failed, 2 bad flags, 130 interrupted."""
    args = parse_args(argv)
    try:
        return _run(args)
    except KeyboardInterrupt:
        print("\ninterrupted: every process started was stopped", file=sys.stderr)
        return 130
    except (subprocess.CalledProcessError, wrk.WrkError, RuntimeError, OSError) as exc:
        print(f"failed: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    load = wrk.Load(wrk=wrk.ensure_installed(), cpu=args.wrk_cpu, threads=1, connections=64)
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="petstore-compare-")))
        sources = [
            source(stack, args.before, work, "before"),
            source(stack, args.after, work, "after"),
        ]
        url = stack.enter_context(
            seed.database(args.backend, pets=args.pets, postgres_url=args.postgres_url)
        )
        key = seed.create_key(url)
        database_urls = []
        for name in ("before", "after"):
            database_url = url
            if args.backend == "sqlite":  # each its own copy: S4 and S6 write
                copy = work / f"{name}.db"
                shutil.copyfile(url.removeprefix("sqlite:///"), copy)
                database_url = f"sqlite:///{copy}"
            database_urls.append(database_url)

        def serve(stack: ExitStack, order: tuple[int, int]) -> dict[int, str]:
            """Start the sides in ``order`` (0 before, 1 after); their URLs by side."""
            urls = {}
            for side in order:
                server = servers.service(
                    database_url=database_urls[side],
                    cpu=args.server_cpu,
                    log=work / f"{('before', 'after')[side]}.log",
                    source=sources[side],
                )
                urls[side] = stack.enter_context(servers.running(server)).url
            return urls

        lasting = None if args.fresh else serve(stack, (0, 1))
        env = {"BENCH_KEY": key, "BENCH_PETS": str(args.pets)}
        lines = [
            f"AFTER ({args.after}) / BEFORE ({args.before}), req/s of both served at once "
            f"on core {args.server_cpu}, {args.backend}, {args.pets:,} animals, {args.rounds} x "
            f"{args.duration:g} s{', each round on new processes' if args.fresh else ''}:",
        ]
        for scenario in args.selected:
            if lasting is not None and args.warmup > 0:
                together(load, [lasting[0], lasting[1]], scenario.script, args.warmup, env)
            before, after = [], []
            for number in range(1, args.rounds + 1):
                with ExitStack() as round_stack:
                    order, urls = (0, 1), lasting
                    if urls is None:  # --fresh: new processes, who goes first alternating
                        order = (0, 1) if number % 2 else (1, 0)
                        urls = serve(round_stack, order)
                        if args.warmup > 0:
                            together(
                                load, [urls[s] for s in order], scenario.script, args.warmup, env
                            )
                    measured = together(
                        load, [urls[s] for s in order], scenario.script, args.duration, env
                    )
                results = dict(zip(order, measured, strict=True))
                before.append(results[0].requests_per_second)
                after.append(results[1].requests_per_second)
                print(
                    f"{scenario.name} round {number}/{args.rounds}: before "
                    f"{before[-1]:,.0f} req/s, after {after[-1]:,.0f} req/s",
                    file=sys.stderr,
                )
            ratios, median = summary(before, after)
            rounds = ", ".join(f"{ratio:.3f}" for ratio in ratios)
            lines.append(f"- {scenario.name}: {median:.3f} (rounds {rounds})")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
