"""A bad setting stops every ``petstore`` command that reads the settings with exit
code 2 and one line per problem naming its variable, never with a traceback and never
showing a password (issue 60, P4); production and staging need their own public URL
(issue 60, P7). The findings' own cases, and every ``serve`` (which, not refused,
would serve on), run as processes, as an operator runs them, where a traceback would
show in a journal; the others through click's runner, which lets an exception the
command did not handle fail the test."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner, Result
from dotenv import dotenv_values

from petstore.cli.main import main
from petstore.server.config import SettingsError, load_settings
from testbed.certificates import Certificates
from tests.servers import LiveServer, free_port

ROOT = Path(__file__).resolve().parents[2]
SECRET = "a-private-cursor-secret-of-36-chars!"
PASSWORD = "hunter2-Pa55"

#: The malformed database URLs of issue 60 (P4), and the password each holds.
MALFORMED = [
    pytest.param("postgresql://petstore:Pa%zzword@db1:5432/petstore", "Pa%zzword", id="bad-escape"),
    pytest.param(
        f"postgresql://petstore:{PASSWORD}@db1:5432/petstore?foo=bar", PASSWORD, id="unknown-param"
    ),
    pytest.param(f"postgresql://petstore:{PASSWORD}@[db1/petstore", PASSWORD, id="broken-host"),
]
COMMANDS = [
    pytest.param(["serve"], id="serve"),
    pytest.param(["keys", "list"], id="keys-list"),
    pytest.param(["db", "upgrade"], id="db-upgrade"),
]


def petstore(
    args: list[str], env: dict[str, str], *, cwd: Path
) -> subprocess.CompletedProcess[str]:
    """``python -m petstore *args`` with ``env`` as its only PETSTORE_* variables."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PETSTORE_")}
    return subprocess.run(
        [sys.executable, "-m", "petstore", *args],
        env={**clean, **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=30,
        check=False,
    )


def invoke(args: list[str], env: dict[str, str], *, cwd: Path) -> Result:
    """``petstore *args`` through click's runner in ``cwd``, with ``env`` as its only
    PETSTORE_* variables; an exception the command does not handle is raised."""
    here = Path.cwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(main, args, env=env, catch_exceptions=False)
    finally:
        os.chdir(here)


def assert_refused(
    result: subprocess.CompletedProcess[str] | Result, variable: str, *secrets: str
) -> None:
    """Exit code 2, one ``Error: VARIABLE...`` line on stderr, no traceback, no secret."""
    code = (
        result.returncode if isinstance(result, subprocess.CompletedProcess) else result.exit_code
    )
    assert code == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"Error: {variable}"), result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    for secret in secrets:
        assert secret not in result.stdout + result.stderr


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(("url", "password"), MALFORMED)
def test_a_malformed_database_url_is_refused_without_its_password(
    tmp_path: Path, command: list[str], url: str, password: str
) -> None:
    result = petstore(command, {"PETSTORE_DATABASE_URL": url}, cwd=tmp_path)
    assert_refused(result, "PETSTORE_DATABASE_URL", password, url)
    assert "postgresql://petstore:***@" in result.stderr  # shown, without its password
    assert not (tmp_path / "data").exists()  # refused before anything ran


