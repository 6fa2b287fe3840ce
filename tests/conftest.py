"""Fixtures: a fresh app on a temporary SQLite file per test, a client that checks
every response against the OpenAPI document, API keys, a clock, the CLI runner."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx2
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from petstore import db, docs, keys
from petstore.app import create_app
from petstore.config import Settings
from petstore.store import open_store
from tests.conformance import Conformance

#: A fixed "now" before getPet's sunset, so tests do not depend on the wall clock.
NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


class FakeClock:
    """An injectable clock (D14): call it for now, move it with ``advance``/``set``."""

    def __init__(self, now: datetime = NOW) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)

    def set(self, now: datetime) -> None:
        self.now = now


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No PETSTORE_* variable of the developer's shell leaks into a test."""
    for name in list(os.environ):
        if name.startswith("PETSTORE_"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def migrated_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated once per run; each test gets a copy."""
    path = tmp_path_factory.mktemp("template") / "petstore.db"
    db.upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture
def database_url(tmp_path: Path, migrated_template: Path) -> str:
    """A fresh, migrated SQLite database for this test."""
    path = tmp_path / "petstore.db"
    shutil.copyfile(migrated_template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def conformance(settings: Settings) -> Conformance:
    return Conformance(docs.openapi_document(settings))


@pytest.fixture
def client(settings: Settings, clock: FakeClock, conformance: Conformance) -> Iterator[TestClient]:
    """The real app over ASGI; every response is checked against the OpenAPI document."""
    app = create_app(settings, clock=clock)
    with TestClient(app, raise_server_exceptions=False) as test_client:
        test_client.event_hooks["response"] = [conformance.check]
        yield test_client


@pytest.fixture
def make_key(database_url: str, clock: FakeClock) -> Callable[..., str]:
    """Create an API key in the test database the way the CLI does; returns the key."""

    def make(name: str = "test", expires_at: datetime | None = None) -> str:
        async def create() -> str:
            store = await open_store(database_url)
            try:
                _, key = await keys.create(store, name=name, now=clock(), expires_at=expires_at)
            finally:
                await store.close()
            return key

        return asyncio.run(create())

    return make


@pytest.fixture
def api_key(make_key: Callable[..., str]) -> str:
    return make_key()


@pytest.fixture
def auth(api_key: str) -> dict[str, str]:
    """Headers that authenticate as a valid key."""
    return {"Authorization": f"Bearer {api_key}"}


@pytest.fixture
def runner(database_url: str) -> CliRunner:
    """The CLI runner, pointed at this test's database."""
    return CliRunner(env={"PETSTORE_DATABASE_URL": database_url})


class LiveServer:
    """A real ``petstore serve`` process on a free loopback port."""

    def __init__(self, root: Path, *, env: dict[str, str] | None = None) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.database_url = f"sqlite:///{root / 'data' / 'petstore.db'}"
        self.log = root / "serve.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PETSTORE_")}
        self.env.update(
            {"PETSTORE_DATABASE_URL": self.database_url, "PETSTORE_PORT": str(self.port)}
        )
        self.env.update(env or {})
        self.root = root
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *args: str) -> None:
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "petstore", "serve", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.root,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.output()
            try:
                if httpx2.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx2.TransportError:
                time.sleep(0.1)
        raise AssertionError(f"server did not start:\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    @property
    def dev_key(self) -> str:
        match = re.search(r"petstore_[A-Za-z0-9_-]{43}", self.output())
        assert match, self.output()
        return match.group(0)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One real server per test module, on its own SQLite file, with its dev key."""
    server = LiveServer(tmp_path_factory.mktemp("live"))
    server.start()
    yield server
    server.stop()


#: The PostgreSQL server the tests create their databases on (trust auth, loopback).
POSTGRES_ADMIN_URL = os.environ.get(
    "PETSTORE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


@contextmanager
def postgres_database() -> Iterator[str]:
    """A freshly created, empty PostgreSQL database, dropped afterwards; yields its URL."""
    import psycopg

    name = f"petstore_test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield POSTGRES_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
