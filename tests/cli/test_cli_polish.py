"""The ``petstore`` command as a newcomer meets it (issue: what a newcomer hits): keys
as people paste them and never printed, options that take what people type, tables
aligned (fitted to a terminal only on one: tests/cli/test_cli_tables.py), help without
decision codes, and an import that paces itself by the rate limit and can be
interrupted and resumed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from petstore.cli.main import main
from petstore.cli.tables import width
from petstore.client import Client
from tests.cli import client_runner
from tests.conftest import LiveServer, all_pets

KEY_RE = re.compile(r"petstore_[A-Za-z0-9_-]{43}")


@pytest.fixture
def runner(live_server: LiveServer) -> CliRunner:
    return client_runner(live_server)


# API keys as people paste them, and never shown ----------------------------------------


@pytest.mark.parametrize("around", [" ", "\r", "\r\n", "\t ", "\n\n"])
def test_a_key_with_white_space_around_it_works_from_the_environment_flag_and_file(
    live_server: LiveServer, tmp_path: Path, around: str
) -> None:
    key = live_server.dev_key
    url = f"{live_server.url}/v1"
    key_file = tmp_path / "key.txt"
    key_file.write_bytes(f"{around}{key}{around}".encode())
    ways = [
        (["pets", "list"], {"PETSTORE_URL": url, "PETSTORE_API_KEY": f"{key}{around}"}),
        (["pets", "list", "--api-key", f"{around}{key}{around}"], {"PETSTORE_URL": url}),
        (["pets", "list", "--api-key-file", str(key_file)], {"PETSTORE_URL": url}),
    ]
    for args, env in ways:
        result = CliRunner(env={"PETSTORE_API_KEY": "", **env}).invoke(main, args)
        assert result.exit_code == 0, (args, result.output)


def test_no_error_message_of_the_cli_or_the_client_contains_the_key(
    live_server: LiveServer, tmp_path: Path
) -> None:
    key = live_server.dev_key
    inner = key[:20] + " " + key[20:]
    unknown = "petstore_" + "x" * 43
    url = f"{live_server.url}/v1"
    missing = tmp_path / "absent"
    cases = [
        (url, key, ["pets", "get", "999999"]),  # 404
        (url, unknown, ["pets", "list"]),  # 401
        (url, inner, ["pets", "list"]),  # white space inside
        (url, key + "\x00", ["pets", "list"]),  # a control character
        (url, key + "é", ["pets", "list"]),  # not ASCII
        ("http://127.0.0.1:1/v1", key, ["pets", "list"]),  # unreachable
        (live_server.url, key, ["pets", "list"]),  # not the base
        (f"{url}/pets", key, ["pets", "list"]),  # the collection
        (url.removeprefix("http://"), key, ["pets", "list"]),  # no scheme
        (url, key, ["pets", "list", "--limit", "0"]),  # usage
        (url, key, ["pets", "list", "--api-key-file", str(missing)]),
    ]
    secrets = [key, key.removeprefix("petstore_"), inner, unknown.removeprefix("petstore_")]
    for base, api_key, args in cases:
        result = CliRunner(env={"PETSTORE_URL": base, "PETSTORE_API_KEY": ""}).invoke(
            main,
            ["pets", "--api-key", api_key, *args[1:]],  # a later flag wins
        )
        assert result.exit_code != 0, (args, result.output)
        for secret in secrets:
            assert secret not in result.output, (base, args, result.output)
    for api_key in (inner, key + "\n\x00", key + "é"):
        with pytest.raises(ValueError, match="API key") as refused:
            Client(url, api_key=api_key)
        assert key[10:30] not in str(refused.value)


def test_a_url_without_a_scheme_is_a_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(main, ["pets", "list", "--url", "127.0.0.1:8000/v1"])
    assert result.exit_code == 2, result.output
    assert "is not an http:// or https:// URL" in result.stderr


# Small things ------------------------------------------------------------------------


def test_pets_get_with_a_negative_id_says_no_such_animal(runner: CliRunner) -> None:
    result = runner.invoke(main, ["pets", "get", "-1"])
    assert result.exit_code == 4, result.output
    assert "no animal has id -1" in result.stderr


def test_pets_get_names_the_cli_replacement(runner: CliRunner) -> None:
    added = runner.invoke(main, ["pets", "add", "Old", "--category-id", "1", "--json"])
    pet_id = added.stdout.split('"id":')[1].split(",")[0]
    result = runner.invoke(main, ["pets", "get", pet_id])
    assert result.exit_code == 0, result.output
    assert "use petstore pets list --status STATUS instead" in result.stderr
    assert "iter_pets" not in result.stderr


def test_tables_are_aligned_by_display_width(runner: CliRunner) -> None:
    names = ["Rex", "🐶 Bo", "小白", "Zoë"]
    for name in names:
        assert runner.invoke(main, ["pets", "add", name, "--category-id", "7"]).exit_code == 0
    result = runner.invoke(main, ["pets", "list", "--all"])
    lines = [
        line
        for line in result.stdout.splitlines()
        if line.split()[0] in ("ID",) or any(name in line for name in names)
    ]
    columns = {width(line[: line.index("7  ")]) for line in lines[1:]}
    assert len(columns) == 1, lines  # CATEGORY ID starts at one display column in every row


def _commands(group: click.Group, path: list[str]) -> list[list[str]]:
    found = [path]
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found += _commands(command, [*path, name])
        else:
            found.append([*path, name])
    return found


def test_no_help_text_cites_a_decision_code() -> None:
    for path in _commands(main, []):
        result = CliRunner().invoke(main, [*path, "--help"])
        assert result.exit_code == 0, path
        assert not re.search(r"\(D\d+\)|\bD\d\d\b", result.output), (path, result.output)
        assert "%Y" not in result.output, path


# Keys --------------------------------------------------------------------------------


@pytest.fixture
def keys_runner(tmp_path: Path) -> CliRunner:
    return CliRunner(env={"PETSTORE_DATABASE_URL": f"sqlite:///{tmp_path / 'keys.db'}"})


@pytest.mark.parametrize(
    ("given", "expires"),
    [
        ("2031-01-01T00:00:00Z", "2031-01-01T00:00:00+00:00"),
        ("2031-01-01T00:00:00.000Z", "2031-01-01T00:00:00+00:00"),
        ("2031-01-01T00:00:00", "2031-01-01T00:00:00+00:00"),
        ("2031-01-01T03:00:00+03:00", "2031-01-01T00:00:00+00:00"),
    ],
)
def test_expires_at_takes_the_iso_forms_people_paste(
    keys_runner: CliRunner, given: str, expires: str
) -> None:
    made = keys_runner.invoke(main, ["keys", "create", "--name", "ci", "--expires-at", given])
    assert made.exit_code == 0, made.output
    listed = keys_runner.invoke(main, ["keys", "list", "--json"])
    assert f'"expires_at": "{expires}"' in listed.stdout


def test_a_past_expiry_names_the_option(keys_runner: CliRunner) -> None:
    result = keys_runner.invoke(
        main, ["keys", "create", "--name", "ci", "--expires-at", "2020-01-01"]
    )
    assert result.exit_code == 2
    assert "'--expires-at'" in result.stderr
    assert "must be in the future" in result.stderr


@pytest.mark.parametrize(
    ("given", "listed"),
    [
        ("10/sec", "10/second"),
        ("100 per minute", "100/minute"),
        ("5/hr", "5/hour"),
        (" 20 per 2 Minutes ", "20/2 minutes"),
        ("007/1 s", "7/second"),
    ],
)
def test_rate_limit_takes_short_and_long_units(
    keys_runner: CliRunner, given: str, listed: str
) -> None:
    made = keys_runner.invoke(main, ["keys", "create", "--name", "ci", "--rate-limit", given])
    assert made.exit_code == 0, made.output
    assert listed in keys_runner.invoke(main, ["keys", "list"]).stdout


def test_keys_list_shows_whole_names_to_a_pipe_marks_expired_keys_and_has_one_json_case(
    keys_runner: CliRunner,
) -> None:
    soon = (datetime.now(UTC) + timedelta(seconds=1.2)).isoformat()
    long_name = "a-very-long-name-for-the-nightly-billing-export-" + "x" * 52
    made = keys_runner.invoke(
        main, ["keys", "create", "--name", long_name, "--rate-limit", "100000/minute"]
    )
    assert made.exit_code == 0, made.output
    made = keys_runner.invoke(main, ["keys", "create", "--name", "short", "--expires-at", soon])
    assert made.exit_code == 0, made.output
    assert keys_runner.invoke(main, ["keys", "create", "--name", "gone"]).exit_code == 0
    assert keys_runner.invoke(main, ["keys", "revoke", "3"]).exit_code == 0
    time.sleep(1.5)
    listed = keys_runner.invoke(main, ["keys", "list"])
    lines = listed.stdout.splitlines()
    assert lines[1].split()[1] == long_name  # no terminal: whole (tests/cli/test_cli_tables.py)
    assert [line.split()[-1] for line in lines] == ["STATE", "active", "expired", "revoked"]
    as_json = keys_runner.invoke(main, ["keys", "list", "--json"]).stdout
    members = set(re.findall(r'"([A-Za-z_]+)":', as_json))
    assert all(member == member.lower() for member in members), members
    assert long_name in as_json


# An import that paces itself -------------------------------------------------------


@pytest.fixture(scope="module")
def slow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A server whose keys may send 5 requests every 2 seconds."""
    server = LiveServer(
        tmp_path_factory.mktemp("slow"), env={"PETSTORE_RATE_LIMIT": "5 per 2 seconds"}
    )
    server.start()
    yield server
    server.stop()


