"""Settings from ``PETSTORE_*`` variables, validated once (D13, D17, D19), and the
database URL rules of ``petstore.server.store.migrate``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from petstore.cli.main import main
from petstore.server import config, connection_urls
from petstore.server.config import (
    DEFAULT_CURSOR_SECRET,
    Environment,
    Settings,
    SettingsError,
    load_settings,
)
from petstore.server.settings_checks import tls_problem
from petstore.server.store import migrate
from testbed.certificates import Certificates

PRIVATE_SECRET = "a-private-cursor-secret-of-36-chars!"
#: A deployment's own public URLs (http/links.py): staging and production refuse
#: the placeholders.
PUBLIC_URLS = {
    "PETSTORE_BASE_URL": "https://api.pets.example.org/v1",
    "PETSTORE_STAGING_BASE_URL": "https://staging.pets.example.org/v1",
}


def deploy_as(monkeypatch: pytest.MonkeyPatch, environment: str) -> None:
    """``PETSTORE_ENVIRONMENT=environment``, with the deployment's public URLs set."""
    monkeypatch.setenv("PETSTORE_ENVIRONMENT", environment)
    for variable, url in PUBLIC_URLS.items():
        monkeypatch.setenv(variable, url)


# Defaults ---------------------------------------------------------------------------


def test_defaults_without_any_variable() -> None:
    settings = load_settings()
    assert settings.host == "127.0.0.1"
    assert settings.port == 8000
    assert settings.workers == 1
    assert settings.database_url == "sqlite:///data/petstore.db"
    assert settings.max_body_bytes == 65536
    assert settings.environment is Environment.DEVELOPMENT
    assert settings.cursor_secret.get_secret_value() == DEFAULT_CURSOR_SECRET
    assert str(settings.base_url).rstrip("/") == "https://petstore.example.com/v1"
    assert str(settings.staging_base_url).rstrip("/") == "https://staging.petstore.example.com/v1"
    assert settings.deprecation_date == datetime(2026, 1, 1, tzinfo=UTC)
    assert settings.log_level == "INFO"
    assert settings.shutdown_timeout_seconds == 30
    assert settings.shutdown_drain_seconds == 5
    assert settings.secrets_dir is None


def test_default_key_cache_lets_a_revocation_bite_within_5_seconds() -> None:
    """D13: a revocation takes effect on every instance within 5 seconds."""
    assert 0 <= load_settings().key_cache_seconds <= 5


def test_default_database_is_a_relative_sqlite_file() -> None:
    assert load_settings().sqlite_path == Path("data/petstore.db")


# Reading the environment ------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "field", "expected"),
    [
        ("PETSTORE_HOST", "0.0.0.0", "host", "0.0.0.0"),  # noqa: S104
        ("PETSTORE_PORT", "9000", "port", 9000),
        ("PETSTORE_PORT", "1", "port", 1),
        ("PETSTORE_PORT", "65535", "port", 65535),
        ("PETSTORE_WORKERS", "4", "workers", 4),
        ("PETSTORE_ENVIRONMENT", "staging", "environment", Environment.STAGING),
        ("PETSTORE_DATABASE_URL", "sqlite:////srv/p.db", "database_url", "sqlite:////srv/p.db"),
        ("PETSTORE_MAX_BODY_BYTES", "1024", "max_body_bytes", 1024),
        ("PETSTORE_KEY_CACHE_SECONDS", "0", "key_cache_seconds", 0),
        ("PETSTORE_KEY_CACHE_SECONDS", "5", "key_cache_seconds", 5),
        ("PETSTORE_KEY_CACHE_SECONDS", "0.5", "key_cache_seconds", 0.5),
        ("PETSTORE_LOG_LEVEL", "debug", "log_level", "DEBUG"),
        ("PETSTORE_SHUTDOWN_TIMEOUT_SECONDS", "6", "shutdown_timeout_seconds", 6),
        ("PETSTORE_SHUTDOWN_TIMEOUT_SECONDS", "3600", "shutdown_timeout_seconds", 3600),
        ("PETSTORE_SHUTDOWN_DRAIN_SECONDS", "0", "shutdown_drain_seconds", 0),
        ("PETSTORE_SHUTDOWN_DRAIN_SECONDS", "2.5", "shutdown_drain_seconds", 2.5),
        ("PETSTORE_SHUTDOWN_DRAIN_SECONDS", "29.9", "shutdown_drain_seconds", 29.9),
    ],
)
def test_each_variable_is_read(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, field: str, expected: object
) -> None:
    if variable == "PETSTORE_ENVIRONMENT":
        deploy_as(monkeypatch, value)
        monkeypatch.setenv("PETSTORE_CURSOR_SECRET", PRIVATE_SECRET)
    monkeypatch.setenv(variable, value)
    assert getattr(load_settings(), field) == expected


