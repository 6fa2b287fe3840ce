"""What TLS at the load balancer costs: requests a second through one HAProxy
(deploy/haproxy.cfg) in front of one ``petstore serve``, over TLS and over plain HTTP
in turns, in one run, with keep-alive clients (wrk, 64 connections).

    python -m bench.tls_cost [--rounds 3] [--duration 10] [--warmup 2] [--scenarios S1,S3]

Both sides go through the same HAProxy process and frontend: the plain side is a
second ``bind`` of that frontend, added to a copy of the file for this measurement
only (the shipped file answers plain HTTP with a redirect). The certificate is the
deployment's kind (deploy/tls/make-certificates: ECDSA P-256), and wrk negotiates
TLS 1.3. The service is pinned to core 0 as ``make bench`` pins it; HAProxy and wrk
share core 1. Besides requests a second, HAProxy's own CPU time per request (user
plus system, from /proc) says where the cost lands: on the balancer, not the
instance. Prints one line per run on stderr and a Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from bench import report, scenarios, seed, servers, wrk
from testbed import DEPLOY
from testbed.certificates import Certificates
from testbed.processes import Daemon, answers, free_port, program, wait_for

#: The name of HAProxy's certificate in the run's certificates.
NAME = "balancer"


@dataclass(frozen=True, slots=True)
class Side:
    """One run of one side: requests a second and HAProxy's CPU microseconds a request."""

    requests_per_second: float
    haproxy_us: float
    non_2xx: int


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.tls_cost", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="TLS then plain, this many times")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of each run")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds before each run")
    parser.add_argument("--pets", type=int, default=10_000)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--scenarios", default="S1,S3", help="read scenarios of make bench")
    args = parser.parse_args(argv)
    args.selected = scenarios.select(args.scenarios)
    return args


def haproxy_config(root: Path, *, server_port: int, plain_port: int) -> Path:
    """deploy/haproxy.cfg with one ``server`` line and a plain bind in its frontend."""
    text = (DEPLOY / "haproxy.cfg").read_text()
    tls_bind = '    bind "${PETSTORE_LB_BIND}" ssl crt'
    if tls_bind not in text:
        raise RuntimeError(f"deploy/haproxy.cfg has no line starting {tls_bind!r}")
    text = text.replace(tls_bind, f"    bind 127.0.0.1:{plain_port}\n{tls_bind}", 1)
    config = root / "haproxy.cfg"
    config.write_text(f"{text}    server app1 127.0.0.1:{server_port}\n")
    return config


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of process ``pid``, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(load: wrk.Load, pid: int, *, url: str, script: str, args: argparse.Namespace,
             env: dict[str, str]) -> Side:  # fmt: skip
    """One warm-up, then one run of ``script`` against ``url``."""
    wrk.run(load, url=url, script=script, seconds=args.warmup, env=env)
    before = cpu_seconds(pid)
    result = wrk.run(load, url=url, script=script, seconds=args.duration, env=env)
    spent = cpu_seconds(pid) - before
    served = result.requests_per_second * round(args.duration)
    return Side(result.requests_per_second, spent / served * 1e6, result.non_2xx)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load = wrk.Load(wrk=wrk.ensure_installed(), cpu=1, threads=1, connections=args.connections)
    with ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="petstore-tls-")))
        database_url = stack.enter_context(seed.database("sqlite", pets=args.pets, postgres_url=""))
        env = {"BENCH_KEY": seed.create_key(database_url), "BENCH_PETS": str(args.pets)}
        service = servers.service(database_url=database_url, cpu=0, log=root / "service.log")
        stack.enter_context(servers.running(service))
        certificates = Certificates(root / "certificates")
        certificates.make(f"{NAME},127.0.0.1")
        tls_port, plain_port = free_port(), free_port()
        settings = {
            "PETSTORE_LB_BIND": f"127.0.0.1:{tls_port}",
            "PETSTORE_LB_REDIRECT_BIND": f"127.0.0.1:{free_port()}",
            "PETSTORE_LB_CERTIFICATE": str(certificates.pem(NAME)),
            "PETSTORE_LB_STATS_SOCKET": str(root / "haproxy.sock"),
            "PETSTORE_LB_MAXCONN": "2000",
        }
        config = haproxy_config(root, server_port=service.port, plain_port=plain_port)
        haproxy = Daemon(
            ["taskset", "-c", "1", program("haproxy", package="haproxy"), "-db", "-f", str(config)],
            log=root / "haproxy.log", env={**os.environ, **settings},
        )  # fmt: skip
        stack.callback(haproxy.stop, grace=5)
        wait_for(lambda: answers(plain_port, "/readyz"), what="HAProxy")
        urls = {"TLS": f"https://127.0.0.1:{tls_port}", "plain": f"http://127.0.0.1:{plain_port}"}
        results: dict[tuple[str, str], list[Side]] = {}
        for number in range(1, args.rounds + 1):
            for scenario in args.selected:
                # Each side first in every other round: a machine that slows down or
                # speeds up within a round favours neither.
                for side, url in sorted(urls.items(), reverse=number % 2 == 0):
                    got = measured(load, haproxy.pid, url=url, script=scenario.script,
                                   args=args, env=env)  # fmt: skip
                    results.setdefault((scenario.name, side), []).append(got)
                    print(f"round {number} {scenario.name} {side}: "
                          f"{got.requests_per_second:,.0f} req/s, HAProxy "
                          f"{got.haproxy_us:.1f} us/request, non-2xx {got.non_2xx}",
                          file=sys.stderr)  # fmt: skip
    when = time.strftime("%Y-%m-%d")
    print(f"{report.cpu_model()}, {os.cpu_count()} cores; {when}; {args.rounds} rounds of "
          f"{args.duration:g} s, {args.connections} connections\n")  # fmt: skip
    print("| scenario | TLS req/s | plain req/s | TLS/plain (range) | HAProxy us/req TLS | plain |")
    print("|---|---:|---:|---:|---:|---:|")
    for scenario in args.selected:
        tls, plain = results[(scenario.name, "TLS")], results[(scenario.name, "plain")]
        tls_rps = statistics.median(s.requests_per_second for s in tls)
        plain_rps = statistics.median(s.requests_per_second for s in plain)
        ratios = [
            t.requests_per_second / p.requests_per_second for t, p in zip(tls, plain, strict=True)
        ]
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
        print(f"| {scenario.name} | {tls_rps:,.0f} | {plain_rps:,.0f} | "
              f"{statistics.median(ratios):.3f} ({spread}) | "
              f"{statistics.median(s.haproxy_us for s in tls):.1f} | "
              f"{statistics.median(s.haproxy_us for s in plain):.1f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
