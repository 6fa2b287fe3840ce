"""Settings: every ``PETSTORE_*`` environment variable, validated once at start.

``Settings()`` reads the environment; ``load_settings()`` turns a validation failure
into one :class:`SettingsError` naming each bad variable, for every ``petstore``
command that reads them and for each worker. Neither message ever holds a value as
given (pydantic's ``input_value`` is hidden): a value may be a secret.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import (
    AfterValidator,
    AnyHttpUrl,
    BeforeValidator,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from petstore.server import secret_files
from petstore.server.connection_urls import check_database_url, check_redis_url
from petstore.server.notations import UnsupportedDatabaseError as UnsupportedDatabaseError
from petstore.server.notations import (
    check_failure_limit,
    check_not_one_repeated_character,
    host_names,
)
from petstore.server.notations import check_rate_limit as check_rate_limit
from petstore.server.notations import is_postgres as is_postgres
from petstore.server.notations import sqlite_path as sqlite_path

#: The cursor secret used when none is configured. Fine on a laptop, refused in
#: staging and production (cursors signed with a public secret can be forged).
DEFAULT_CURSOR_SECRET = "petstore-development-cursor-secret-not-for-production"  # noqa: S105

#: Where the embedded SQLite database lives by default, relative to the working directory.
DEFAULT_DATABASE_URL = "sqlite:///data/petstore.db"

#: D19: the public URLs a deployment has until its operator sets its own: placeholders,
#: refused in the environment whose links they would carry (http/links.py).
PLACEHOLDER_BASE_URL = "https://petstore.example.com/v1"
PLACEHOLDER_STAGING_BASE_URL = "https://staging.petstore.example.com/v1"

#: D14: the Deprecation date of ``getPet``, 2026-01-01T00:00:00Z.
DEFAULT_DEPRECATION_DATE = datetime(2026, 1, 1, tzinfo=UTC)


class Environment(StrEnum):
    """Where an instance runs; staging and production refuse unsafe settings."""

    DEVELOPMENT = "development"
    STAGING = "staging"
    PRODUCTION = "production"


class SettingsError(ValueError):
    """Raised by :func:`load_settings` when the environment holds an invalid setting."""


class Settings(BaseSettings):
    """The service's configuration, one field per ``PETSTORE_<FIELD>`` variable, or
    per file ``petstore_<field>`` of the directory ``PETSTORE_SECRETS_DIR`` names
    (pydantic-settings' secrets files, as Docker and Kubernetes mount secrets; the
    file's surrounding whitespace, such as the newline ``echo`` writes, is dropped).
    A variable wins over a file.

    Raises ``pydantic.ValidationError`` (its text without the values given) on a bad
    value, a database or Redis URL that would fail when connecting
    (:mod:`.connection_urls`), on a secrets directory that does not exist, holds a
    setting's file that cannot be read, or through which others could choose a setting
    (:mod:`.secret_files`), on a drain not shorter than the shutdown timeout, on a
    cursor secret of one repeated character, on a default or short cursor secret
    outside development, and on the placeholder public URL in the environment whose
    links use it (production: ``base_url``; staging: ``staging_base_url``).
    """

    model_config = SettingsConfigDict(
        env_prefix="PETSTORE_", frozen=True, extra="ignore", hide_input_in_errors=True
    )

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=1, le=65535)] = 8000
    workers: Annotated[int, Field(ge=1, le=64)] = 1
    environment: Environment = Environment.DEVELOPMENT
    database_url: Annotated[str, AfterValidator(check_database_url)] = DEFAULT_DATABASE_URL
    #: PostgreSQL connections per worker process (SQLite ignores it).
    database_pool_size: Annotated[int, Field(ge=1, le=200)] = 10
    #: Apply pending migrations when ``serve`` starts. Always done for SQLite; on
    #: PostgreSQL off by default, so a rolling deploy migrates once, on purpose.
    migrate_on_start: bool = False
    #: D19: the production and staging base URLs, both ending in ``/v1``: the base of
    #: every absolute link in that environment (http/links.py), listed in the OpenAPI
    #: ``servers``. Their defaults are placeholders, refused where they would be used.
    base_url: AnyHttpUrl = AnyHttpUrl(PLACEHOLDER_BASE_URL)
    staging_base_url: AnyHttpUrl = AnyHttpUrl(PLACEHOLDER_STAGING_BASE_URL)
    #: D9: HMAC key for signed cursors; shared by every instance of one deployment.
    cursor_secret: Annotated[SecretStr, AfterValidator(check_not_one_repeated_character)] = (
        SecretStr(DEFAULT_CURSOR_SECRET)
    )
    #: Speed devices (docs/architecture.md); the service is correct with each off.
    #: Creates that arrive together share one commit; getPets one query.
    group_commit: bool = True
    read_grouping: bool = True
    #: Found animals and listPets pages that more animals follow are answered from
    #: memory for up to 5 s after their read (docs/operations/run.md).
    keep_answers: bool = True
    #: D17: largest accepted request body, in bytes.
    max_body_bytes: Annotated[int, Field(ge=1024, le=16 * 1024 * 1024)] = 64 * 1024
    #: D13: how long a verified API key is trusted without a database read, in seconds.
    key_cache_seconds: Annotated[float, Field(ge=0, le=5)] = 2.0
    #: D14: the ``Deprecation`` date announced on ``getPet``.
    deprecation_date: datetime = DEFAULT_DEPRECATION_DATE
    #: D15: requests per API key, in the notation of the ``limits`` library.
    rate_limit: Annotated[str, AfterValidator(check_rate_limit)] = "600/minute"
    rate_limit_enabled: bool = True
    #: Failed authentications (401) per client address before its requests are
    #: answered 429 for the rest of the window (rules/auth_failures.py); None: off.
    auth_failure_limit: Annotated[str | None, AfterValidator(check_failure_limit)] = "30/minute"
    #: D15: shared rate-limit counters for several instances, e.g. redis://127.0.0.1:6379/0.
    redis_url: Annotated[str | None, AfterValidator(check_redis_url)] = None
    #: D16: seconds between purges of idempotency records older than 24 hours.
    idempotency_purge_seconds: Annotated[int, Field(ge=1, le=86400)] = 600
    #: Take the scheme and client address from X-Forwarded-Proto / X-Forwarded-For
    #: (only behind a proxy that sets them): Link URLs then say https.
    trust_forwarded_headers: bool = False
    #: Host names whose requests get links under their own Host (comma-separated;
    #: lower-case, IPv6 without brackets); others get the environment's configured
    #: URL. None: the loopback names in development, none elsewhere
    #: (:mod:`petstore.server.http.links`).
    allowed_hosts: Annotated[tuple[str, ...] | None, NoDecode, BeforeValidator(host_names)] = None
    #: D17: seconds a client may take to send a request body once its headers arrived.
    body_timeout_seconds: Annotated[float, Field(gt=0, le=300)] = 10.0
    #: D17: seconds a client may take to send its request headers.
    header_timeout_seconds: Annotated[int, Field(ge=1, le=300)] = 10
    #: Serve HTTP/2 (cleartext, prior knowledge) beside HTTP/1.1 (cli/listening.py).
    http2: bool = False
    #: D25: seconds within which every request is answered (503 when the work is not done).
    request_timeout_seconds: Annotated[float, Field(gt=0, le=300)] = 10.0
    log_level: str = "INFO"
    #: ``json`` (one object per line) or ``text``; default: text in development only.
    log_format: Literal["json", "text"] | None = None
    #: Serve Prometheus metrics at ``/metrics`` (no key; keep it off the public LB).
    metrics_enabled: bool = True
    #: Serve them on this port of ``host`` instead of the API's (one worker only:
    #: each worker process has its own figures and would fight for the port).
    metrics_port: Annotated[int, Field(ge=1, le=65535)] | None = None
    #: On SIGTERM, ``serve`` exits within this many seconds, drain included; a worker
    #: still busy then is killed.
    shutdown_timeout_seconds: Annotated[int, Field(ge=1, le=3600)] = 30
    #: On SIGTERM, ``/readyz`` answers 503 for this many seconds while every other
    #: request is served, so that the load balancer takes the instance out first.
    shutdown_drain_seconds: Annotated[float, Field(ge=0)] = 5.0
    #: A directory of files named like the variables in lower case, each holding
    #: one setting (e.g. ``petstore_cursor_secret``); see the class docstring.
    secrets_dir: Annotated[
        Path | None,
        BeforeValidator(secret_files.existing_directory),
        AfterValidator(secret_files.check_owner_only),
    ] = None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments, then the environment, then the files of ``secrets_dir``
        (:func:`.secret_files.sources`)."""
        return secret_files.sources(settings_cls, init_settings, env_settings, dotenv_settings)

    @model_validator(mode="after")
    def _drain_within_timeout(self) -> Self:
        if self.shutdown_drain_seconds >= self.shutdown_timeout_seconds:
            raise ValueError(
                "PETSTORE_SHUTDOWN_DRAIN_SECONDS must be less than "
                "PETSTORE_SHUTDOWN_TIMEOUT_SECONDS (the drain is part of the timeout)"
            )
        return self

    @model_validator(mode="after")
    def _metrics_port_needs_one_worker(self) -> Self:
        if self.metrics_port is not None:
            if self.workers != 1:
                raise ValueError("PETSTORE_METRICS_PORT needs PETSTORE_WORKERS=1")
            if self.metrics_port == self.port:
                raise ValueError("PETSTORE_METRICS_PORT must differ from PETSTORE_PORT")
        return self

    @property
    def json_logs(self) -> bool:
        """Whether log lines are JSON (``log_format``, else outside development)."""
        if self.log_format is None:
            return self.environment is not Environment.DEVELOPMENT
        return self.log_format == "json"

    @field_validator("base_url", "staging_base_url")
    @classmethod
    def _ends_in_v1(cls, url: AnyHttpUrl) -> AnyHttpUrl:
        if not str(url).rstrip("/").endswith("/v1"):
            raise ValueError("must end with the version segment /v1 (D19)")
        return url

    @field_validator("deprecation_date")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("must carry a time zone, e.g. 2026-01-01T00:00:00Z")
        return value

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        if value.upper() not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise ValueError("must be DEBUG, INFO, WARNING or ERROR")
        return value.upper()

    @model_validator(mode="after")
    def _safe_outside_development(self) -> Self:
        """Outside development: a private cursor secret, and the environment's own
        public URL (http/links.py), not a placeholder. Raises ValueError with one line
        per problem, each naming its variable."""
        if self.environment is Environment.DEVELOPMENT:
            return self
        problems = []
        secret = self.cursor_secret.get_secret_value()
        if secret == DEFAULT_CURSOR_SECRET or len(secret) < 32:
            problems.append(
                f"PETSTORE_CURSOR_SECRET must be set to a private value of at least 32 "
                f"characters in {self.environment.value} (the default is public)"
            )
        if self.environment is Environment.PRODUCTION:
            variable, url, placeholder = "PETSTORE_BASE_URL", self.base_url, PLACEHOLDER_BASE_URL
        else:
            variable, url = "PETSTORE_STAGING_BASE_URL", self.staging_base_url
            placeholder = PLACEHOLDER_STAGING_BASE_URL
        if str(url).rstrip("/") == placeholder:
            problems.append(
                f"{variable} must be set to this deployment's public URL (ending in /v1) in "
                f"{self.environment.value}: every Link header's URL starts with it, and "
                f"the default {placeholder} is a placeholder"
            )
        if problems:
            raise ValueError("\n".join(problems))
        return self

    @property
    def sqlite_path(self) -> Path | None:
        """The SQLite file named by ``database_url``, or None for another backend."""
        return sqlite_path(self.database_url)


def load_settings(**overrides: object) -> Settings:
    """Read the environment (plus ``overrides``) into Settings.

    Raises SettingsError with one line per problem, each naming its variable
    (``PETSTORE_PORT: Input should be ...``), never a value as given.
    """
    # A value that is not UTF-8 comes as a str with lone surrogates, which pydantic
    # cannot even hold (UnicodeEncodeError): refused here, by name.
    undecodable = [
        f"PETSTORE_{field.upper()}: is not UTF-8 text"
        for field in Settings.model_fields
        for name, value in os.environ.items()
        if name.upper() == f"PETSTORE_{field.upper()}" and not _is_text(value)
    ]
    if undecodable:
        raise SettingsError("\n".join(undecodable))
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise SettingsError("\n".join(map(_problem, exc.errors()))) from None


def _problem(error: ErrorDetails) -> str:
    """One validation error as ``PETSTORE_<FIELD>: reason`` (a ValueError's own
    message without pydantic's ``Value error,``); a check of several settings says
    their names itself."""
    cause = error.get("ctx", {}).get("error")
    reason = str(cause) if error["type"] == "value_error" and cause is not None else error["msg"]
    if not error["loc"]:
        return reason
    return f"PETSTORE_{str(error['loc'][0]).upper()}: {reason}"


def _is_text(value: str) -> bool:
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True
