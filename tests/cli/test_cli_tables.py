"""Tables of the ``petstore`` command: whole values to a pipe, fitted to the width of a
terminal only when written to one, whole there too with ``--wide``/``--no-trunc``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from petstore.cli.main import main
from petstore.cli.tables import table, width
from tests.conftest import LiveServer

LONG_NAME = "nightly-billing-export-for-the-finance-team-" + "x" * 40


def run_on_terminal(args: list[str], env: dict[str, str], *, columns: int) -> str:
    """``petstore *args`` with its standard output on a pseudo-terminal ``columns``
    wide (``COLUMNS``, as a shell sets it): what it printed there, line ends as
    ``\\n``."""
    primary, secondary = os.openpty()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "petstore", *args],
            stdin=subprocess.DEVNULL,
            stdout=secondary,
            stderr=subprocess.PIPE,
            env={**os.environ, **env, "COLUMNS": str(columns)},
            timeout=60,
            check=False,
        )
    finally:
        os.close(secondary)
    chunks = []
    try:
        while chunk := os.read(primary, 65536):
            chunks.append(chunk)
    except OSError:  # EIO: the terminal's other end is closed and everything read
        pass
    finally:
        os.close(primary)
    assert result.returncode == 0, result.stderr
    return b"".join(chunks).decode().replace("\r\n", "\n")


@pytest.fixture
def keys_env(tmp_path: Path) -> dict[str, str]:
    """A database holding a key with a long name and one with a short name."""
    env = {"PETSTORE_DATABASE_URL": f"sqlite:///{tmp_path / 'keys.db'}"}
    runner = CliRunner(env=env)
    for name in (LONG_NAME, "ci"):
        made = runner.invoke(main, ["keys", "create", "--name", name, "--rate-limit", "10/second"])
        assert made.exit_code == 0, made.output
    return env


def test_keys_list_to_a_pipe_prints_whole_names(keys_env: dict[str, str]) -> None:
    # `petstore keys list | cat`, with a terminal 40 columns wide said to be there
    env = {**os.environ, **keys_env, "COLUMNS": "40"}
    with subprocess.Popen(
        [sys.executable, "-m", "petstore", "keys", "list"], stdout=subprocess.PIPE, env=env
    ) as listing:
        piped = subprocess.run(
            ["cat"], stdin=listing.stdout, capture_output=True, text=True, timeout=60, check=True
        ).stdout
    assert listing.returncode == 0
    rows = [line.split() for line in piped.splitlines()]
    assert [row[1] for row in rows] == ["NAME", LONG_NAME, "ci"]
    assert "…" not in piped


@pytest.mark.parametrize("columns", [90, 100, 120])
def test_keys_list_on_a_terminal_fits_its_width(keys_env: dict[str, str], columns: int) -> None:
    shown = run_on_terminal(["keys", "list"], keys_env, columns=columns)
    lines = shown.splitlines()
    assert len(lines) == 3, shown
    assert max(width(line) for line in lines) <= columns, shown
    name = lines[1].split()[1]
    assert name.endswith("…")
    assert LONG_NAME.startswith(name[:-1])
    assert lines[2].split()[1] == "ci"
    assert [line.split()[-1] for line in lines] == ["STATE", "active", "active"]


@pytest.mark.parametrize("flag", ["--wide", "--no-trunc"])
def test_keys_list_wide_prints_whole_names_on_a_terminal(
    keys_env: dict[str, str], flag: str
) -> None:
    shown = run_on_terminal(["keys", "list", flag], keys_env, columns=80)
    assert shown.splitlines()[1].split()[1] == LONG_NAME
    assert "…" not in shown


def test_keys_list_on_a_terminal_wide_enough_cuts_nothing(keys_env: dict[str, str]) -> None:
    shown = run_on_terminal(["keys", "list"], keys_env, columns=300)
    assert shown.splitlines()[1].split()[1] == LONG_NAME


def test_pets_list_on_a_terminal_fits_its_width_and_to_a_pipe_is_whole(
    live_server: LiveServer,
) -> None:
    env = {"PETSTORE_URL": f"{live_server.url}/v1", "PETSTORE_API_KEY": live_server.dev_key}
    name = "Sir-Reginald-Fluffington-the-Third-of-the-Northern-Kennels-" + "y" * 30
    added = CliRunner(env=env).invoke(main, ["pets", "add", name, "--category-id", "3"])
    assert added.exit_code == 0, added.output
    assert name in added.stdout  # the runner's output is no terminal: whole
    shown = run_on_terminal(["pets", "list", "--all"], env, columns=60)
    assert max(width(line) for line in shown.splitlines()) <= 60, shown
    assert name not in shown
    assert name[:20] in shown
    wide = run_on_terminal(["pets", "list", "--all", "--wide"], env, columns=60)
    assert name in wide


def test_a_fitted_table_never_cuts_the_header_nor_below_eight_columns() -> None:
    rows = [("ID", "NAME", "STATE"), ("1", "a" * 50, "active")]
    assert table(rows, fit=20, shrink=(1,)) == ["ID  NAME      STATE", "1   aaaaaaa…  active"]
    assert table(rows, fit=None, shrink=(1,))[1] == f"1   {'a' * 50}  active"
    assert table(rows, fit=200, shrink=(1,))[1] == f"1   {'a' * 50}  active"


def test_a_fitted_table_cuts_by_display_width() -> None:
    rows = [("ID", "NAME"), ("1", "小白" * 10)]
    (_, line) = table(rows, fit=15, shrink=(1,))
    assert width(line) <= 15
    assert line == "1   小白小白小…"


def test_keys_list_shows_control_characters_of_a_name_escaped(tmp_path: Path) -> None:
    """Issue 53 (N5): an ESC sequence in a key's name reached the terminal, and a
    line break split its row."""
    runner = CliRunner(env={"PETSTORE_DATABASE_URL": f"sqlite:///{tmp_path / 'keys.db'}"})
    made = runner.invoke(main, ["keys", "create", "--name", "evil\x1b[31mred\nline2"])
    assert made.exit_code == 0, made.output
    assert "(evil\\x1b[31mred\\nline2, prefix" in made.stderr
    listed = runner.invoke(main, ["keys", "list"])
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    assert len(lines) == 2, lines
    assert lines[1].split()[1] == "evil\\x1b[31mred\\nline2"
    assert "\x1b" not in listed.output


def test_a_table_escapes_controls_and_bidi_controls_and_keeps_emoji_joiners() -> None:
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    rows = [("ID", "NAME"), ("1", "Rex\u202egnp.exe"), ("2", f"{family}\t\x85\u2066")]
    assert table(rows) == ["ID  NAME", "1   Rex\\u202egnp.exe", f"2   {family}\\t\\x85\\u2066"]


def test_a_table_and_keys_create_show_invisible_characters_escaped(tmp_path: Path) -> None:
    """A name padded with characters drawn as nothing (a zero width space, the Hangul
    filler, the Braille blank) reads as another on a terminal; an emoji's variation
    selector is kept."""
    name = "admin\u200b\u3164\u2800"
    rows = [("ID", "NAME"), ("1", name), ("2", "\u2764\ufe0f")]
    assert table(rows) == ["ID  NAME", "1   admin\\u200b\\u3164\\u2800", "2   \u2764\ufe0f"]
    runner = CliRunner(env={"PETSTORE_DATABASE_URL": f"sqlite:///{tmp_path / 'keys.db'}"})
    made = runner.invoke(main, ["keys", "create", "--name", name])
    assert made.exit_code == 0, made.output
    assert "(admin\\u200b\\u3164\\u2800, prefix" in made.stderr
