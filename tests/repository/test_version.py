"""One version everywhere: ``petstore --version``, the package's metadata and the
changelog's newest entry say ``petstore.__version__``."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib

import pytest
from click.testing import CliRunner

from petstore import __version__
from petstore.cli.main import main
from tests import ROOT


def test_version_is_the_codes_however_the_command_is_started() -> None:
    """``python -m petstore`` (as the image's entry and the tests start it) names the
    command ``petstore`` too."""
    result = subprocess.run(
        [sys.executable, "-m", "petstore", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout == f"petstore, version {__version__}\n"


def test_version_needs_no_installed_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tree run from its source (``PYTHONPATH=src``), or one whose installed metadata
    is stale, still reports the version of the code that runs."""

    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"petstore, version {__version__}\n"


def test_the_package_metadata_and_the_changelog_name_the_same_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["version"] == __version__
    changelog = (ROOT / "CHANGELOG.md").read_text()
    newest = re.search(r"^## \[(\d+\.\d+\.\d+)\]", changelog, flags=re.MULTILINE)
    assert newest, "CHANGELOG.md has a version entry"
    assert newest.group(1) == __version__