@pytest.mark.parametrize(
    "url", ["https://api.pets.example.org/v1", "https://api.pets.example.org/v1/"]
)
def test_base_urls_ending_in_v1_are_accepted(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("PETSTORE_BASE_URL", url)
    monkeypatch.setenv("PETSTORE_STAGING_BASE_URL", url.replace("api.", "staging."))
    settings = load_settings()
    assert str(settings.base_url).rstrip("/") == "https://api.pets.example.org/v1"
    assert str(settings.staging_base_url).rstrip("/") == "https://staging.pets.example.org/v1"


def test_overrides_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PETSTORE_PORT", "9000")
    assert load_settings(port=9100).port == 9100


# Invalid values ---------------------------------------------------------------------

INVALID = [
    pytest.param("PETSTORE_PORT", "abc", id="port-abc"),
    pytest.param("PETSTORE_PORT", "0", id="port-0"),
    pytest.param("PETSTORE_PORT", "65536", id="port-65536"),
    pytest.param("PETSTORE_PORT", "80.5", id="port-fraction"),
    pytest.param("PETSTORE_WORKERS", "0", id="workers-0"),
    pytest.param("PETSTORE_WORKERS", "65", id="workers-65"),
    pytest.param("PETSTORE_ENVIRONMENT", "prod", id="environment-prod"),
    pytest.param("PETSTORE_ENVIRONMENT", "", id="environment-empty"),
    pytest.param("PETSTORE_BASE_URL", "https://petstore.example.com/v2", id="base-url-v2"),
    pytest.param("PETSTORE_BASE_URL", "https://petstore.example.com", id="base-url-bare"),
    pytest.param("PETSTORE_BASE_URL", "https://petstore.example.com/v1/pets", id="base-url-deeper"),
    pytest.param("PETSTORE_BASE_URL", "ftp://petstore.example.com/v1", id="base-url-ftp"),
    pytest.param("PETSTORE_BASE_URL", "petstore", id="base-url-garbage"),
    pytest.param("PETSTORE_STAGING_BASE_URL", "https://s.example.com/v10", id="staging-v10"),
    pytest.param("PETSTORE_MAX_BODY_BYTES", "1023", id="max-body-under-1KiB"),
    pytest.param("PETSTORE_MAX_BODY_BYTES", str(16 * 1024 * 1024 + 1), id="max-body-over-16MiB"),
    pytest.param("PETSTORE_KEY_CACHE_SECONDS", "5.01", id="key-cache-over-5s"),
    pytest.param("PETSTORE_KEY_CACHE_SECONDS", "-0.1", id="key-cache-negative"),
    pytest.param("PETSTORE_DEPRECATION_DATE", "2026-01-01T00:00:00", id="deprecation-naive"),
    pytest.param("PETSTORE_DEPRECATION_DATE", "soon", id="deprecation-garbage"),
    pytest.param("PETSTORE_HEADER_TIMEOUT_SECONDS", "0", id="header-timeout-0"),
    pytest.param("PETSTORE_LOG_LEVEL", "LOUD", id="log-level"),
    pytest.param("PETSTORE_SHUTDOWN_TIMEOUT_SECONDS", "soon", id="shutdown-timeout-word"),
    pytest.param("PETSTORE_SHUTDOWN_TIMEOUT_SECONDS", "0", id="shutdown-timeout-0"),
    pytest.param("PETSTORE_SHUTDOWN_TIMEOUT_SECONDS", "3601", id="shutdown-timeout-over-1h"),
    pytest.param("PETSTORE_SHUTDOWN_TIMEOUT_SECONDS", "2.5", id="shutdown-timeout-fraction"),
    pytest.param("PETSTORE_SHUTDOWN_DRAIN_SECONDS", "a while", id="shutdown-drain-word"),
    pytest.param("PETSTORE_SHUTDOWN_DRAIN_SECONDS", "-1", id="shutdown-drain-negative"),
    pytest.param("PETSTORE_SHUTDOWN_DRAIN_SECONDS", "nan", id="shutdown-drain-nan"),
    pytest.param("PETSTORE_SECRETS_DIR", "/nonexistent/petstore-secrets", id="secrets-dir-missing"),
    pytest.param("PETSTORE_REQUEST_TIMEOUT_SECONDS", "0", id="request-timeout-0"),
    pytest.param("PETSTORE_REQUEST_TIMEOUT_SECONDS", "-1", id="request-timeout-negative"),
    pytest.param("PETSTORE_REQUEST_TIMEOUT_SECONDS", "300.5", id="request-timeout-over-5min"),
    pytest.param("PETSTORE_REQUEST_TIMEOUT_SECONDS", "nan", id="request-timeout-nan"),
    pytest.param("PETSTORE_REQUEST_TIMEOUT_SECONDS", "soon", id="request-timeout-word"),
    pytest.param("PETSTORE_RATE_LIMIT", "5/minute;6/second", id="rate-limit-two"),
    pytest.param("PETSTORE_RATE_LIMIT", "10/0 minute", id="rate-limit-window-0"),
    pytest.param("PETSTORE_AUTH_FAILURE_LIMIT", "30 per 0 minutes", id="failure-limit-window-0"),
]


def test_the_request_timeout_is_10_seconds_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """D25."""
    assert load_settings().request_timeout_seconds == 10
    monkeypatch.setenv("PETSTORE_REQUEST_TIMEOUT_SECONDS", "2.5")
    assert load_settings().request_timeout_seconds == 2.5


@pytest.mark.parametrize(("variable", "value"), INVALID)
def test_invalid_variable_raises_settings_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError, match=f"{variable}:") as raised:
        load_settings()
    assert isinstance(raised.value, ValueError)
    assert "Traceback" not in str(raised.value)