def _stored(server: LiveServer, prefix: str) -> list[str]:
    """The names starting with ``prefix``, read with a key of its own, higher limit."""
    made = CliRunner(env={"PETSTORE_DATABASE_URL": server.database_url}).invoke(
        main, ["keys", "create", "--name", "reader", "--rate-limit", "1000/second"]
    )
    assert made.exit_code == 0, made.output
    return sorted(
        p["name"]
        for p in all_pets(server.url, made.stdout.split()[-1])
        if p["name"].startswith(prefix)
    )


def test_an_import_longer_than_the_rate_limit_waits_and_stores_every_record(
    slow_server: LiveServer, tmp_path: Path
) -> None:
    path = tmp_path / "many.jsonl"
    path.write_text("".join(f'{{"name":"Paced-{i}","categoryId":1}}\n' for i in range(12)))
    env = {"PETSTORE_URL": f"{slow_server.url}/v1", "PETSTORE_API_KEY": slow_server.dev_key}
    started = time.monotonic()
    result = CliRunner(env=env).invoke(main, ["pets", "import", str(path)])
    took = time.monotonic() - started
    assert result.exit_code == 0, result.output
    assert "12 animals stored, 0 refused" in result.stdout
    assert "waiting" in result.stderr
    assert "for the rate limit (5 every 2 s" in result.stderr
    assert 3 < took < 12
    assert _stored(slow_server, "Paced-") == sorted(f"Paced-{i}" for i in range(12))


