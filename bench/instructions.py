"""``python -m bench.instructions [REVISION ...]`` (``make instructions``): the
machine instructions one read costs the worker's Python, counted by valgrind
(cachegrind), for each revision (a git revision, or ``.`` for the working tree).

req/s on a shared machine moves by 10-30% between runs of the same code, and
``make compare`` tells a 2% change only over several rounds. An instruction count
is the same for the same code whatever else the machine does (repeats agree within
about 1%), so a change of 2% in a request's path shows in one run. It is not time: a cache or
branch miss costs no instruction, so a change is still judged served, with
``make compare``.

The app runs in process, as granian's worker runs it: production settings and every
device on, uvloop, ASGI calls 16 at a time, on a seeded SQLite file; granian's own
work (HTTP, sockets) is not counted, the access-log thread's is. Each scenario runs
twice under valgrind, with :data:`START` requests and with ``START + requests``;
their difference over ``requests`` is one request, the start-up (2 billion
instructions, imports most) cancelled out. What runs by the clock (the timers, the
access-log thread's flushes) runs more often a request under valgrind, which is
about 40 times slower. Half a minute a scenario and revision.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench import seed, servers
from bench.compare import source

#: The reads driven in process: the path and query of each, as bench/lua asks them.
READS: dict[str, Callable[[random.Random, int], tuple[str, bytes]]] = {
    "S1": lambda draw, pets: ("/v1/pets", b"limit=20"),
    "S2": lambda draw, pets: ("/v1/pets", b"status=available&limit=100"),
    "S3": lambda draw, pets: (f"/v1/pets/{draw.randint(1, pets)}", b""),
}
#: Requests at once, as connections of a load would send them.
AT_ONCE = 16
#: Requests of the shorter run, whose count is taken off the longer's.
START = 160
_COUNTED = re.compile(rb"I\s+refs:\s+([\d,]+)")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__)
    parser.add_argument("revisions", nargs="*", default=["."], help="default: . (the working tree)")
    parser.add_argument("--scenarios", default="S1,S3", help="any of S1-S3 (default: S1,S3)")
    parser.add_argument(
        "--requests", type=int, default=4800, help="requests counted (default: 4800)"
    )
    parser.add_argument("--pets", type=int, default=10_000, help="animals seeded (default: 10000)")
    parser.add_argument("--drive", help=argparse.SUPPRESS)  # the child: one scenario
    args = parser.parse_args(argv)
    names = [name.strip().upper() for name in args.scenarios.split(",")]
    unknown = [name for name in names if name not in READS]
    if unknown:
        parser.error(f"--scenarios: {', '.join(unknown)}: only S1, S2 and S3 are driven")
    if args.requests < AT_ONCE:
        parser.error(f"--requests: at least {AT_ONCE}")
    args.names = names
    return args


def count(src: Path, scenario: str, requests: int, *, pets: int, env: dict[str, str]) -> int:
    """Instructions valgrind counts for ``requests`` reads of ``scenario`` (of
    ``pets`` animals) after the app's start, with the ``petstore`` of ``src``. Raises
    RuntimeError when the child fails or valgrind prints no count."""
    command = [
        "valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
        sys.executable, "-m", "bench.instructions", "--drive", scenario,
        "--requests", str(requests), "--pets", str(pets),
    ]  # fmt: skip
    child_env = {**env, "PYTHONPATH": os.pathsep.join([str(src), str(servers.REPO)])}
    done = subprocess.run(command, env=child_env, capture_output=True, cwd=servers.REPO)
    found = _COUNTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        tail = done.stderr.decode(errors="replace")[-2000:]
        raise RuntimeError(f"{scenario} under valgrind failed ({done.returncode}): {tail}")
    return int(found.group(1).replace(b",", b""))


def drive(scenario: str, requests: int, *, pets: int) -> None:
    """The child: start the worker's app, answer ``requests`` reads of ``scenario``
    (ids drawn from a seeded generator), stop it. Raises AssertionError on any answer
    but 200."""
    import uvloop

    from petstore.cli.worker import app as worker_app

    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)  # the worker's app is made with its loop set, as granian does
    app = worker_app()
    key = os.environ["BENCH_KEY"]
    draw, statuses = random.Random(1), []
    authorization = f"Bearer {key}".encode()

    def scope() -> dict[str, Any]:
        path, query = READS[scenario](draw, pets)
        return {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(),
            "query_string": query, "root_path": "",
            "headers": [(b"host", b"127.0.0.1:8000"), (b"authorization", authorization)],
            "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8000),
        }  # fmt: skip

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    async def connection(count: int) -> None:
        for _ in range(count):
            await app(scope(), receive, send)

    async def main() -> None:
        started, stopping = asyncio.Event(), asyncio.Event()
        phases = iter([{"type": "lifespan.startup"}])

        async def lifespan_receive() -> dict[str, Any]:
            phase = next(phases, None)
            if phase is None:
                await stopping.wait()
                return {"type": "lifespan.shutdown"}
            return phase

        async def lifespan_send(message: dict[str, Any]) -> None:
            if message["type"] == "lifespan.startup.complete":
                started.set()

        lifespan = asyncio.ensure_future(app({"type": "lifespan"}, lifespan_receive, lifespan_send))
        await started.wait()
        each, rest = divmod(requests, AT_ONCE)
        await asyncio.gather(*(connection(each + (i < rest)) for i in range(AT_ONCE)))
        stopping.set()
        await lifespan

    loop.run_until_complete(main())
    loop.close()
    assert statuses == [200] * requests, sorted(set(statuses))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.drive:
        drive(args.drive, args.requests, pets=args.pets)
        return 0
    print(f"instructions a read (valgrind; {args.requests} requests, {AT_ONCE} at once)")
    with ExitStack() as stack:
        url = stack.enter_context(seed.sqlite_database(pets=args.pets))
        # The driver's requests name 127.0.0.1:8000, where its links then point.
        env = servers.service_environment(database_url=url, port=8000)
        env["BENCH_KEY"] = seed.create_key(url)
        work = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        for number, revision in enumerate(args.revisions):
            src = source(stack, revision, work, f"revision-{number}")
            for scenario in args.names:
                short = count(src, scenario, START, pets=args.pets, env=env)
                long = count(src, scenario, START + args.requests, pets=args.pets, env=env)
                print(f"{revision} {scenario}: {(long - short) / args.requests:,.0f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