def test_settings_error_names_every_invalid_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PETSTORE_PORT", "abc")
    monkeypatch.setenv("PETSTORE_ENVIRONMENT", "prod")
    monkeypatch.setenv("PETSTORE_LOG_LEVEL", "LOUD")
    with pytest.raises(SettingsError) as raised:
        load_settings()
    message = str(raised.value)
    for variable in ("PETSTORE_PORT", "PETSTORE_ENVIRONMENT", "PETSTORE_LOG_LEVEL"):
        assert variable in message


def test_settings_error_never_shows_the_cursor_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "short-but-private"
    monkeypatch.setenv("PETSTORE_ENVIRONMENT", "production")
    monkeypatch.setenv("PETSTORE_CURSOR_SECRET", secret)
    with pytest.raises(SettingsError) as raised:
        load_settings()
    assert "PETSTORE_CURSOR_SECRET" in str(raised.value)
    assert secret not in str(raised.value)


# Cursor secret outside development --------------------------------------------------


@pytest.mark.parametrize("environment", ["staging", "production"])
@pytest.mark.parametrize(
    "secret",
    [
        pytest.param(None, id="default"),
        pytest.param(DEFAULT_CURSOR_SECRET, id="default-spelled-out"),
        pytest.param("st" * 15 + "s", id="31-chars"),
        pytest.param("", id="empty"),
    ],
)
def test_staging_and_production_refuse_a_default_or_short_cursor_secret(
    monkeypatch: pytest.MonkeyPatch, environment: str, secret: str | None
) -> None:
    monkeypatch.setenv("PETSTORE_ENVIRONMENT", environment)
    if secret is not None:
        monkeypatch.setenv("PETSTORE_CURSOR_SECRET", secret)
    with pytest.raises(SettingsError, match="PETSTORE_CURSOR_SECRET"):
        load_settings()


@pytest.mark.parametrize("environment", ["staging", "production"])
@pytest.mark.parametrize("secret", ["st" * 16, "a-long-private-random-value-" * 3])
def test_staging_and_production_accept_a_private_secret_of_32_or_more_characters(
    monkeypatch: pytest.MonkeyPatch, environment: str, secret: str
) -> None:
    deploy_as(monkeypatch, environment)
    monkeypatch.setenv("PETSTORE_CURSOR_SECRET", secret)
    settings = load_settings()
    assert settings.environment == environment
    assert settings.cursor_secret.get_secret_value() == secret


@pytest.mark.parametrize("secret", [None, "short"])
def test_development_accepts_the_default_or_a_short_cursor_secret(
    monkeypatch: pytest.MonkeyPatch, secret: str | None
) -> None:
    monkeypatch.setenv("PETSTORE_ENVIRONMENT", "development")
    if secret is not None:
        monkeypatch.setenv("PETSTORE_CURSOR_SECRET", secret)
    settings = load_settings()
    assert settings.environment is Environment.DEVELOPMENT
    assert settings.cursor_secret.get_secret_value() == (secret or DEFAULT_CURSOR_SECRET)


def test_cursor_secret_is_hidden_in_the_settings_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PETSTORE_CURSOR_SECRET", PRIVATE_SECRET)
    assert PRIVATE_SECRET not in repr(load_settings())


def test_settings_constructor_refuses_production_with_the_default_secret() -> None:
    with pytest.raises(ValueError, match="PETSTORE_CURSOR_SECRET"):
        Settings(environment=Environment.PRODUCTION)


# Shutdown ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("drain", "timeout"), [("30", None), ("5", "5"), ("10", "3"), ("inf", "3600")]
)
def test_a_drain_not_shorter_than_the_shutdown_timeout_is_refused_naming_both(
    monkeypatch: pytest.MonkeyPatch, drain: str, timeout: str | None
) -> None:
    monkeypatch.setenv("PETSTORE_SHUTDOWN_DRAIN_SECONDS", drain)
    if timeout is not None:
        monkeypatch.setenv("PETSTORE_SHUTDOWN_TIMEOUT_SECONDS", timeout)
    with pytest.raises(SettingsError) as raised:
        load_settings()
    message = str(raised.value)
    assert "PETSTORE_SHUTDOWN_DRAIN_SECONDS must be less than" in message
    assert "PETSTORE_SHUTDOWN_TIMEOUT_SECONDS" in message


def test_the_shortest_shutdown_is_1_second_with_a_shorter_drain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PETSTORE_SHUTDOWN_TIMEOUT_SECONDS", "1")
    monkeypatch.setenv("PETSTORE_SHUTDOWN_DRAIN_SECONDS", "0.5")
    settings = load_settings()
    assert (settings.shutdown_timeout_seconds, settings.shutdown_drain_seconds) == (1, 0.5)


# Settings from files (PETSTORE_SECRETS_DIR) ----------------------------------------


def test_a_setting_is_read_from_its_file_in_the_secrets_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "petstore_cursor_secret").write_text(PRIVATE_SECRET)
    database = "postgresql://u:pw@migrate.internal/petstore?sslmode=verify-full"
    (tmp_path / "petstore_database_url").write_text(database)
    (tmp_path / "petstore_redis_url").write_text("rediss://:pw@cache.internal:6379/0")
    monkeypatch.setenv("PETSTORE_SECRETS_DIR", str(tmp_path))
    deploy_as(monkeypatch, "production")
    settings = load_settings()
    assert settings.secrets_dir == tmp_path
    assert settings.cursor_secret.get_secret_value() == PRIVATE_SECRET
    assert settings.database_url == database
    assert settings.redis_url == "rediss://:pw@cache.internal:6379/0"