@pytest.mark.servers
def test_a_percent_encoded_password_still_works(tmp_path: Path, postgres_run_database: str) -> None:
    """``p@ss:w/rd%`` written as libpq wants it. The test server trusts loopback, so
    the password is not checked there; libpq's reading of it is."""
    from psycopg.conninfo import conninfo_to_dict

    parts = urllib.parse.urlsplit(postgres_run_database)
    if parts.password:
        pytest.skip("the test server's URL holds a password of its own")
    netloc = f"{parts.username}:p%40ss%3Aw%2Frd%25@{parts.netloc.rpartition('@')[2]}"
    url = parts._replace(netloc=netloc).geturl()
    assert conninfo_to_dict(url)["password"] == "p@ss:w/rd%"
    upgraded = petstore(["db", "upgrade"], {"PETSTORE_DATABASE_URL": url}, cwd=tmp_path)
    assert upgraded.returncode == 0, upgraded.stderr
    listed = petstore(["keys", "list"], {"PETSTORE_DATABASE_URL": url}, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("ID")
    server = LiveServer(
        tmp_path, env={"PETSTORE_DATABASE_URL": url, "PETSTORE_MIGRATE_ON_START": "true"}
    )
    server.start()
    try:
        auth = {"Authorization": f"Bearer {server.dev_key}"}
        assert httpx.get(f"{server.url}/v1/pets", headers=auth).status_code == 200
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        pytest.param(f"redis://:{PASSWORD}@[redis/0", PASSWORD, id="broken-host"),
        pytest.param(f"redis://:{PASSWORD}@redis.internal/0", PASSWORD, id="no-port"),
        pytest.param(f"redis://:{PASSWORD}@redis.internal:6379/zero", PASSWORD, id="bad-db"),
        pytest.param(f"redis://:{PASSWORD}@redis.internal:6379/0?foo=bar", PASSWORD, id="param"),
        pytest.param("redis://:pa/ss@redis.internal:6379/0", "pa/ss", id="slash-in-password"),
    ],
)
def test_a_malformed_redis_url_is_refused_without_its_password(
    tmp_path: Path, url: str, secret: str
) -> None:
    """redis-py and ``limits`` failed on each in every worker, after ``serve`` said it
    was serving."""
    result = invoke(["openapi"], {"PETSTORE_REDIS_URL": url}, cwd=tmp_path)
    assert_refused(result, "PETSTORE_REDIS_URL", secret)
    assert "redis://:***@" in result.stderr


def test_a_value_that_is_not_utf8_is_refused_naming_its_variable(tmp_path: Path) -> None:
    """pydantic cannot hold such a value at all (a UnicodeEncodeError)."""
    not_utf8 = os.fsdecode(b"\xff" * 40)
    result = petstore(["keys", "list"], {"PETSTORE_CURSOR_SECRET": not_utf8}, cwd=tmp_path)
    assert_refused(result, "PETSTORE_CURSOR_SECRET")


def secrets_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "secrets"
    folder.mkdir(mode=0o700)
    return folder


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        pytest.param(
            lambda s: (s / "petstore_cursor_secret").write_bytes(b"\xff" * 40),
            "is not UTF-8 text",
            id="not-utf8",
        ),
        pytest.param(
            lambda s: (s / "petstore_port").symlink_to(s / "gone"),
            "leads to no file",
            id="broken-link",
        ),
        pytest.param(
            lambda s: (s / "petstore_port").symlink_to(s.parent / "port"),
            "leads out of",
            id="link-out",
        ),
        pytest.param(lambda s: (s / "petstore_port").mkdir(), "is not a file", id="folder"),
    ],
)
def test_a_setting_file_that_cannot_be_read_as_one_is_refused_naming_it(
    tmp_path: Path, make: Callable[[Path], object], reason: str
) -> None:
    """pydantic-settings failed without naming the file (not UTF-8, a broken link)
    or skipped it with a warning, the setting then silently at its default."""
    folder = secrets_dir(tmp_path)
    (tmp_path / "port").write_text("9001")
    make(folder)
    result = invoke(["openapi"], {"PETSTORE_SECRETS_DIR": str(folder)}, cwd=tmp_path)
    assert_refused(result, "PETSTORE_SECRETS_DIR")
    assert reason in result.stderr
    assert f"{folder}/petstore_" in result.stderr


