"""wrk: installed from the Debian packages when missing, run pinned, its report read.

The scenario scripts (``bench/lua``) print ``bench <name> <value>`` lines from their
``done()`` hook: exact counts and percentiles in microseconds, no unit parsing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

LUA_DIR = Path(__file__).with_name("lua")


class WrkError(RuntimeError):
    """wrk is missing and could not be installed, or a run gave no report."""


@dataclass(frozen=True, slots=True)
class Result:
    """One wrk run: throughput, latency percentiles (ms), failures."""

    requests_per_second: float
    p50_ms: float
    p99_ms: float
    non_2xx: int
    socket_errors: int


def ensure_installed() -> str:
    """The path of ``wrk``, running ``apt-get install -y wrk`` first when it is missing
    (and ``apt-get update`` when that install fails). Raises WrkError."""
    found = shutil.which("wrk")
    if found:
        return found
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [*sudo, "apt-get", "install", "-y", "-q", "wrk"]
    print("wrk is missing: " + " ".join(install), file=sys.stderr)
    if subprocess.run(install, env=env, stdout=sys.stderr, check=False).returncode != 0:
        subprocess.run([*sudo, "apt-get", "update", "-q"], env=env, stdout=sys.stderr, check=False)
        subprocess.run(install, env=env, stdout=sys.stderr, check=False)
    found = shutil.which("wrk")
    if not found:
        raise WrkError("could not install wrk; install it with: apt-get install -y wrk")
    return found


def version(wrk: str) -> str:
    """``wrk 4.1.0`` or the like (wrk prints its version on ``-v``, exiting 1)."""
    out = subprocess.run([wrk, "-v"], capture_output=True, text=True, check=False)
    first = (out.stdout or out.stderr).strip().splitlines()
    return " ".join(first[0].split()[:2]) if first else "wrk"


@dataclass(frozen=True, slots=True)
class Load:
    """How wrk drives a server: its pinning, threads, connections, seconds."""

    wrk: str
    cpu: int
    threads: int
    connections: int


def run(load: Load, *, url: str, script: str, seconds: float, env: dict[str, str]) -> Result:
    """Run ``script`` (a file in bench/lua) against ``url`` for ``seconds``; see
    :func:`run_with_extras`, whose extra ``bench`` lines this drops."""
    return run_with_extras(load, url=url, script=script, seconds=seconds, env=env)[0]


def run_with_extras(
    load: Load, *, url: str, script: str, seconds: float, env: dict[str, str]
) -> tuple[Result, dict[str, float]]:
    """Run ``script`` (a file in bench/lua) against ``url`` for ``seconds``.

    ``env`` reaches the script (BENCH_KEY, BENCH_PETS, BENCH_DEEP_PATHS). The wrk
    process is killed if this is interrupted. Raises WrkError when wrk fails.
    """
    command = [
        "taskset", "-c", str(load.cpu), load.wrk,
        f"-t{load.threads}", f"-c{load.connections}", f"-d{max(1, round(seconds))}s",
        "--latency", "--timeout", "5s", "-s", script, url,
    ]  # fmt: skip
    process = subprocess.Popen(
        command,
        cwd=LUA_DIR,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output, _ = process.communicate(timeout=seconds + 30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return parse(output, returncode=process.returncode), _values(output)


def parse(output: str, *, returncode: int = 0) -> Result:
    """The Result in wrk's ``output``; raises WrkError when the report is missing."""
    values = _values(output)
    needed = {"requests", "duration_us", "p50_us", "p99_us", "non2xx", "socket_errors"}
    if returncode != 0 or not needed <= values.keys():
        raise WrkError(f"wrk failed (exit {returncode}):\n{output.strip()}")
    return Result(
        requests_per_second=values["requests"] / (values["duration_us"] / 1e6),
        p50_ms=values["p50_us"] / 1000,
        p99_ms=values["p99_us"] / 1000,
        non_2xx=int(values["non2xx"]),
        socket_errors=int(values["socket_errors"]),
    )


def _values(output: str) -> dict[str, float]:
    """The ``bench <name> <value>`` lines the Lua ``done()`` hooks print."""
    values: dict[str, float] = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "bench":
            values[parts[1]] = float(parts[2])
    return values
