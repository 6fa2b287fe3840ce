"""The tutorial (docs/tutorial.md) as a newcomer follows it: every command of its
``console`` blocks, in order, in one shell, against a real ``petstore serve``, each
answering what the page shows."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import ROOT
from tests.conftest import LiveServer

TUTORIAL = ROOT / "docs" / "tutorial.md"
#: Where the page's commands find the service; the test's server is elsewhere.
SHOWN_URL = "http://127.0.0.1:8000"
#: Stands for what differs between runs: a whole line alone, else any text in a line.
ELLIPSIS = "..."


@dataclass(frozen=True)
class Step:
    """A command of the page (its ``> `` continuation lines joined) and the lines
    shown under it."""

    command: str
    shown: tuple[str, ...]


def steps(page: str) -> list[Step]:
    """Every ``$ `` command of the page's ``console`` blocks, in order."""
    found: list[Step] = []
    for block in re.findall(r"```console\n(.*?)```", page, flags=re.DOTALL):
        command: list[str] = []
        shown: list[str] = []
        for line in block.splitlines():
            if line.startswith("$ "):
                if command:
                    found.append(Step("\n".join(command), tuple(shown)))
                command, shown = [line[2:]], []
            elif line.startswith("> ") and not shown:
                command.append(line[2:])
            else:
                shown.append(line)
        if command:
            found.append(Step("\n".join(command), tuple(shown)))
    return found


def matches(shown: tuple[str, ...], output: str) -> bool:
    """Whether ``output`` is what ``shown`` shows: line by line, a line ``...``
    standing for any number of lines, and ``...`` in a line for any text."""
    pattern = "".join(
        r"(?:.*\n)*?" if line == ELLIPSIS else re.escape(line).replace(r"\.\.\.", ".*?") + r"\n"
        for line in shown
    )
    return re.fullmatch(pattern, output) is not None


def test_matches_takes_an_ellipsis_for_lines_or_for_text() -> None:
    assert matches(("...", "key petstore_...", "..."), "installing\nkey petstore_abc\nmore\n")
    assert matches(("a", "b"), "a\nb\n")
    assert not matches(("a", "b"), "a\nb\nc\n")
    assert not matches(("key petstore_...",), "key other_abc\n")


def test_the_tutorial_imports_a_file_and_lists_page_by_page() -> None:
    commands = [step.command for step in steps(TUTORIAL.read_text())]
    assert any(command.startswith("make serve") for command in commands)
    assert any("pets import" in command for command in commands)
    assert any("pets list" in command and "--all" in command for command in commands)
    assert any('rel="next"' in command and "while" in command for command in commands)


@pytest.mark.slow
def test_the_tutorials_commands_answer_as_shown(live_server: LiveServer, tmp_path: Path) -> None:
    """The server stands for ``make serve`` (its own start-up lines are checked
    against the page); the virtualenv's ``petstore`` is this interpreter's."""
    page = steps(TUTORIAL.read_text())
    serve = next(step for step in page if step.command == "make serve")
    shown = tuple(line.replace(SHOWN_URL, live_server.url) for line in serve.shown)
    assert matches(shown, live_server.output()), live_server.output()

    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "petstore").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m petstore "$@"\n')
    (tools / "petstore").chmod(0o755)
    run = [step for step in page if step.command not in ("make serve", ". .venv/bin/activate")]
    script = "\n".join(
        f"{{\n{step.command.replace(SHOWN_URL, live_server.url)}\n}} >{i}.out 2>&1\n"
        f"echo $? >{i}.status"
        for i, step in enumerate(run)
    )
    env = {
        **live_server.env,
        "PATH": f"{tools}:{live_server.env['PATH']}",
        # Each line as it is written, in the order a terminal shows stdout and stderr.
        "PYTHONUNBUFFERED": "1",
    }
    subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, timeout=120, check=True)
    for i, step in enumerate(run):
        output = (tmp_path / f"{i}.out").read_text()
        status = (tmp_path / f"{i}.status").read_text().strip()
        assert status == "0", f"{step.command}\n{output}"
        shown = tuple(line.replace(SHOWN_URL, live_server.url) for line in step.shown)
        assert matches(shown, output), f"$ {step.command}\n{output}"