@pytest.mark.parametrize(
    ("environment", "variable"),
    [("production", "PETSTORE_BASE_URL"), ("staging", "PETSTORE_STAGING_BASE_URL")],
)
def test_production_and_staging_refuse_to_serve_without_their_public_url(
    tmp_path: Path, environment: str, variable: str
) -> None:
    """Issue 60 (P7): production served every rel="next" under the placeholder
    (tests/server/test_config.py: the placeholder itself is refused too)."""
    env = {
        "PETSTORE_ENVIRONMENT": environment,
        "PETSTORE_CURSOR_SECRET": SECRET,
        "PETSTORE_PORT": str(free_port()),
    }
    result = petstore(["serve"], env, cwd=tmp_path)
    assert_refused(result, variable)
    assert "public URL" in result.stderr
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("environment", ["production", "staging"])
def test_the_shipped_settings_files_name_no_url_the_service_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, environment: str
) -> None:
    """deploy/*/petstore.env leave the public URL to the operator: with the file alone
    (and its secrets) the service refuses, naming the URL; with the operator's URL it
    starts."""
    values = dotenv_values(ROOT / "deploy" / environment / "petstore.env")
    for name, value in values.items():
        if value is not None:
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("PETSTORE_SECRETS_DIR", str(secrets_dir(tmp_path)))
    monkeypatch.setenv("PETSTORE_CURSOR_SECRET", SECRET)
    variable = "PETSTORE_BASE_URL" if environment == "production" else "PETSTORE_STAGING_BASE_URL"
    with pytest.raises(SettingsError, match=f"^{variable} must be set"):
        load_settings()
    monkeypatch.setenv(variable, "https://pets.example.org/v1")
    assert load_settings().environment == environment


def test_several_bad_settings_are_one_line_each(tmp_path: Path) -> None:
    env = {"PETSTORE_PORT": "abc", "PETSTORE_LOG_LEVEL": "LOUD"}
    result = invoke(["keys", "list"], env, cwd=tmp_path)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "Error: PETSTORE_PORT: Input should be a valid integer, unable to parse string as an "
        "integer",
        "Error: PETSTORE_LOG_LEVEL: must be DEBUG, INFO, WARNING or ERROR",
    ]


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        pytest.param("file.txt/petstore.db", "cannot create", id="folder-under-a-file"),
        pytest.param("file.txt", "file is not a database", id="not-a-database"),
    ],
)
def test_a_sqlite_file_that_cannot_be_used_is_refused_without_a_traceback(
    tmp_path: Path, path: str, reason: str
) -> None:
    (tmp_path / "file.txt").write_text("not a database\n")
    for command in (["db", "upgrade"], ["keys", "list"]):
        result = invoke(
            command, {"PETSTORE_DATABASE_URL": f"sqlite:///{tmp_path / path}"}, cwd=tmp_path
        )
        assert result.exit_code == 1, result.stderr
        assert result.stderr.startswith("Error: "), result.stderr
        assert reason in result.stderr
        assert "Traceback" not in result.stderr


def test_serve_refuses_a_metrics_port_another_process_listens_on(tmp_path: Path) -> None:
    """Each worker failed on it with a traceback, after ``serve`` said it was serving."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {"PETSTORE_PORT": str(free_port()), "PETSTORE_METRICS_PORT": str(port)}
        result = petstore(["serve"], env, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert f"127.0.0.1:{port} is already in use" in result.stderr
    assert "PETSTORE_METRICS_PORT" in result.stderr
    assert "Serving" not in result.stdout
    assert "Traceback" not in result.stderr


def test_serve_refuses_a_tls_key_that_is_not_its_certificates(tmp_path: Path) -> None:
    """Issue 59: the files are read before any worker starts; one line, exit 2, and
    nothing of the key shown."""
    certificates = Certificates(tmp_path / "tls")
    certificates.make("127.0.0.1")
    server = LiveServer(tmp_path, env={
        "PETSTORE_TLS_CERTIFICATE": str(certificates.certificate("127.0.0.1")),
        "PETSTORE_TLS_KEY": str(tmp_path / "tls" / "ca.key"),
    })  # fmt: skip
    refused = server.refused()
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        "Error: PETSTORE_TLS_CERTIFICATE and PETSTORE_TLS_KEY must be a PEM certificate and "
        "its own private key, not encrypted"
    ]
