"""``python -m bench.soak`` (``make soak``): a mixed load against one instance for a
configurable time, reported in slices (issue 4: soak).

Seeds a fresh database, starts ``petstore serve`` as shipped (production, one
worker, the benchmark's lifted per-key limit), runs the S6 mix with wrk in slices of
``--slice`` seconds, and prints per slice: requests/s, p50/p90/p99/p99.9, non-2xx,
socket errors, the worker's resident memory. At the end it checks that every create
acknowledged with 201 is in the store (count before + acknowledged == count after).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from bench import seed, servers, wrk

SCRIPT = "soak.lua"


def _count(url: str, key: str) -> int:
    """How many animals the service lists, following every page. The server runs in
    production, where ``rel="next"`` points under its configured public URL: each
    link's path and query are followed at ``url``."""
    total, next_url = 0, f"{url}/v1/pets?limit=100"
    with httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
        while next_url:
            response = client.get(next_url)
            response.raise_for_status()
            total += len(response.json())
            link = response.headers.get("link")
            target = urlsplit(link[1 : link.index(">")]) if link else None
            next_url = f"{url}{target.path}?{target.query}" if target else ""
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--duration", type=float, default=300, help="seconds of load in all")
    parser.add_argument("--slice", type=float, default=30, help="seconds per reported slice")
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--pets", type=int, default=10_000, help="animals seeded")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--postgres-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args(argv)
    load = wrk.Load(wrk=wrk.ensure_installed(), cpu=1, threads=1, connections=args.connections)
    with ExitStack() as stack:
        database_url = stack.enter_context(
            seed.database(args.backend, pets=args.pets, postgres_url=args.postgres_url)
        )
        key = seed.create_key(database_url)
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="petstore-soak-")))
        server = stack.enter_context(
            servers.running(servers.service(database_url=database_url, cpu=0, log=logs / "s.log"))
        )
        before = _count(server.url, key)
        start_rss = server.memory()
        print(f"# Soak: {args.backend}, {args.pets:,} animals, {args.duration:.0f} s, "
              f"{args.connections} connections, S6 mix")  # fmt: skip
        print(f"memory at start: {_mib(start_rss)}")
        print("| slice | req/s | p50 ms | p90 ms | p99 ms | p99.9 ms | non-2xx | socket errors "
              "| creates | worker RSS |")  # fmt: skip
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        created = non_2xx = errors = 0
        slices = max(1, round(args.duration / args.slice))
        began = time.monotonic()
        for number in range(1, slices + 1):
            result, extra = wrk.run_with_extras(
                load,
                url=server.url,
                script=SCRIPT,
                seconds=args.slice,
                env={"BENCH_KEY": key, "BENCH_PETS": str(args.pets)},
            )
            created += int(extra["created"])
            non_2xx += result.non_2xx
            errors += result.socket_errors
            rss = server.memory()
            print(
                f"| {number} | {result.requests_per_second:,.0f} | {result.p50_ms:.2f} "
                f"| {extra['p90_us'] / 1000:.2f} | {result.p99_ms:.2f} "
                f"| {extra['p999_us'] / 1000:.2f} | {result.non_2xx} | {result.socket_errors} "
                f"| {int(extra['created'])} | {_mib(rss)} |",
                flush=True,
            )
        after = _count(server.url, key)
        end_rss = server.memory()
    print(f"\nload: {time.monotonic() - began:.0f} s; non-2xx: {non_2xx}; socket errors: {errors}")
    print(f"memory at start: {_mib(start_rss)}; at end: {_mib(end_rss)}")
    # wrk stops with creates in flight: those may be stored without a counted 201.
    lost = max(0, before + created - after)
    print(f"animals: {before:,} before + {created:,} acknowledged creates = "
          f"{before + created:,}; listed after: {after:,} "
          f"({max(0, after - before - created)} stored as wrk stopped); lost: {lost}")  # fmt: skip
    return 0 if lost == 0 and non_2xx == 0 else 1


def _mib(rss: dict[str, int]) -> str:
    return ", ".join(f"{name} {kib / 1024:.1f} MiB" for name, kib in rss.items())


if __name__ == "__main__":
    sys.exit(main())