def test_the_client_exposes_the_last_quota_seen(slow_server: LiveServer) -> None:
    with Client(f"{slow_server.url}/v1", api_key=slow_server.dev_key) as petstore:
        assert petstore.last_quota is None
        petstore.list_pets()
        quota = petstore.last_quota
    assert quota is not None
    assert (quota.limit, quota.window) == (5, 2)
    assert 0 <= quota.remaining < 5
    assert 0 <= quota.reset <= 2


@pytest.fixture
def own_slow_server(tmp_path: Path) -> Iterator[LiveServer]:
    """As ``slow_server``, but whose log holds this test's requests only."""
    server = LiveServer(tmp_path / "own", env={"PETSTORE_RATE_LIMIT": "5 per 2 seconds"})
    server.root.mkdir()
    server.start()
    yield server
    server.stop()


def test_ctrl_c_during_an_import_says_where_it_stopped_and_a_rerun_resumes(
    own_slow_server: LiveServer, tmp_path: Path
) -> None:
    slow_server = own_slow_server
    path = tmp_path / "long.jsonl"
    path.write_text("".join(f'{{"name":"Resumed-{i}","categoryId":2}}\n' for i in range(9)))
    env = {
        **os.environ,
        "PETSTORE_URL": f"{slow_server.url}/v1",
        "PETSTORE_API_KEY": slow_server.dev_key,
    }
    command = [sys.executable, "-m", "petstore", "pets", "import", str(path)]
    with subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as at a terminal: a test run started in the background (`cmd &` in a
        # script) inherits SIGINT ignored, and Python then never raises KeyboardInterrupt.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    ) as importing:
        # Interrupted while it waits for the rate limit: 5 stored, 4 to go.
        assert importing.stderr is not None
        seen = ""
        for line in importing.stderr:
            seen += line
            if "waiting" in line:
                break
        else:
            pytest.fail(f"the import never waited for the rate limit: {seen}")
        importing.send_signal(signal.SIGINT)
        out, err = importing.communicate(timeout=10)
        err = seen + err
    assert importing.returncode == 130, out + err
    assert re.search(r"Interrupted at line \d of long.jsonl: \d animals? stored before it", err)
    assert "Run the same import again" in err
    assert "to resume" in err
    resumed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert _stored(slow_server, "Resumed-") == [f"Resumed-{i}" for i in range(9)]
