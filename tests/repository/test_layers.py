"""The layers import one way (the import-linter contracts in pyproject.toml, run by
``make lint``); what those contracts cannot see is what a program really loads, so
this imports the client side in a fresh interpreter and lists its modules."""

from __future__ import annotations

import re
import subprocess
import sys

from tests import ROOT

SERVER = {
    "starlette",
    "granian",
    "psycopg",
    "psycopg_pool",
    "alembic",
    "sqlalchemy",
    "redis",
    "limits",
    "prometheus_client",
    "opentelemetry",
}


def test_importing_the_client_loads_nothing_of_the_server() -> None:
    probe = "import sys, petstore.client, petstore.cli.pets; print(' '.join(sys.modules))"
    loaded = set(subprocess.check_output([sys.executable, "-c", probe], text=True).split())
    assert {name.split(".")[0] for name in loaded} & SERVER == set()
    ours = {name for name in loaded if name.startswith("petstore")}
    client_side = {
        "petstore",
        "petstore.schemas",
        "petstore.text",
        "petstore.cli",
        "petstore.cli.pets",
        "petstore.cli.records",
        "petstore.cli.csv_records",
        "petstore.cli.importer",
        "petstore.cli.connection",
        "petstore.cli.tables",
        "petstore.client",
        "petstore.client.clients",
        "petstore.client.core",
        "petstore.client.errors",
        "petstore.client.quota",
        "petstore.client.retries",
        "petstore.client.transport",
        "petstore.client.urls",
    }
    assert ours <= client_side, ours - client_side
    assert "petstore.client.clients" in ours  # the probe did load the client


SRC = ROOT / "src" / "petstore"


def test_every_module_is_at_most_250_lines() -> None:
    """docs/architecture.md: a module a reader takes in at once."""
    long = {
        str(path.relative_to(SRC)): lines
        for path in SRC.rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > 250
    }
    assert long == {}


def test_only_the_clock_reads_the_time_in_the_store_and_the_rules() -> None:
    """The speed devices, caches and limits take an injected clock, so that their
    tests move time by hand instead of sleeping (server/clock.py)."""
    readers = {
        str(path.relative_to(SRC))
        for folder in ("server/store", "server/rules")
        for path in (SRC / folder).rglob("*.py")
        if re.search(r"\btime\.(monotonic|time|sleep)\b", path.read_text())
    }
    assert readers == set()
    assert re.search(r"\btime\.monotonic\b", (SRC / "server" / "clock.py").read_text())


def test_no_statement_of_the_store_is_made_by_replace() -> None:
    """Each backend's SQL is written out in its own dialect, never derived. (The
    migrations' runner escapes ``%`` in a database URL for alembic's config file:
    no statement.)"""
    derived = [
        str(path.relative_to(SRC))
        for path in (SRC / "server" / "store").rglob("*.py")
        if ".replace(" in path.read_text() and path.name != "migrate.py"
    ]
    assert derived == []