def test_a_secret_file_written_by_echo_loses_its_trailing_newline(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # What `echo "$SECRET" > petstore_cursor_secret` writes.
    subprocess.run(
        ["sh", "-c", f'echo "{PRIVATE_SECRET}" > petstore_cursor_secret'], cwd=tmp_path, check=True
    )
    assert (tmp_path / "petstore_cursor_secret").read_bytes() == PRIVATE_SECRET.encode() + b"\n"
    monkeypatch.setenv("PETSTORE_SECRETS_DIR", str(tmp_path))
    assert load_settings().cursor_secret.get_secret_value() == PRIVATE_SECRET


def test_the_environment_wins_over_a_secret_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "petstore_cursor_secret").write_text("from-the-file-" + PRIVATE_SECRET)
    (tmp_path / "petstore_port").write_text("9001\n")
    monkeypatch.setenv("PETSTORE_SECRETS_DIR", str(tmp_path))
    monkeypatch.setenv("PETSTORE_CURSOR_SECRET", PRIVATE_SECRET)
    settings = load_settings()
    assert settings.cursor_secret.get_secret_value() == PRIVATE_SECRET
    assert settings.port == 9001  # a file for a variable that is not set is still read


def test_a_bad_value_in_a_secret_file_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "petstore_port").write_text("eighty\n")
    monkeypatch.setenv("PETSTORE_SECRETS_DIR", str(tmp_path))
    with pytest.raises(SettingsError, match="PETSTORE_PORT:"):
        load_settings()


def test_a_missing_secrets_dir_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / "not-there"
    monkeypatch.setenv("PETSTORE_SECRETS_DIR", str(missing))
    with pytest.raises(SettingsError, match="PETSTORE_SECRETS_DIR: ") as raised:
        load_settings()
    assert f"no such directory: {missing}" in str(raised.value)


def test_a_secrets_dir_that_is_a_file_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "secrets").write_text("")
    monkeypatch.setenv("PETSTORE_SECRETS_DIR", str(tmp_path / "secrets"))
    with pytest.raises(SettingsError, match=r"PETSTORE_SECRETS_DIR: .*no such directory"):
        load_settings()


def test_a_missing_secrets_dir_makes_the_cli_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["openapi"], env={"PETSTORE_SECRETS_DIR": str(tmp_path / "not-there")}
    )
    assert result.exit_code == 2, result.output
    assert "PETSTORE_SECRETS_DIR" in result.output
    assert "Traceback" not in result.output


# Public URLs outside development (issue 60, P7) ------------------------------------


@pytest.mark.parametrize(
    ("environment", "variable", "placeholder"),
    [
        ("production", "PETSTORE_BASE_URL", config.PLACEHOLDER_BASE_URL),
        ("staging", "PETSTORE_STAGING_BASE_URL", config.PLACEHOLDER_STAGING_BASE_URL),
    ],
)
@pytest.mark.parametrize("given", [None, "as-is", "with-slash"])
def test_staging_and_production_refuse_their_public_url_unset_or_the_placeholder(
    monkeypatch: pytest.MonkeyPatch,
    environment: str,
    variable: str,
    placeholder: str,
    given: str | None,
) -> None:
    """Every rel="next" and rel="deprecation" of that environment points under it."""
    monkeypatch.setenv("PETSTORE_ENVIRONMENT", environment)
    monkeypatch.setenv("PETSTORE_CURSOR_SECRET", PRIVATE_SECRET)
    if given is not None:
        monkeypatch.setenv(variable, placeholder + ("/" if given == "with-slash" else ""))
    with pytest.raises(SettingsError, match=f"^{variable} must be set") as raised:
        load_settings()
    assert "Link header" in str(raised.value)
    monkeypatch.setenv(variable, "https://pets.example.org/api/v1")
    assert load_settings().environment == environment


def test_production_needs_only_its_own_public_url(monkeypatch: pytest.MonkeyPatch) -> None:
    """The other environment's URL is only listed in the OpenAPI servers."""
    monkeypatch.setenv("PETSTORE_CURSOR_SECRET", PRIVATE_SECRET)
    monkeypatch.setenv("PETSTORE_ENVIRONMENT", "production")
    monkeypatch.setenv("PETSTORE_BASE_URL", "https://pets.example.org/v1")
    assert load_settings().staging_base_url == config.Settings().staging_base_url
    monkeypatch.setenv("PETSTORE_ENVIRONMENT", "staging")
    monkeypatch.setenv("PETSTORE_STAGING_BASE_URL", "https://staging.pets.example.org/v1")
    monkeypatch.delenv("PETSTORE_BASE_URL")
    assert str(load_settings().base_url).rstrip("/") == config.PLACEHOLDER_BASE_URL


def test_development_keeps_the_placeholders() -> None:
    assert str(load_settings().base_url).rstrip("/") == config.PLACEHOLDER_BASE_URL


