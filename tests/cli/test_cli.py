"""The ``petstore`` command (D13, D19): keys create/list/revoke, db upgrade, openapi,
serve's refusal of unsafe settings, --version. Exit codes: 0 success, 1 the operation
failed, 2 bad usage or configuration."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from pydantic import SecretStr
from starlette.testclient import TestClient

from petstore import __version__
from petstore.cli.listening import check_exposure
from petstore.cli.main import main
from petstore.server.app import create_app
from petstore.server.config import Environment, Settings, load_settings
from petstore.server.store import migrate
from tests import examples

KEY_RE = re.compile(r"petstore_[A-Za-z0-9_-]{43}")
LIST_COLUMNS = ["ID", "NAME", "PREFIX", "SCOPES", "RATE-LIMIT", "CREATED", "EXPIRES", "STATE"]
JSON_FIELDS = {
    "id",
    "name",
    "prefix",
    "scopes",
    "rate_limit",
    "state",
    "created_at",
    "expires_at",
    "revoked_at",
}


def create_key(runner: CliRunner, *args: str, name: str = "ci") -> str:
    result = runner.invoke(main, ["keys", "create", "--name", name, *args])
    assert result.exit_code == 0, result.output
    key = result.stdout.splitlines()[-1]
    assert KEY_RE.fullmatch(key), result.stdout
    return key


def listed_json(runner: CliRunner) -> list[dict[str, Any]]:
    result = runner.invoke(main, ["keys", "list", "--json"])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def table(result: Result) -> list[list[str]]:
    """``keys list`` output as rows of cells (names in these tests have no spaces)."""
    return [line.split() for line in result.stdout.splitlines()]


def assert_no_secret(text: str, key: str) -> None:
    assert key not in text
    assert key.removeprefix("petstore_") not in text
    assert hashlib.sha256(key.encode()).hexdigest() not in text


def fresh_database(tmp_path: Path) -> tuple[str, Path]:
    path = tmp_path / "not" / "yet" / "there" / "petstore.db"
    return f"sqlite:///{path}", path


# keys create ------------------------------------------------------------------------


def test_keys_create_prints_the_key_alone_on_the_last_line(runner: CliRunner) -> None:
    result = runner.invoke(main, ["keys", "create", "--name", "ci"])
    assert result.exit_code == 0, result.output
    key = result.stdout.splitlines()[-1]
    assert KEY_RE.fullmatch(key), result.stdout
    # `KEY=$(petstore keys create --name ci | tail -1)` gets exactly the key...
    assert result.stdout.rstrip("\n").rsplit("\n", 1)[-1] == key
    # ...and a person at a terminal sees it last, once.
    assert result.output.splitlines()[-1] == key
    assert result.output.count(key) == 1


def test_keys_create_tells_the_operator_the_id_and_prefix(runner: CliRunner) -> None:
    result = runner.invoke(main, ["keys", "create", "--name", "ci"])
    assert result.exit_code == 0, result.output
    key = result.stdout.splitlines()[-1]
    (record,) = listed_json(runner)
    assert str(record["id"]) in result.stderr
    assert record["prefix"] == key[:17]
    assert key[:17] in result.stderr


def test_created_key_authenticates_against_an_app_on_the_same_database(
    runner: CliRunner, client: TestClient
) -> None:
    key = create_key(runner)
    response = client.get("/v1/pets", headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200, response.text
    assert response.json() == []


def test_created_keys_differ(runner: CliRunner) -> None:
    first, second = create_key(runner, name="a"), create_key(runner, name="b")
    assert first != second
    assert [r["name"] for r in listed_json(runner)] == ["a", "b"]


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        pytest.param("2030-01-01T00:00:00Z", "2030-01-01T00:00:00+00:00", id="zulu"),
        pytest.param("2030-01-01T02:00:00+02:00", "2030-01-01T00:00:00+00:00", id="offset"),
        pytest.param("2030-01-01T00:00:00+0000", "2030-01-01T00:00:00+00:00", id="basic-offset"),
        pytest.param("2030-01-01", "2030-01-01T00:00:00+00:00", id="bare-date-is-utc-midnight"),
    ],
)
def test_keys_create_stores_the_expiry_in_utc_and_lists_it(
    runner: CliRunner, given: str, stored: str
) -> None:
    key = create_key(runner, "--expires-at", given)
    (record,) = listed_json(runner)
    assert record["expires_at"] == stored
    assert record["prefix"] == key[:17]
    listed = runner.invoke(main, ["keys", "list"])
    assert listed.exit_code == 0, listed.output
    header, row = table(listed)
    assert row[header.index("EXPIRES")] == stored[:10]


def test_key_with_future_expiry_authenticates(runner: CliRunner, client: TestClient) -> None:
    key = create_key(runner, "--expires-at", "2030-01-01T00:00:00Z")
    response = client.get("/v1/pets", headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("expires_at", "message"),
    [
        pytest.param("2020-01-01T00:00:00Z", "the expiry must be in the future", id="past"),
        pytest.param("2001-09-09", "the expiry must be in the future", id="past-date"),
        pytest.param("garbage", "--expires-at", id="garbage"),
        pytest.param("2030-13-01T00:00:00Z", "--expires-at", id="month-13"),
        pytest.param("01/01/2030", "--expires-at", id="not-iso"),
        pytest.param("", "--expires-at", id="empty"),
    ],
)
def test_keys_create_refuses_a_bad_expiry_with_a_clear_message(
    runner: CliRunner, expires_at: str, message: str
) -> None:
    result = runner.invoke(main, ["keys", "create", "--name", "ci", "--expires-at", expires_at])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert not KEY_RE.search(result.output)
    assert listed_json(runner) == []


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["--name", ""], id="empty-name"),
        pytest.param(["--name", "   "], id="blank-name"),
        pytest.param(["--name", "x" * 101], id="name-over-100"),
        pytest.param([], id="no-name"),
    ],
)
def test_keys_create_refuses_a_bad_name(runner: CliRunner, args: list[str]) -> None:
    result = runner.invoke(main, ["keys", "create", *args])
    assert result.exit_code == 2, result.output
    assert "name" in result.stderr.lower()
    assert not KEY_RE.search(result.output)
    assert listed_json(runner) == []


def test_keys_create_on_a_fresh_database_creates_it(tmp_path: Path) -> None:
    url, path = fresh_database(tmp_path)
    runner = CliRunner(env={"PETSTORE_DATABASE_URL": url})
    key = create_key(runner)
    assert path.is_file()
    assert [r["prefix"] for r in listed_json(runner)] == [key[:17]]


# keys list --------------------------------------------------------------------------


def test_keys_list_shows_metadata_and_never_the_secret_or_its_hash(runner: CliRunner) -> None:
    before = datetime.now(UTC).date()
    key = create_key(runner, name="ci")
    result = runner.invoke(main, ["keys", "list"])
    assert result.exit_code == 0, result.output
    header, row = table(result)
    assert header == LIST_COLUMNS
    listed = dict(zip(header, row, strict=True))
    assert listed["ID"] == "1"
    assert listed["NAME"] == "ci"
    assert listed["PREFIX"] == key[:17]
    created = date.fromisoformat(listed["CREATED"])
    assert before <= created <= datetime.now(UTC).date()
    assert listed["EXPIRES"] == "-"
    assert listed["STATE"] == "active"
    assert listed["SCOPES"] == "read,write"  # D21: both without --scope
    assert listed["RATE-LIMIT"] == "default"  # D22: the service's
    assert_no_secret(result.output, key)


def test_keys_list_of_no_keys_is_just_the_header(runner: CliRunner) -> None:
    result = runner.invoke(main, ["keys", "list"])
    assert result.exit_code == 0, result.output
    assert table(result) == [LIST_COLUMNS]


def test_keys_list_json_has_one_object_per_key_and_no_secret(runner: CliRunner) -> None:
    first = create_key(runner, name="first")
    second = create_key(runner, "--expires-at", "2030-01-01T00:00:00Z", name="second")
    result = runner.invoke(main, ["keys", "list", "--json"])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [set(r) for r in records] == [JSON_FIELDS, JSON_FIELDS]
    assert [(r["id"], r["name"], r["prefix"]) for r in records] == [
        (1, "first", first[:17]),
        (2, "second", second[:17]),
    ]
    assert all(r["scopes"] == ["pets:read", "pets:write"] for r in records)
    assert all(r["rate_limit"] is None for r in records)
    assert records[0]["expires_at"] is None
    assert records[1]["expires_at"] == "2030-01-01T00:00:00+00:00"
    assert all(r["revoked_at"] is None for r in records)
    assert all(datetime.fromisoformat(r["created_at"]).utcoffset() is not None for r in records)
    for key in (first, second):
        assert_no_secret(result.output, key)


# keys revoke ------------------------------------------------------------------------


def test_keys_revoke_marks_the_key_revoked(runner: CliRunner) -> None:
    key = create_key(runner)
    result = runner.invoke(main, ["keys", "revoke", "1"])
    assert result.exit_code == 0, result.output
    assert "1" in result.stdout
    (record,) = listed_json(runner)
    assert record["id"] == 1
    assert datetime.fromisoformat(record["revoked_at"]).utcoffset() is not None
    listed = runner.invoke(main, ["keys", "list"])
    header, row = table(listed)
    assert row[header.index("STATE")] == "revoked"
    assert_no_secret(listed.output + result.output, key)


def test_revoked_key_no_longer_authenticates(
    runner: CliRunner, database_url: str, tmp_path: Path
) -> None:
    key = create_key(runner)
    settings = load_settings(database_url=database_url, key_cache_seconds=0)
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        headers = {"Authorization": f"Bearer {key}"}
        assert test_client.get("/v1/pets", headers=headers).status_code == 200
        assert runner.invoke(main, ["keys", "revoke", "1"]).exit_code == 0
        response = test_client.get("/v1/pets", headers=headers)
    assert response.status_code == 401
    assert response.json()["code"] == "unauthorized"


def test_revoking_leaves_other_keys_active(runner: CliRunner) -> None:
    create_key(runner, name="a")
    create_key(runner, name="b")
    assert runner.invoke(main, ["keys", "revoke", "1"]).exit_code == 0
    records = listed_json(runner)
    assert records[0]["revoked_at"] is not None
    assert records[1]["revoked_at"] is None


@pytest.mark.parametrize("key_id", ["99", "0", "-1"])
def test_revoking_an_unknown_key_exits_1_with_a_message(runner: CliRunner, key_id: str) -> None:
    create_key(runner)
    result = runner.invoke(main, ["keys", "revoke", "--", key_id])
    assert result.exit_code == 1, result.output
    assert f"no active key has id {key_id}" in result.stderr
    assert listed_json(runner)[0]["revoked_at"] is None


def test_revoking_twice_exits_1_and_keeps_the_first_revocation_time(runner: CliRunner) -> None:
    create_key(runner)
    assert runner.invoke(main, ["keys", "revoke", "1"]).exit_code == 0
    (first,) = listed_json(runner)
    again = runner.invoke(main, ["keys", "revoke", "1"])
    assert again.exit_code == 1, again.output
    assert "no active key has id 1" in again.stderr
    assert listed_json(runner) == [first]


def test_revoke_needs_an_integer_id(runner: CliRunner) -> None:
    result = runner.invoke(main, ["keys", "revoke", "abc"])
    assert result.exit_code == 2, result.output
    assert "KEY_ID" in result.stderr


# db upgrade -------------------------------------------------------------------------


def test_db_upgrade_creates_the_folder_and_file_and_is_idempotent(tmp_path: Path) -> None:
    url, path = fresh_database(tmp_path)
    assert not path.parent.exists()
    runner = CliRunner(env={"PETSTORE_DATABASE_URL": url})
    first = runner.invoke(main, ["db", "upgrade"])
    assert first.exit_code == 0, first.output
    assert path.is_file()
    assert migrate.head_revision() in first.stdout
    key = create_key(runner)
    second = runner.invoke(main, ["db", "upgrade"])
    assert second.exit_code == 0, second.output
    assert second.stdout == first.stdout
    with sqlite3.connect(path) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        (version,) = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    conn.close()
    assert {"pets", "api_keys", "alembic_version"} <= tables
    assert version == migrate.head_revision()
    assert [r["prefix"] for r in listed_json(runner)] == [key[:17]]


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("sqlite:///:memory:", id="in-memory"),
        pytest.param("sqlite://", id="empty-sqlite"),
        pytest.param("mysql://localhost/petstore", id="unsupported-scheme"),
    ],
)
def test_db_upgrade_refuses_an_unusable_database_url(runner: CliRunner, url: str) -> None:
    result = runner.invoke(main, ["db", "upgrade"], env={"PETSTORE_DATABASE_URL": url})
    assert result.exit_code != 0, result.output
    assert result.stderr.startswith(("Error:", "Usage:")), result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", [["db", "upgrade"], ["keys", "list"]])
def test_unusable_database_url_is_a_configuration_error_naming_the_variable(
    runner: CliRunner, command: list[str]
) -> None:
    result = runner.invoke(main, command, env={"PETSTORE_DATABASE_URL": "sqlite:///:memory:"})
    assert result.exit_code == 2, result.output
    assert "PETSTORE_DATABASE_URL" in result.stderr


# openapi ----------------------------------------------------------------------------


def test_openapi_prints_the_document_with_the_configured_servers(runner: CliRunner) -> None:
    result = runner.invoke(
        main,
        ["openapi"],
        env={
            "PETSTORE_BASE_URL": "https://api.pets.example.org/v1",
            "PETSTORE_STAGING_BASE_URL": "https://staging.pets.example.org/v1",
        },
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert re.fullmatch(r"3\.1\.\d+", document["openapi"])
    assert document["info"]["version"] == "1.0.0"
    operation_ids = {
        operation["operationId"]
        for item in document["paths"].values()
        for operation in item.values()
        if isinstance(operation, dict) and "operationId" in operation
    }
    assert operation_ids == {op.operation_id for op in examples.operations()}
    urls = [server["url"] for server in document["servers"]]
    assert "https://api.pets.example.org/v1" in urls
    assert "https://staging.pets.example.org/v1" in urls
    assert all(url.endswith("/v1") for url in urls)


def test_openapi_servers_default_to_the_example_deployments(runner: CliRunner) -> None:
    result = runner.invoke(main, ["openapi"])
    assert result.exit_code == 0, result.output
    urls = [server["url"] for server in json.loads(result.stdout)["servers"]]
    assert "https://petstore.example.com/v1" in urls
    assert "https://staging.petstore.example.com/v1" in urls


def test_openapi_server_urls_drop_a_trailing_slash(runner: CliRunner) -> None:
    result = runner.invoke(main, ["openapi"], env={"PETSTORE_BASE_URL": "https://a.example/v1/"})
    assert result.exit_code == 0, result.output
    urls = [server["url"] for server in json.loads(result.stdout)["servers"]]
    assert "https://a.example/v1" in urls


def test_openapi_output_is_the_served_document(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, database_url: str
) -> None:
    monkeypatch.setenv("PETSTORE_BASE_URL", "https://api.pets.example.org/v1")
    monkeypatch.setenv("PETSTORE_DATABASE_URL", database_url)
    printed = runner.invoke(main, ["openapi"])
    assert printed.exit_code == 0, printed.output
    with TestClient(create_app(load_settings()), raise_server_exceptions=False) as test_client:
        served = test_client.get("/v1/openapi.json")
    assert served.status_code == 200
    assert json.loads(printed.stdout) == served.json()


# serve and settings -----------------------------------------------------------------


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({"PETSTORE_ENVIRONMENT": "production"}, id="production-default"),
        pytest.param({"PETSTORE_ENVIRONMENT": "staging"}, id="staging-default"),
        pytest.param(
            {"PETSTORE_ENVIRONMENT": "production", "PETSTORE_CURSOR_SECRET": "st" * 15 + "s"},
            id="production-short",
        ),
    ],
)
def test_serve_refuses_an_unsafe_cursor_secret_before_starting(
    tmp_path: Path, env: dict[str, str]
) -> None:
    url, path = fresh_database(tmp_path)
    runner = CliRunner(env={"PETSTORE_DATABASE_URL": url, **env})
    started = time.monotonic()
    result = runner.invoke(main, ["serve"])
    assert time.monotonic() - started < 10
    assert result.exit_code == 2, result.output
    assert "PETSTORE_CURSOR_SECRET" in result.stderr
    assert "Serving" not in result.output
    assert not KEY_RE.search(result.output)
    # Refused before anything ran: not even the database was created.
    assert not path.parent.exists()


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])  # noqa: S104
def test_serve_refuses_development_beyond_loopback_without_an_environment(
    tmp_path: Path, host: str
) -> None:
    """Issue 53 (N10): ``serve --host 0.0.0.0`` with nothing set served the public
    cursor secret, printed a key with every scope and left /metrics open."""
    url, path = fresh_database(tmp_path)
    runner = CliRunner(env={"PETSTORE_DATABASE_URL": url, "PETSTORE_HOST": host})
    result = runner.invoke(main, ["serve"])
    assert result.exit_code == 2, result.output
    assert f"refusing to serve development settings on {host}:8000" in result.stderr
    for exposure in ("public development one", 'key named "dev"', "/metrics answers anyone"):
        assert exposure in result.stderr
    assert "PETSTORE_ENVIRONMENT=development to serve them there on purpose" in result.stderr
    assert not KEY_RE.search(result.output)
    assert not path.parent.exists()


def test_development_chosen_beyond_loopback_is_served_with_a_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    chosen = Settings(host="0.0.0.0", environment=Environment.DEVELOPMENT)  # noqa: S104
    check_exposure(chosen, dev_key=False)
    warning = capsys.readouterr().err
    assert warning.startswith("WARNING: development settings served on 0.0.0.0:8000")
    assert "the cursor secret is the public development one" in warning
    assert "/metrics answers anyone" in warning
    assert 'key named "dev"' not in warning
    safe = Settings(
        host="0.0.0.0",  # noqa: S104
        environment=Environment.DEVELOPMENT,
        cursor_secret=SecretStr("a-private-cursor-secret-of-36-chars!"),
        metrics_enabled=False,
    )
    check_exposure(safe, dev_key=False)
    check_exposure(Settings(host="127.0.0.1"), dev_key=True)
    check_exposure(Settings(host="localhost"), dev_key=True)
    assert capsys.readouterr().err == ""


#: Invalid values, each with the variable the message must name.
INVALID_SETTINGS = [
    pytest.param("PETSTORE_PORT", "abc", id="port-abc"),
    pytest.param("PETSTORE_PORT", "0", id="port-0"),
    pytest.param("PETSTORE_PORT", "65536", id="port-65536"),
    pytest.param("PETSTORE_WORKERS", "0", id="workers-0"),
    pytest.param("PETSTORE_ENVIRONMENT", "prod", id="environment-prod"),
    pytest.param("PETSTORE_BASE_URL", "https://petstore.example.com/v2", id="base-url-v2"),
    pytest.param("PETSTORE_BASE_URL", "https://petstore.example.com", id="base-url-no-v1"),
    pytest.param("PETSTORE_BASE_URL", "not a url", id="base-url-garbage"),
    pytest.param("PETSTORE_STAGING_BASE_URL", "https://s.example.com/api", id="staging-no-v1"),
    pytest.param("PETSTORE_MAX_BODY_BYTES", "10", id="max-body-tiny"),
    pytest.param("PETSTORE_KEY_CACHE_SECONDS", "6", id="key-cache-over-5s"),
    pytest.param("PETSTORE_KEY_CACHE_SECONDS", "-1", id="key-cache-negative"),
    pytest.param("PETSTORE_DEPRECATION_DATE", "2026-01-01T00:00:00", id="naive-date"),
    pytest.param("PETSTORE_LOG_LEVEL", "LOUD", id="log-level"),
]


def test_serve_refuses_dev_key_in_production_before_starting(
    runner: CliRunner, database_url: str
) -> None:
    env = {
        "PETSTORE_ENVIRONMENT": "production",
        "PETSTORE_CURSOR_SECRET": "s3cr3t-" * 6,
        "PETSTORE_BASE_URL": "https://api.pets.example.org/v1",
        "PETSTORE_DATABASE_URL": database_url,
    }
    result = runner.invoke(main, ["serve", "--dev-key"], env=env)
    assert result.exit_code == 2, result.output
    assert "--dev-key is refused in production" in result.output
    assert "petstore_" not in result.output
    assert "Serving" not in result.output


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        pytest.param("PETSTORE_PORT", "abc", id="port-abc"),
        pytest.param("PETSTORE_ENVIRONMENT", "prod", id="environment-prod"),
        pytest.param("PETSTORE_BASE_URL", "https://petstore.example.com/v2", id="base-url-v2"),
    ],
)
def test_serve_refuses_invalid_settings_naming_the_variable(
    tmp_path: Path, variable: str, value: str
) -> None:
    url, path = fresh_database(tmp_path)
    runner = CliRunner(env={"PETSTORE_DATABASE_URL": url, variable: value})
    result = runner.invoke(main, ["serve"])
    assert result.exit_code == 2, result.output
    assert variable in result.stderr
    assert "Traceback" not in result.output
    assert not path.parent.exists()


@pytest.mark.parametrize(("variable", "value"), INVALID_SETTINGS)
@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["openapi"], id="openapi"),
        pytest.param(["keys", "list"], id="keys-list"),
        pytest.param(["keys", "create", "--name", "ci"], id="keys-create"),
        pytest.param(["db", "upgrade"], id="db-upgrade"),
    ],
)
def test_every_command_refuses_invalid_settings_naming_the_variable(
    runner: CliRunner, command: list[str], variable: str, value: str
) -> None:
    result = runner.invoke(main, command, env={variable: value})
    assert result.exit_code == 2, result.output
    assert f"{variable}:" in result.stderr
    assert "Traceback" not in result.output
    assert not KEY_RE.search(result.output)


def test_every_invalid_variable_is_named_at_once(runner: CliRunner) -> None:
    result = runner.invoke(
        main, ["openapi"], env={"PETSTORE_PORT": "abc", "PETSTORE_ENVIRONMENT": "prod"}
    )
    assert result.exit_code == 2, result.output
    assert "PETSTORE_PORT" in result.stderr
    assert "PETSTORE_ENVIRONMENT" in result.stderr


def test_version_prints_the_package_version() -> None:
    result = CliRunner().invoke(main, ["--version"], prog_name="petstore")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"petstore, version {__version__}\n"
    assert __version__ == "1.0.0"


def test_help_lists_the_commands() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0, result.output
    for command in ("serve", "keys", "db", "openapi", "pets"):
        assert re.search(rf"^\s+{command}\b", result.stdout, re.MULTILINE), command


def test_the_command_does_not_load_the_http_application() -> None:
    # The CLI goes through the rules and the store; the HTTP layer is granian's
    # workers' business ("petstore.server.app:app_from_environment"), not the command's.
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, petstore.cli.main; print(*sorted(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "petstore.cli.main" in loaded
    assert "petstore.server.app" not in loaded


@pytest.mark.parametrize(
    ("args", "scopes", "listed_scopes"),
    [
        (["--scope", "pets:read"], ["pets:read"], "read"),
        (["--scope", "pets:write"], ["pets:write"], "write"),
        (
            ["--scope", "pets:write", "--scope", "pets:read"],
            ["pets:read", "pets:write"],
            "read,write",
        ),
    ],
)
def test_keys_create_with_scopes_lists_them(
    runner: CliRunner, args: list[str], scopes: list[str], listed_scopes: str
) -> None:
    """D21: --scope is repeatable; the key holds exactly the scopes named."""
    create_key(runner, *args)
    (record,) = listed_json(runner)
    assert record["scopes"] == scopes
    header, row = table(runner.invoke(main, ["keys", "list"]))
    assert row[header.index("SCOPES")] == listed_scopes


def test_keys_create_with_a_rate_limit_lists_it(runner: CliRunner) -> None:
    """D22: the key's own limit, in PETSTORE_RATE_LIMIT's notation."""
    create_key(runner, "--rate-limit", "6000/minute")
    (record,) = listed_json(runner)
    assert record["rate_limit"] == "6000/minute"
    header, row = table(runner.invoke(main, ["keys", "list"]))
    assert row[header.index("RATE-LIMIT")] == "6000/minute"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scope", "pets:delete"], "pets:delete"),
        (["--rate-limit", "lots"], "a rate limit looks like 600/minute"),
        (["--rate-limit", "0/minute"], "at least 1"),
        # Issue 53 (N8): these were stored, enforced as something else, and listed as typed.
        (["--rate-limit", "10/0 minute"], "window is at least 1 minute, not '10/0 minute'"),
        (["--rate-limit", "10 per 0 seconds"], "window is at least 1 second"),
        (["--rate-limit", "5/minute;6/second"], "one rate limit only"),
        (["--rate-limit", "5/minute, 6/second"], "one rate limit only"),
        (["--rate-limit", "600/minute please"], "a rate limit looks like 600/minute"),
    ],
)
def test_keys_create_refuses_unknown_scopes_and_bad_rate_limits(
    runner: CliRunner, args: list[str], message: str
) -> None:
    result = runner.invoke(main, ["keys", "create", "--name", "ci", *args])
    assert result.exit_code == 2
    assert message in result.output
    assert listed_json(runner) == []
