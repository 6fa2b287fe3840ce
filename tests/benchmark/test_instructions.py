"""``make instructions`` (bench/instructions.py): the in-process driver that valgrind
counts answers every read it sends, and the command refuses what it cannot drive."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench import instructions, seed, servers
from tests import ROOT


@pytest.mark.slow  # a child process of its own for each scenario: make test, not make check
@pytest.mark.parametrize("scenario", ["S1", "S2", "S3"])
def test_the_driver_answers_every_read_of_the_scenario(scenario: str) -> None:
    with seed.sqlite_database(pets=100) as url:
        env = servers.service_environment(database_url=url, port=8000)
        env["BENCH_KEY"] = seed.create_key(url)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
        command = [sys.executable, "-m", "bench.instructions", "--drive", scenario]
        done = subprocess.run(
            [*command, "--requests", "40", "--pets", "100"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    # Every request wrote its access line: 40 answered, none refused.
    assert done.stderr.count('"status":200') == 40, done.stderr[-2000:]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--scenarios", "S1,S4"], "--scenarios: S4: only S1, S2 and S3 are driven"),
        (["--requests", "8"], "--requests: at least 16"),
    ],
)
def test_what_cannot_be_driven_is_refused(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        instructions.parse_args(arguments)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
