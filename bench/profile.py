"""``python -m bench.profile`` (``make profile``): where a request's CPU time goes, by
step, in the service and in the baseline, under the load of ``make bench``.

It sets up as ``make bench`` does (seeded database, ``petstore serve`` with one worker
and production settings, the baseline under the same granian, both pinned to one
core, wrk on the other), then for each scenario and server runs wrk and, in the
middle of the run, samples the worker with py-spy (``--nonblocking``: the worker is
never stopped, so it serves at its usual speed). Two py-spy processes sample the same
window: one writes the flame graph (``<out>/<scenario>-<server>.svg``), the other the
stacks as text, which :func:`steps` sorts into a request's steps.

Each sample is one thread seen running, so a step's share of the samples is its share
of the worker's CPU time; with the worker's CPU time over the window (``/proc``) and
wrk's request count, a share becomes microseconds a request. The report (Markdown,
stdout) is the table of docs/performance.md ("Where a request's time goes").
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import threading
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import psutil

from bench import report, run, servers, wrk
from testbed import processes

#: Where the flame graphs go by default (bench/results is committed; see bench/README.md).
DEFAULT_OUT = servers.REPO / "bench" / "results" / "profile"

#: The step of a running thread with no Python frame: granian's Rust runtime (HTTP
#: parsing and writing, its sockets), which holds no Python frame while it works.
GRANIAN = "granian's own threads (Rust: HTTP, sockets)"
#: granian's threads calling into Python: each request handed to the event loop
#: (``call_soon_threadsafe``, a write to the loop's self-pipe).
HAND_OFF = "granian handing requests to the loop"
#: The event loop (uvloop, in C: its samples end in the Python frame that runs it) and
#: granian's Python glue around each request's task.
LOOP = "event loop"
OTHER = "other Python"
#: A request's steps, each with the modules (or ``module:function`` prefixes) whose
#: frames belong to it. A sample belongs to the step of its innermost frame that
#: matches; the order of this table breaks no ties, the stack does.
STEP_FRAMES: dict[str, tuple[str, ...]] = {
    "parse (request, query, body)": (
        "petstore/server/http/reading.py",
        "petstore/server/http/parsing.py",
        "petstore/server/http/newpet.py",
        "petstore/server/http/routes.py",
        "petstore/server/http/exchange.py:BodyReader",
    ),
    "admission and auth": (
        "petstore/server/rules/admission.py",
        "petstore/server/rules/auth.py",
        "petstore/server/rules/keys.py",
        "petstore/server/rules/auth_failures.py",
    ),
    "rate limit": ("petstore/server/rules/ratelimit.py", "petstore/server/batches.py:TurnBatcher"),
    "rules (pages, cursors, links)": (
        "petstore/server/rules/",
        "petstore/server/http/links.py",
    ),
    "store": ("petstore/server/store/", "petstore/server/batches.py:Batcher", "sqlite3/"),
    "encode and send the answer": (
        "petstore/server/http/exchange.py:Response.respond",
        "petstore/server/http/exchange.py:Response.fail",
        "msgspec/",
    ),
    "access log": (
        "petstore/server/telemetry/logs.py",
        "petstore/server/telemetry/logstream.py",
        "petstore/server/telemetry/logformat.py",
        "petstore/server/telemetry/escapes.py",
        "logging/",
    ),
    "metrics": ("petstore/server/telemetry/metrics.py", "prometheus_client/"),
    "pipeline (the rest of petstore)": ("petstore/", "bench/baseline.py"),
    LOOP: ("asyncio/", "selectors.py", "granian/", "_weakrefset.py"),
}
STEPS = [*STEP_FRAMES, HAND_OFF, GRANIAN, OTHER]


def frame_key(frame: str) -> str:
    """``path:Function.name`` of one py-spy frame, ``name (path/to/file.py:line)``."""
    name, _, where = frame.rpartition(" (")
    path = where.rsplit(":", 1)[0]
    return f"{path}:{name}"


def step_of(stack: list[str]) -> str:
    """The step of one sampled stack (its frames outermost first, the thread first)."""
    for frame in reversed(stack[1:]):
        key = frame_key(frame)
        for step, prefixes in STEP_FRAMES.items():
            if any(key.startswith(prefix) or f"/{prefix}" in key for prefix in prefixes):
                if step == LOOP and "MainThread" not in stack[0]:
                    return HAND_OFF
                return step
    return GRANIAN if len(stack) <= 1 else OTHER


def steps(raw: str) -> dict[int, Counter[str]]:
    """Samples by thread id, then by step, in py-spy's ``--format raw --threads`` output
    (one ``frames count`` line a stack, its first frame ``thread (id)``)."""
    counted: dict[int, Counter[str]] = {}
    for line in raw.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if not (stack.startswith("thread (") and count.isdigit()):
            continue
        frames = stack.split(";")
        thread = int(frames[0].removeprefix("thread (").split(")", 1)[0], 0)
        counted.setdefault(thread, Counter())[step_of(frames)] += int(count)
    return counted


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user and system) each thread of ``pid`` has used so far."""
    return {
        thread.id: thread.user_time + thread.system_time for thread in psutil.Process(pid).threads()
    }