def test_production_names_the_cursor_secret_and_the_url_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PETSTORE_ENVIRONMENT", "production")
    with pytest.raises(SettingsError) as raised:
        load_settings()
    lines = str(raised.value).splitlines()
    assert [line.split()[0] for line in lines] == ["PETSTORE_CURSOR_SECRET", "PETSTORE_BASE_URL"]


# Database and Redis URLs (issue 60, P4) ---------------------------------------------

PASSWORD = "hunter2-Pa55"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://petstore:p%40ss%3Aw%2Frd%25@db1:5432/petstore",
        "postgres://petstore@db1/petstore",
        "postgresql:///petstore",
        "postgresql://%2Fvar%2Frun%2Fpostgresql/petstore",
        "postgresql:///petstore?host=/var/run/postgresql",
        "postgresql://petstore@[::1]:5432/petstore",
        "postgresql://petstore_db-1.internal.:5432/petstore",
        "postgresql://petstore:pw@db1:5432,db2:5433,db3/petstore?target_session_attrs=read-write"
        "&connect_timeout=2&keepalives=1&keepalives_idle=5&keepalives_interval=1"
        "&keepalives_count=3&tcp_user_timeout=5000",
        "postgresql://db1,db2/petstore?port=5432,5433&hostaddr=10.0.0.1,10.0.0.2",
        "postgresql://db1/petstore?sslmode=verify-full&sslrootcert=/etc/ca.pem",
        "postgresql://db1/petstore?sslmode=require&sslpassword=x&load_balance_hosts=random",
    ],
)
def test_postgresql_urls_libpq_reads_are_accepted(url: str) -> None:
    assert load_settings(database_url=url).database_url == url


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        pytest.param(
            f"postgresql://petstore:{PASSWORD}%zz@db1/petstore",
            "libpq cannot read its user name or password",
            id="bad-escape",
        ),
        pytest.param(
            f"postgresql://petstore:{PASSWORD}@db1/petstore?foo=bar",
            'invalid URI query parameter: "foo"',
            id="unknown-param",
        ),
        pytest.param(
            f"postgresql://petstore:{PASSWORD}@[db1/petstore", "IPv6 host", id="broken-host"
        ),
        pytest.param(
            f"postgresql://petstore:{PASSWORD}@a..b/petstore", "a host is not", id="empty-label"
        ),
        pytest.param(
            f"postgresql://petstore:hunter2@{PASSWORD}@db1/petstore",
            "a host is not",
            id="at-in-password",
        ),
        pytest.param(
            f"postgresql://petstore:{PASSWORD}/x@db1/petstore",
            "a port is not",
            id="slash-in-password",
        ),
        pytest.param(
            f"postgresql://petstore:{PASSWORD}@db1:99999/petstore", "a port is not", id="port"
        ),
        pytest.param(
            f"postgresql://petstore:{PASSWORD}@db1,db2/petstore?port=1,2,3",
            "3 ports for 2 hosts",
            id="ports",
        ),
        pytest.param(
            f"postgresql://petstore:{PASSWORD}@db1/petstore?hostaddr=db1",
            "hostaddr must be IP addresses",
            id="hostaddr",
        ),
        pytest.param(
            f"postgresql://petstore:{PASSWORD}@db1/petstore?connect_timeout=2.5",
            "connect_timeout must be a whole number",
            id="connect-timeout",
        ),
        pytest.param(
            f"postgresql://petstore:{PASSWORD}@db1/petstore?sslmode=on",
            "sslmode must be one of",
            id="sslmode",
        ),
        pytest.param(
            f"postgresql://petstore@db1/petstore?password={PASSWORD}&sslmode=on",
            "sslmode must be one of",
            id="password-parameter",
        ),
        pytest.param(f"host=db1 password={PASSWORD}", "not a URL", id="key-value-string"),
    ],
)
def test_a_database_url_that_would_fail_on_connecting_is_refused_without_its_password(
    url: str, reason: str
) -> None:
    with pytest.raises(SettingsError, match=r"^PETSTORE_DATABASE_URL: ") as raised:
        load_settings(database_url=url)
    assert reason in str(raised.value)
    assert PASSWORD not in str(raised.value)
    with pytest.raises(ValidationError) as invalid:  # pydantic's own text too
        config.Settings(database_url=url)
    assert PASSWORD not in str(invalid.value)
    assert "input_value" not in str(invalid.value)  # which shows a long URL cut short


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:pw@db1/p", "postgresql://u:***@db1/p"),
        ("postgresql://u@db1/p", "postgresql://u@db1/p"),
        ("postgresql://db1/p", "postgresql://db1/p"),
        ("postgresql://u:p@ss/w@db1:5432/p", "postgresql://u:***@db1:5432/p"),
        (
            "postgresql://db1/p?user=u&password=pw&sslmode=require",
            "postgresql://db1/p?user=u&password=***&sslmode=require",
        ),
        ("postgresql://db1/p?sslpassword=pw", "postgresql://db1/p?sslpassword=***"),
        ("redis://:pw@cache:6379/0", "redis://:***@cache:6379/0"),
        ("host=db1 password=pw", "(not a URL)"),
    ],
)
def test_a_url_is_shown_without_its_password(url: str, shown: str) -> None:
    assert connection_urls.without_password(url) == shown


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0",
        "redis://:p%40ss@cache.internal:6379",
        "rediss://user:pw@[::1]:6380/2?ssl_cert_reqs=required&ssl_ca_certs=/etc/ca.pem",
        "redis://cache:6379/0?socket_timeout=0.5",
    ],
)
def test_redis_urls_redis_py_and_limits_read_are_accepted(url: str) -> None:
    assert load_settings(redis_url=url).redis_url == url


