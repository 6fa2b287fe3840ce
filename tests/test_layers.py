"""The layers import one way (the import-linter contracts in pyproject.toml, run by
``make lint``); what those contracts cannot see is what a program really loads, so
this imports the client side in a fresh interpreter and lists its modules."""

from __future__ import annotations

import subprocess
import sys

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
        "petstore.cli",
        "petstore.cli.pets",
        "petstore.cli.records",
        "petstore.cli.importer",
        "petstore.cli.connection",
        "petstore.cli.tables",
        "petstore.client",
        "petstore.client.clients",
        "petstore.client.core",
        "petstore.client.errors",
        "petstore.client.quota",
    }
    assert ours <= client_side, ours - client_side
    assert "petstore.client.clients" in ours  # the probe did load the client
