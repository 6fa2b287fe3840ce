"""What a rolling deploy behind a proxy needs: schema tolerance, forwarded scheme,
clear errors from the migration command."""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from petstore.cli.main import main
from petstore.server.app import create_app
from petstore.server.config import Settings
from petstore.server.store import migrate
from tests.conftest import run_sql


@pytest.mark.own_database
def test_a_newer_schema_than_the_code_knows_keeps_it_ready(database_url: str) -> None:
    """Expand/contract: the next release migrates first; running instances stay in."""
    run_sql(database_url, "UPDATE alembic_version SET version_num = 'f00d_next_release'")
    with TestClient(create_app(Settings(database_url=database_url))) as client:
        response = client.get("/readyz")
    assert response.status_code == 200


@pytest.mark.own_database
def test_an_older_schema_is_not_ready_and_refused_at_start(
    database_url: str, runner: CliRunner
) -> None:
    with TestClient(create_app(Settings(database_url=database_url))) as client:
        run_sql(database_url, "UPDATE alembic_version SET version_num = '0001'")
        response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["code"] == "unavailable"
    if database_url.startswith("postgresql"):  # SQLite is migrated by the CLI itself
        result = runner.invoke(main, ["keys", "list"])
        assert result.exit_code == 1
        assert "petstore db upgrade" in result.stderr


def test_forwarded_proto_makes_links_https_when_trusted(
    database_url: str, make_key: Callable[..., str]
) -> None:
    auth = {"Authorization": f"Bearer {make_key()}", "X-Forwarded-Proto": "https"}
    for trusted, scheme in ((True, "https"), (False, "http")):
        settings = Settings(database_url=database_url, trust_forwarded_headers=trusted)
        with TestClient(create_app(settings)) as client:
            for i in range(2):
                client.post("/v1/pets", json={"name": f"p{i}", "categoryId": 1}, headers=auth)
            page = client.get("/v1/pets?limit=1", headers=auth)
            pet = client.get("/v1/pets/1", headers=auth)
        assert page.headers["link"].startswith(f"<{scheme}://testserver/v1/pets?")
        assert pet.headers["link"].startswith(f"<{scheme}://testserver/v1/docs/deprecations>")


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["db", "upgrade"], id="db-upgrade"),
        pytest.param(["serve", "--migrate"], id="serve-migrating-in-a-child-process"),
    ],
)
def test_migrating_an_unreachable_database_is_one_clear_line(command: list[str]) -> None:
    result = CliRunner().invoke(
        main, command, env={"PETSTORE_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/none"}
    )
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: cannot reach the database")
    assert "Traceback" not in result.output


def test_the_revisions_read_from_file_names_are_alembics() -> None:
    """The serving processes learn the revisions from the migration files' names, not
    from Alembic: each file is named for its revision, and they form one chain."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(Path(migrate.__file__).with_name("migrations")))
    scripts = ScriptDirectory.from_config(config)
    chain = [script.revision for script in reversed(list(scripts.walk_revisions()))]
    assert migrate.revisions() == tuple(chain)
    assert len(chain) >= 2
    for older, newer in pairwise(chain):
        assert scripts.get_revision(newer).down_revision == older
    for script in scripts.walk_revisions():
        assert Path(script.path).name.startswith(f"{script.revision}_")
    assert migrate.head_revision() == scripts.get_current_head()
    assert migrate.older_revisions() == frozenset(chain[:-1])