def attribute(
    samples: dict[int, Counter[str]], cpu: dict[int, float], *, main: int
) -> Counter[str]:
    """CPU seconds by step: each thread's CPU time (``cpu``, by thread id) shared among
    the steps in proportion to its samples; a thread never sampled running is granian's
    (the worker's threads are its main thread, granian's and ours, all named)."""
    seconds: Counter[str] = Counter()
    for thread, used in cpu.items():
        counted = samples.get(thread)
        if not counted:
            seconds[OTHER if thread == main else GRANIAN] += used
            continue
        total = sum(counted.values())
        for step, count in counted.items():
            seconds[step] += used * count / total
    return seconds


@dataclass
class Profile:
    """One server under one scenario: the worker's CPU seconds by step over the sampled
    window, and the requests answered in it."""

    seconds: Counter[str]
    requests: float
    requests_per_second: float

    @property
    def cpu_us_per_request(self) -> float:
        return sum(self.seconds.values()) / self.requests * 1e6

    def share(self, step: str) -> float:
        """``step``'s share of the worker's CPU time, 0-1."""
        return self.seconds[step] / (sum(self.seconds.values()) or 1)

    def us_per_request(self, step: str) -> float:
        return self.seconds[step] / self.requests * 1e6


def _py_spy(
    pid: int, *, cpu: int, rate: int, seconds: float, fmt: str, out: Path
) -> subprocess.Popen[str]:
    command = [
        "taskset", "-c", str(cpu), str(Path(sys.executable).with_name("py-spy")), "record",
        "--pid", str(pid), "--rate", str(rate), "--duration", str(max(1, round(seconds))),
        "--nonblocking", "--threads", "--format", fmt, "--output", str(out),
    ]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def profile_one(
    args: argparse.Namespace,
    *,
    load: wrk.Load,
    server: servers.Server,
    script: str,
    env: dict[str, str],
    svg: Path,
) -> Profile:
    """Load ``server`` with ``script`` (after the warm-up) and sample its worker for
    ``args.duration`` seconds in the middle of the run."""
    assert server.daemon is not None
    (worker,) = processes.child_pids(server.daemon.pid)
    if args.warmup > 0:
        wrk.run(load, url=server.url, script=script, seconds=args.warmup, env=env)
    results: list[wrk.Result] = []
    loaded = threading.Thread(
        target=lambda: results.append(
            wrk.run(load, url=server.url, script=script, seconds=args.duration + 2, env=env)
        )
    )
    loaded.start()
    time.sleep(1)
    raw = svg.with_suffix(".txt")
    cpu_before = thread_cpu(worker)
    started = time.monotonic()
    samplers = [
        _py_spy(worker, cpu=args.wrk_cpu, rate=args.rate, seconds=args.duration, fmt=fmt, out=out)
        for fmt, out in (("flamegraph", svg), ("raw", raw))
    ]
    for sampler in samplers:
        output, _ = sampler.communicate()
        if sampler.returncode != 0:
            raise RuntimeError(f"py-spy failed:\n{output}")
    elapsed = time.monotonic() - started
    cpu_after = thread_cpu(worker)
    loaded.join()
    samples = steps(raw.read_text())
    raw.unlink()
    # The graph's title is py-spy's command line: name the files from the repository.
    svg.write_text(svg.read_text().replace(f"{servers.REPO}/", ""))
    cpu = {thread: used - cpu_before.get(thread, 0.0) for thread, used in cpu_after.items()}
    (result,) = results
    return Profile(
        attribute(samples, cpu, main=worker),
        requests=result.requests_per_second * elapsed,
        requests_per_second=result.requests_per_second,
    )


