"""Settings: every ``PETSTORE_*`` environment variable, validated once at start.

``Settings()`` reads the environment; ``load_settings()`` turns a validation failure
into one :class:`SettingsError` naming each bad variable, for every ``petstore``
command and each worker. Neither shows a value as given: it may be a secret.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
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
from pydantic_settings import NoDecode, SettingsConfigDict

from petstore.server import secret_files
from petstore.server.connection_urls import check_database_url, check_redis_url
from petstore.server.environments import DEFAULT_CURSOR_SECRET as DEFAULT_CURSOR_SECRET
from petstore.server.environments import PLACEHOLDER_BASE_URL as PLACEHOLDER_BASE_URL
from petstore.server.environments import (
    PLACEHOLDER_STAGING_BASE_URL as PLACEHOLDER_STAGING_BASE_URL,
)
from petstore.server.environments import Environment as Environment
from petstore.server.environments import refusals
from petstore.server.notations import UnsupportedDatabaseError as UnsupportedDatabaseError
from petstore.server.notations import (
    check_failure_limit,
    check_log_level,
    check_not_one_repeated_character,
    check_time_zone,
    host_names,
)
from petstore.server.notations import check_rate_limit as check_rate_limit
from petstore.server.notations import is_postgres as is_postgres
from petstore.server.notations import sqlite_path as sqlite_path
from petstore.server.settings_checks import contradictions, not_text, problems_of

#: Where the embedded SQLite database lives by default, relative to the working directory.
DEFAULT_DATABASE_URL = "sqlite:///data/petstore.db"

#: D14: the Deprecation date of ``getPet``, 2026-01-01T00:00:00Z.
DEFAULT_DEPRECATION_DATE = datetime(2026, 1, 1, tzinfo=UTC)


class SettingsError(ValueError):
    """Raised by :func:`load_settings` when the environment holds an invalid setting."""


class Settings(secret_files.FileSettings):
    """The service's configuration, one field per ``PETSTORE_<FIELD>`` variable, or
    per file ``petstore_<field>`` of the directory ``PETSTORE_SECRETS_DIR`` names
    (pydantic-settings' secrets files, as Docker and Kubernetes mount secrets; the
    file's surrounding whitespace, such as the newline ``echo`` writes, is dropped).
    A variable wins over a file.

    Raises ``pydantic.ValidationError`` (its text without the values given) on a bad
    value, a database or Redis URL that would fail when connecting
    (:mod:`.connection_urls`), a secrets directory that does not exist, holds a file
    that cannot be read as a setting or that others could write (:mod:`.secret_files`),
    settings that contradict each other or TLS files that cannot serve
    (:mod:`.settings_checks`), a cursor secret of one repeated character, and what
    staging and production refuse (:mod:`.environments`).
    """

    model_config = SettingsConfigDict(
        env_prefix="PETSTORE_", frozen=True, extra="ignore", hide_input_in_errors=True
    )

    #: The address ``serve`` listens on; beyond loopback (``0.0.0.0``) only with TLS in
    #: staging and production.
    host: str = "127.0.0.1"
    #: The port ``serve`` listens on (HTTP, or HTTPS with the TLS settings).
    port: Annotated[int, Field(ge=1, le=65535)] = 8000
    #: Worker processes of ``serve``, each with its own event loop and pool.
    workers: Annotated[int, Field(ge=1, le=64)] = 1
    #: ``development``, ``staging`` or ``production`` (D19): what is refused and logged.
    environment: Environment = Environment.DEVELOPMENT
    #: ``sqlite:///path`` (the embedded store) or a PostgreSQL URL (libpq's form).
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
    #: D19: staging's base URL, the base of every absolute link in staging.
    staging_base_url: AnyHttpUrl = AnyHttpUrl(PLACEHOLDER_STAGING_BASE_URL)
    #: D9: HMAC key for signed cursors; shared by every instance of one deployment.
    cursor_secret: Annotated[SecretStr, AfterValidator(check_not_one_repeated_character)] = (
        SecretStr(DEFAULT_CURSOR_SECRET)
    )
    #: Speed devices (docs/architecture.md); the service is correct with each off.
    #: Creates that arrive together share one commit; getPets one query.
    group_commit: bool = True
    #: getPets that arrive together are read in one query.
    read_grouping: bool = True
    #: Found animals and listPets pages that more animals follow are answered from
    #: memory for up to 5 s after their read (docs/operations/run.md).
    keep_answers: bool = True
    #: D17: largest accepted request body, in bytes.
    max_body_bytes: Annotated[int, Field(ge=1024, le=16 * 1024 * 1024)] = 64 * 1024
    #: D13: how long a verified API key is trusted without a database read, in seconds.
    key_cache_seconds: Annotated[float, Field(ge=0, le=5)] = 2.0
    #: D14: the ``Deprecation`` date announced on ``getPet``.
    deprecation_date: Annotated[datetime, AfterValidator(check_time_zone)] = (
        DEFAULT_DEPRECATION_DATE
    )
    #: D15: requests per API key, in the notation of the ``limits`` library.
    rate_limit: Annotated[str, AfterValidator(check_rate_limit)] = "600/minute"
    #: D15: off, no request is counted or refused for its rate.
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
    #: Serve HTTP/2 (prior knowledge, or ALPN over TLS) beside HTTP/1.1 (cli/listening.py).
    http2: bool = False
    #: The event loop each worker runs: ``uvloop`` (libuv's, the speed device of
    #: docs/performance.md) or ``asyncio`` (the standard library's).
    event_loop: Literal["uvloop", "asyncio"] = "uvloop"
    #: TLS on ``host``:``port`` (docs/operations/tls.md): a PEM certificate, its chain
    #: after it, and its private key; both or neither. Without them ``serve`` speaks
    #: plain HTTP, which staging and production refuse beyond loopback.
    tls_certificate: Path | None = None
    #: The private key of ``tls_certificate`` (PEM, not encrypted).
    tls_key: Path | None = None
    #: D25: seconds within which every request is answered (503 when the work is not done).
    request_timeout_seconds: Annotated[float, Field(gt=0, le=300)] = 10.0
    #: ``DEBUG``, ``INFO``, ``WARNING``, ``ERROR`` or ``CRITICAL``.
    log_level: Annotated[str, AfterValidator(check_log_level)] = "INFO"
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

    @model_validator(mode="after")
    def _consistent_and_safe(self) -> Self:
        problems = contradictions(
            drain_seconds=self.shutdown_drain_seconds,
            timeout_seconds=self.shutdown_timeout_seconds,
            metrics_port=self.metrics_port, workers=self.workers, port=self.port,
            tls_certificate=self.tls_certificate, tls_key=self.tls_key,
        ) + refusals(
            self.environment, cursor_secret=self.cursor_secret.get_secret_value(),
            base_url=str(self.base_url), staging_base_url=str(self.staging_base_url),
            host=self.host, tls=self.tls_certificate is not None,
            database_url=self.database_url, redis_url=self.redis_url,
        )  # fmt: skip
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
    names = {f"PETSTORE_{field.upper()}" for field in Settings.model_fields}
    if undecodable := not_text(os.environ, names):
        raise SettingsError("\n".join(undecodable))
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise SettingsError("\n".join(problems_of(exc))) from None
