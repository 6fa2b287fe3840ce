"""The README's promises: a front door whose shell lines work against a real server as
written, which states every decision of the contract in a line, and whose links into
the docs lead somewhere. The docs' home page (docs/README.md) repeats its two-minute
start, which is run the same way."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import ROOT
from tests.conftest import LiveServer

README = (ROOT / "README.md").read_text()
DECISIONS = ROOT / "docs" / "decisions.md"
#: The home pages whose two-minute start a newcomer runs.
FRONT_DOORS = ("README.md", "docs/README.md")


def shell_lines(page: str) -> list[str]:
    """The lines of the page's ``sh`` blocks, blank ones left out."""
    blocks = re.findall(r"```sh\n(.*?)```", page, flags=re.DOTALL)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


@pytest.mark.parametrize("door", FRONT_DOORS)
def test_the_two_minute_start_creates_and_lists_against_a_server(
    live_server: LiveServer, door: str
) -> None:
    """Its ``sh`` lines but ``make``'s, run in one shell against a real server: the
    create answers 201, the list 200 with the animal."""
    page = (ROOT / door).read_text()
    lines = [line for line in shell_lines(page) if not line.startswith("make ")]
    assert [line.split()[:2] for line in lines if line.startswith("curl ")] == [
        ["curl", "-i"],
        ["curl", "-i"],
    ], "one curl line to create, one to list"
    script = "set -e\n" + "\n".join(lines)
    script = script.replace(".venv/bin/petstore", f"{sys.executable} -m petstore")
    script = script.replace("http://127.0.0.1:8000", live_server.url)
    result = subprocess.run(
        ["bash", "-c", script],
        env=live_server.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    statuses = re.findall(r"HTTP/1.1 (\d{3})", result.stdout)
    assert statuses == ["201", "200"], result.stdout
    assert '"name":"Rex"' in result.stdout.split("HTTP/1.1 200")[1]


def test_the_readme_is_a_front_door() -> None:
    """At most about 150 lines: what it is, when to use it, two minutes, where next."""
    assert len(README.splitlines()) <= 150
    for heading in ("## When to use it, and when not", "## Two minutes", "## Where to go next"):
        assert heading in README


def test_readme_shows_the_two_commands_and_ci_runs_its_test_command() -> None:
    """``make serve`` and ``make test`` are what a newcomer needs; CI runs the latter."""
    assert re.search(r"^\$ make serve$", README, flags=re.MULTILINE)
    assert re.search(r"^make test\b", README, flags=re.MULTILINE)
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^\s*(unshare .*')?make test'?$", ci, flags=re.MULTILINE)


def _decisions() -> set[str]:
    return set(re.findall(r"\*\*(D\d+)\b", DECISIONS.read_text()))


def test_the_readme_states_every_decision_in_one_line() -> None:
    """The project's rule: each decision is stated in the README (here one short line;
    docs/decisions.md has the full text, linked)."""
    lines = re.findall(r"^- \*\*(D\d+)\*\* (.+)$", README, flags=re.MULTILINE)
    assert [number for number, _ in lines] == sorted(_decisions(), key=lambda d: int(d[1:]))
    assert all(len(line) <= 130 for _, line in lines), [n for n, line in lines if len(line) > 130]
    assert "](docs/decisions.md)" in README


def test_every_decision_the_code_cites_is_in_docs_decisions() -> None:
    """The code cites the contract's decisions by number (``D16``); each number it
    cites is a decision of docs/decisions.md, which holds D1 to its last, none missing."""
    stated = _decisions()
    cited = {
        number
        for path in (ROOT / "src" / "petstore").rglob("*.py")
        for number in re.findall(r"\bD(\d+)\b", path.read_text())
    }
    assert {f"D{number}" for number in cited} <= stated
    assert stated == {f"D{n}" for n in range(1, len(stated) + 1)}


def slug(heading: str) -> str:
    """The anchor GitHub and MyST give a heading."""
    heading = re.sub(r"[`*]", "", heading)
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return {slug(heading) for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE)}


@pytest.mark.parametrize("page", ["README.md", "CHANGELOG.md"])
def test_links_into_the_repository_lead_to_a_file_and_its_heading(page: str) -> None:
    """The README and the changelog are read on GitHub, where nothing checks their
    links as ``make docs`` checks the site's."""
    text = (ROOT / page).read_text()
    links = re.findall(r"\]\((?!https?://|#)([^)#]+)(?:#([^)]+))?\)", text)
    assert links
    for target, anchor in links:
        path = ROOT / target
        assert path.exists(), target
        if anchor:
            assert anchor in anchors(path), f"{target}#{anchor}"


def test_slug_is_githubs() -> None:
    assert slug("Step 10b: two load balancers, one address (D27)") == (
        "step-10b-two-load-balancers-one-address-d27"
    )
    assert slug("The `dev` key (development, and staging when asked)") == (
        "the-dev-key-development-and-staging-when-asked"
    )
