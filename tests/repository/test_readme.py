"""The README's promises: its shell lines work against a real server as written."""

from __future__ import annotations

import re
import subprocess
import sys

from tests import ROOT
from tests.conftest import LiveServer

README = (ROOT / "README.md").read_text()


def _shell_lines() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", README, flags=re.DOTALL)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_readme_curl_lines_work_against_a_server(live_server: LiveServer) -> None:
    lines = [line for line in _shell_lines() if not line.startswith("make ")]
    curls = [line for line in lines if line.startswith("curl ")]
    assert len(curls) == 3, "one curl line per operation"
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
    assert statuses == ["201", "200", "200"], result.stdout


def test_readme_shows_the_two_commands() -> None:
    assert "make serve" in README
    assert "make test" in README


def test_readme_says_how_a_rerun_and_a_faster_import_work() -> None:
    """Issue: a re-run adds nothing twice only with the same API key within 24 hours
    (D16); a key with its own limit imports faster (D22)."""
    section = README[README.index("### Importing animals") :]
    section = section[: section.index("\n## ")]
    assert "same API key within 24" in section
    assert "--rate-limit 6000/minute" in section
    assert "waiting" in section


def test_readme_runs_the_python_example_with_the_virtualenv_python() -> None:
    section = README[README.index("## From Python") :]
    assert ".venv/bin/python" in section[: section.index("```python")]


def test_readme_generates_typescript_types_that_leave_status_optional() -> None:
    section = README[README.index("### Generated clients") :]
    assert "openapi-typescript@7" in section
    assert "--default-non-nullable false" in section
    assert "make lint-openapi" in section


def test_every_decision_the_code_cites_is_in_docs_decisions() -> None:
    """The code cites the contract's decisions by number (``D16``); each number it
    cites is a decision of docs/decisions.md, which holds D1 to its last, none missing."""
    root = ROOT
    stated = set(re.findall(r"\*\*(D\d+)\b", (root / "docs" / "decisions.md").read_text()))
    cited = {
        number
        for path in (root / "src" / "petstore").rglob("*.py")
        for number in re.findall(r"\bD(\d+)\b", path.read_text())
    }
    assert {f"D{number}" for number in cited} <= stated
    assert stated == {f"D{n}" for n in range(1, len(stated) + 1)}