def table(profiles: dict[tuple[str, str], Profile], names: list[str]) -> str:
    """The Markdown table: per step and scenario, the service's microseconds a request
    and share of the samples, and the baseline's."""
    columns = [(name, server) for name in names for server in ("service", "baseline")]
    header = "| step | " + " | ".join(f"{name} {server}" for name, server in columns) + " |"
    lines = [header, "|---|" + "---:|" * len(columns)]
    for step in STEPS:
        cells = []
        for key in columns:
            found = profiles[key]
            share = found.share(step)
            cells.append(
                f"{share * found.cpu_us_per_request:.1f} µs ({share:.0%})" if share else ""
            )
        if any(cells):
            lines.append(f"| {step} | " + " | ".join(cells) + " |")
    total = [f"**{profiles[key].cpu_us_per_request:.1f} µs**" for key in columns]
    rates = [f"{profiles[key].requests_per_second:,.0f}" for key in columns]
    lines.append("| CPU time a request (worker) | " + " | ".join(total) + " |")
    lines.append("| req/s while sampled | " + " | ".join(rates) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.profile",
        description="Flame graphs and a step-by-step table of a request's CPU time (py-spy).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    run.add_database_arguments(parser)
    parser.add_argument("--scenarios", default="S1,S2,S3,S4", help="e.g. S1,S3")
    parser.add_argument("--duration", type=float, default=10, help="seconds sampled")
    parser.add_argument("--warmup", type=float, default=2, help="seconds of load before")
    parser.add_argument("--rate", type=int, default=250, help="samples a second")
    parser.add_argument("--connections", type=int, default=64, help="wrk connections")
    parser.add_argument("--server-cpu", type=int, default=0, help="core the servers run on")
    parser.add_argument("--wrk-cpu", type=int, default=1, help="core wrk runs on")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder of the SVGs")
    args = parser.parse_args(argv)
    args.selected = run.select_scenarios(parser, args.scenarios)
    args.s5_limit, args.s5_pages = 20, 50
    return args


def main(argv: list[str] | None = None) -> int:
    """Profile each selected scenario; the table on stdout, progress on stderr. Exit
    codes: 0 done, 1 a step failed, 2 bad flags."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    wrk_path = wrk.ensure_installed()
    args.out.mkdir(parents=True, exist_ok=True)
    profiles: dict[tuple[str, str], Profile] = {}
    load = wrk.Load(wrk=wrk_path, cpu=args.wrk_cpu, threads=1, connections=args.connections)
    try:
        with ExitStack() as stack:
            stage = run.set_up(stack, args)
            for scenario in args.selected:
                for name, server in (("baseline", stage.baseline), ("service", stage.service)):
                    svg = args.out / f"{scenario.name}-{args.backend}-{name}.svg"
                    profiles[scenario.name, name] = profile_one(
                        args,
                        load=load,
                        server=server,
                        script=scenario.script,
                        env=stage.env,
                        svg=svg,
                    )
                    print(f"{scenario.name} {name}: {svg}", file=sys.stderr)
    except (wrk.WrkError, RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        print(f"failed: {exc}", file=sys.stderr)
        return 1
    names = [scenario.name for scenario in args.selected]
    command = "make profile" + (f" ARGS={shlex.quote(shlex.join(argv))}" if argv else "")
    print(f"## Profile: {args.backend}, {args.pets:,} animals\n")
    load_average = " ".join(f"{x:.2f}" for x in psutil.getloadavg())
    print(f"- {report.cpu_model()}; load average {load_average}")
    print(
        f"- command: `{command}`; py-spy {args.rate} Hz, {args.duration:g} s a server and "
        "scenario\n"
    )
    print(table(profiles, names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