@pytest.mark.parametrize(
    "url",
    [
        f"redis://:{PASSWORD}@cache",
        f"redis://:{PASSWORD}@a..b:6379/0",
        f"redis://:{PASSWORD}@cache:6379/0?socket_timeout=soon",
        f"redis://:{PASSWORD}@cache:0/0",
    ],
)
def test_a_redis_url_that_would_fail_is_refused_without_its_password(url: str) -> None:
    with pytest.raises(SettingsError, match=r"^PETSTORE_REDIS_URL: ") as raised:
        load_settings(redis_url=url)
    assert PASSWORD not in str(raised.value)


# Database URLs ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///data/petstore.db", Path("data/petstore.db")),
        ("sqlite:////srv/petstore/petstore.db", Path("/srv/petstore/petstore.db")),
        (
            "sqlite:///petstore.db?timeout=5",
            Path("petstore.db"),
        ),
    ],
)
def test_sqlite_path_of_a_file_url(url: str, path: Path) -> None:
    assert config.sqlite_path(url) == path
    assert migrate.sqlalchemy_url(url) == f"sqlite:///{path}"


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("sqlite:///:memory:", id="memory"),
        pytest.param("sqlite:///:memory:?cache=shared", id="memory-with-query"),
        pytest.param("sqlite://", id="no-path"),
        pytest.param("sqlite:///", id="empty-path"),
        pytest.param("sqlite://:memory:", id="memory-two-slashes"),
        pytest.param("sqlite:", id="bare-scheme"),
    ],
)
def test_in_memory_or_pathless_sqlite_is_refused(url: str) -> None:
    with pytest.raises(config.UnsupportedDatabaseError):
        config.sqlite_path(url)
    with pytest.raises(config.UnsupportedDatabaseError):
        migrate.sqlalchemy_url(url)


def test_in_memory_sqlite_is_refused_with_a_reason() -> None:
    with pytest.raises(config.UnsupportedDatabaseError, match="in-memory"):
        config.sqlite_path("sqlite:///:memory:")


@pytest.mark.parametrize(
    "url",
    [
        "mysql://localhost/petstore",
        "mssql://localhost/petstore",
        "sqlite+aiosqlite:///data/petstore.db",
        "file:///data/petstore.db",
        "data/petstore.db",
    ],
)
def test_other_schemes_are_not_sqlite_and_are_unsupported(url: str) -> None:
    assert config.sqlite_path(url) is None
    with pytest.raises(config.UnsupportedDatabaseError, match="unsupported"):
        migrate.sqlalchemy_url(url)


def test_settings_sqlite_path_follows_the_database_url(tmp_path: Path) -> None:
    settings = load_settings(database_url=f"sqlite:///{tmp_path / 'p.db'}")
    assert settings.sqlite_path == tmp_path / "p.db"
    assert load_settings(database_url="postgresql://postgres@127.0.0.1/x").sqlite_path is None


def test_upgrade_refuses_an_in_memory_database_without_creating_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(config.UnsupportedDatabaseError):
        migrate.upgrade("sqlite:///:memory:")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("mode", [0o666, 0o620, 0o602, 0o664])
def test_a_secret_file_writable_by_group_or_others_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mode: int
) -> None:
    secret = tmp_path / "petstore_cursor_secret"
    secret.write_text(PRIVATE_SECRET)
    secret.chmod(mode)
    monkeypatch.setenv("PETSTORE_SECRETS_DIR", str(tmp_path))
    with pytest.raises(SettingsError, match="PETSTORE_SECRETS_DIR: ") as raised:
        load_settings()
    assert f"{secret} is writable by its group or others (mode {mode:o})" in str(raised.value)
    assert f"chmod go-w {secret}" in str(raised.value)
    assert PRIVATE_SECRET not in str(raised.value)


def test_a_secret_file_behind_a_symbolic_link_is_judged_by_its_target(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # As Kubernetes mounts a secret: the name is a link into a folder of its own.
    (tmp_path / "..data").mkdir()
    target = tmp_path / "..data" / "petstore_cursor_secret"
    target.write_text(PRIVATE_SECRET)
    (tmp_path / "petstore_cursor_secret").symlink_to(target)
    monkeypatch.setenv("PETSTORE_SECRETS_DIR", str(tmp_path))
    target.chmod(0o640)
    assert load_settings().cursor_secret.get_secret_value() == PRIVATE_SECRET
    target.chmod(0o646)
    with pytest.raises(SettingsError, match="writable by its group or others"):
        load_settings()


#: A uid no one on the machine runs as.
STRANGER = 54321
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")


def planted(secrets: Path) -> None:
    """What another user who can write ``secrets`` adds (issue 53, N3): settings the
    operator never wrote, readable by the service."""
    for name, value in (
        ("petstore_cursor_secret", PRIVATE_SECRET),
        ("petstore_trust_forwarded_headers", "true"),
        ("petstore_auth_failure_limit", "off"),
    ):
        (secrets / name).write_text(value)
        (secrets / name).chmod(0o644)


@pytest.mark.parametrize("environment", ["staging", "production"])
@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o770, 0o755 | 0o002])
def test_outside_development_a_secrets_dir_others_may_write_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, environment: str, mode: int
) -> None:
    """Issue 53 (N3): a directory of mode 777 was accepted with what others planted."""
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    planted(secrets)
    secrets.chmod(mode)
    monkeypatch.setenv("PETSTORE_SECRETS_DIR", str(secrets))
    deploy_as(monkeypatch, environment)
    with pytest.raises(SettingsError, match="PETSTORE_SECRETS_DIR: ") as raised:
        load_settings()
    assert f"{secrets} is writable by its group or others (mode {mode:o})" in str(raised.value)
    assert f"chmod go-w {secrets}" in str(raised.value)
    secrets.chmod(0o700)
    assert load_settings().trust_forwarded_headers is True  # the files themselves are fine


def test_in_development_only_the_setting_files_modes_are_judged(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A laptop's folder of settings is its user's business; its files still may not
    be writable by others."""
    planted(tmp_path)
    tmp_path.chmod(0o777)
    monkeypatch.setenv("PETSTORE_SECRETS_DIR", str(tmp_path))
    assert load_settings().auth_failure_limit is None


@as_root
@pytest.mark.parametrize("environment", ["staging", "production"])
def test_outside_development_a_setting_file_of_another_user_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, environment: str
) -> None:
    """Issue 53 (N3): a file owned by another user (mode 0644) was accepted."""
    planted(tmp_path)
    stranger = tmp_path / "petstore_trust_forwarded_headers"
    os.chown(stranger, STRANGER, STRANGER)
    monkeypatch.setenv("PETSTORE_SECRETS_DIR", str(tmp_path))
    deploy_as(monkeypatch, environment)
    with pytest.raises(SettingsError, match="PETSTORE_SECRETS_DIR: ") as raised:
        load_settings()
    assert f"{stranger} is owned by uid {STRANGER}, not by the service's user (uid 0" in str(
        raised.value
    )
    assert f"chown 0 {stranger}" in str(raised.value)
    os.chown(stranger, 0, 0)
    assert load_settings().trust_forwarded_headers is True
    os.chown(tmp_path, STRANGER, STRANGER)  # whoever owns the folder can chmod it
    with pytest.raises(SettingsError, match=f"{tmp_path} is owned by uid {STRANGER}"):
        load_settings()


@as_root
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
def test_a_secrets_dir_mounted_read_only_may_have_any_mode(tmp_path: Path) -> None:
    """As Kubernetes mounts a Secret (a read-only tmpfs, mode 1777): no one can write
    it, whatever its mode says."""
    mounted = tmp_path / "secrets"
    mounted.mkdir()
    script = (
        f"mount -t tmpfs -o size=1m tmpfs {mounted} && "
        f"printf %s {PRIVATE_SECRET} > {mounted}/petstore_cursor_secret && "
        f"chmod 1777 {mounted} && mount -o remount,ro {mounted} && "
        f'{sys.executable} -c "from petstore.server.config import load_settings; '
        f'print(load_settings().cursor_secret.get_secret_value())"'
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PETSTORE_")},
        "PETSTORE_SECRETS_DIR": str(mounted),
        "PETSTORE_ENVIRONMENT": "production",
        **PUBLIC_URLS,
    }
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, PRIVATE_SECRET), done.stderr


def test_files_of_the_secrets_dir_that_are_no_setting_are_left_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "README").write_text("not a setting")
    (tmp_path / "README").chmod(0o666)
    (tmp_path / "petstore_port").write_text("9002")
    (tmp_path / "petstore_port").chmod(0o600)
    monkeypatch.setenv("PETSTORE_SECRETS_DIR", str(tmp_path))
    assert load_settings().port == 9002


@pytest.mark.parametrize("environment", ["development", "staging", "production"])
@pytest.mark.parametrize("secret", ["x" * 32, "0" * 64, "é" * 40, "z"])
def test_a_cursor_secret_of_one_repeated_character_is_refused(
    monkeypatch: pytest.MonkeyPatch, environment: str, secret: str
) -> None:
    monkeypatch.setenv("PETSTORE_ENVIRONMENT", environment)
    monkeypatch.setenv("PETSTORE_CURSOR_SECRET", secret)
    with pytest.raises(SettingsError, match="PETSTORE_CURSOR_SECRET: ") as raised:
        load_settings()
    assert "not one character repeated" in str(raised.value)
    assert secret not in str(raised.value)


# Nothing between hosts in clear (issue 59) -------------------------------------------

REMOTE_DATABASE = "postgresql://petstore:pw@db1.internal:5432,db2.internal:5432/petstore"
VERIFIED = "?sslmode=verify-full&sslrootcert=/etc/petstore/tls/ca.crt"


def tls_files(folder: Path) -> tuple[Path, Path]:
    """A certificate of the deployment's CA for 127.0.0.1 and its key, made by the
    operator's script."""
    certificates = Certificates(folder)
    certificates.make("127.0.0.1")
    return certificates.certificate("127.0.0.1"), certificates.key("127.0.0.1")


def production(monkeypatch: pytest.MonkeyPatch, **settings: str) -> None:
    """Production's environment with a private secret and its own URL, and
    ``settings`` (``host="0.0.0.0"`` is ``PETSTORE_HOST``)."""
    monkeypatch.setenv("PETSTORE_ENVIRONMENT", "production")
    monkeypatch.setenv("PETSTORE_CURSOR_SECRET", PRIVATE_SECRET)
    monkeypatch.setenv("PETSTORE_BASE_URL", "https://pets.example.org/v1")
    for name, value in settings.items():
        monkeypatch.setenv(f"PETSTORE_{name.upper()}", value)


@pytest.mark.parametrize("environment", ["staging", "production"])
def test_staging_and_production_refuse_to_serve_beyond_loopback_without_tls(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, environment: str
) -> None:
    production(monkeypatch, environment=environment, host="10.0.1.5")
    monkeypatch.setenv("PETSTORE_STAGING_BASE_URL", "https://staging.example.org/v1")
    with pytest.raises(SettingsError, match=r"^PETSTORE_TLS_CERTIFICATE and PETSTORE_TLS_KEY"):
        load_settings()
    certificate, key = tls_files(tmp_path)
    monkeypatch.setenv("PETSTORE_TLS_CERTIFICATE", str(certificate))
    monkeypatch.setenv("PETSTORE_TLS_KEY", str(key))
    assert load_settings().tls_certificate == certificate


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_production_serves_plain_http_on_loopback(
    monkeypatch: pytest.MonkeyPatch, host: str
) -> None:
    """A sidecar or a proxy on the same machine: nothing crosses a network."""
    production(monkeypatch, host=host)
    assert load_settings().tls_certificate is None


@pytest.mark.parametrize(
    "url",
    [
        REMOTE_DATABASE,
        REMOTE_DATABASE + "?sslmode=require",
        REMOTE_DATABASE + "?sslmode=verify-ca&sslrootcert=/etc/petstore/tls/ca.crt",
        "postgresql://petstore:pw@10.0.1.5/petstore?sslmode=prefer",
        "postgresql://petstore:pw@127.0.0.1,db2.internal/petstore",
    ],
)
def test_production_refuses_a_database_url_that_does_not_verify_the_server(
    monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    production(monkeypatch, database_url=url)
    with pytest.raises(
        SettingsError, match=r"^PETSTORE_DATABASE_URL must have sslmode=verify-full"
    ):
        load_settings()


@pytest.mark.parametrize(
    "url",
    [
        REMOTE_DATABASE + VERIFIED,
        "postgresql://petstore:pw@127.0.0.1:5432/petstore",
        "postgresql://petstore:pw@localhost/petstore",
        "postgresql:///petstore?host=/var/run/postgresql",
        "sqlite:///data/petstore.db",
    ],
)
def test_production_takes_a_verified_database_url_or_one_that_stays_on_the_machine(
    monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    production(monkeypatch, database_url=url)
    assert load_settings().database_url == url


@pytest.mark.parametrize(
    ("url", "refused"),
    [
        ("redis://:pw@redis.internal:6379/0", True),
        ("rediss://:pw@redis.internal:6379/0?ssl_cert_reqs=none", True),
        ("rediss://:pw@redis.internal:6379/0?ssl_check_hostname=false", True),
        ("rediss://:pw@redis.internal:6379/0?ssl_ca_certs=/etc/petstore/tls/ca.crt", False),
        ("redis://:pw@127.0.0.1:6379/0", False),
    ],
)
def test_production_refuses_a_redis_url_without_verified_tls_beyond_loopback(
    monkeypatch: pytest.MonkeyPatch, url: str, refused: bool
) -> None:
    production(monkeypatch, redis_url=url)
    if refused:
        with pytest.raises(SettingsError, match=r"^PETSTORE_REDIS_URL must be rediss://"):
            load_settings()
    else:
        assert load_settings().redis_url == url


def test_development_sends_what_it_is_told_to(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PETSTORE_DATABASE_URL", REMOTE_DATABASE)
    monkeypatch.setenv("PETSTORE_REDIS_URL", "redis://:pw@redis.internal:6379/0")
    assert load_settings().database_url == REMOTE_DATABASE


def test_a_tls_certificate_without_its_key_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    certificate, key = tls_files(tmp_path)
    monkeypatch.setenv("PETSTORE_TLS_CERTIFICATE", str(certificate))
    with pytest.raises(SettingsError, match="go together: set both or neither"):
        load_settings()
    monkeypatch.setenv("PETSTORE_TLS_KEY", str(key))
    assert load_settings().tls_key == key


def test_serve_refuses_tls_files_it_cannot_serve_with_and_names_them(tmp_path: Path) -> None:
    """The files are serve's alone: another command (db upgrade, keys) needs none."""
    certificate, key = tls_files(tmp_path)
    assert tls_problem(certificate, key) is None
    wrong = tls_problem(certificate, tmp_path / "ca.key")  # the CA's key, not its own
    assert "its own private key" in str(wrong)
    assert "PRIVATE KEY" not in str(wrong)
    missing = tls_problem(certificate, tmp_path / "missing.key")
    assert "cannot be read: No such file" in str(missing)
