"""``petstore pets`` against a live server, through the client (issue: CLI calls)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from petstore.cli import main
from tests.conftest import LiveServer, all_pets


@pytest.fixture
def runner(live_server: LiveServer) -> CliRunner:
    return CliRunner(
        env={"PETSTORE_URL": f"{live_server.url}/v1", "PETSTORE_API_KEY": live_server.dev_key}
    )


def _all(live_server: LiveServer) -> list[dict[str, object]]:
    return all_pets(live_server.url, live_server.dev_key)


def test_add_get_and_list_as_json(runner: CliRunner) -> None:
    added = runner.invoke(main, ["pets", "add", "Rex", "--category-id", "3", "--json"])
    assert added.exit_code == 0, added.output
    pet = json.loads(added.stdout)
    assert pet == {"id": pet["id"], "name": "Rex", "categoryId": 3, "status": "available"}
    got = runner.invoke(main, ["pets", "get", str(pet["id"]), "--json"])
    assert got.exit_code == 0
    assert json.loads(got.stdout) == pet
    assert "2030" in got.stderr  # the deprecation notice
    listed = runner.invoke(main, ["pets", "list", "--all", "--json"])
    assert pet in [json.loads(line) for line in listed.stdout.splitlines()]


def test_list_prints_a_table_by_default(runner: CliRunner) -> None:
    runner.invoke(main, ["pets", "add", "Tabby", "--category-id", "2", "--status", "sold"])
    result = runner.invoke(main, ["pets", "list", "--status", "sold", "--all"])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["ID", "NAME", "CATEGORY", "STATUS"]
    assert any(line.split()[1:] == ["Tabby", "2", "sold"] for line in lines[1:])


@pytest.mark.parametrize(
    ("args", "env", "code"),
    [
        (["pets", "get", "999999"], {}, 4),
        (["pets", "add", " ", "--category-id", "1"], {}, 5),
        (["pets", "list"], {"PETSTORE_API_KEY": "petstore_" + "x" * 43}, 3),
        (["pets", "list"], {"PETSTORE_URL": "http://127.0.0.1:1/v1"}, 8),
        (["pets", "list", "--limit", "0"], {}, 2),
    ],
)
def test_exit_codes_tell_errors_apart(
    runner: CliRunner, args: list[str], env: dict[str, str], code: int
) -> None:
    result = runner.invoke(main, args, env=env)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output


def test_import_json_lines_twice_adds_nothing_the_second_time(
    runner: CliRunner, live_server: LiveServer, tmp_path: Path
) -> None:
    file = tmp_path / "pets.jsonl"
    records = [{"name": f"imported-{i}", "categoryId": i + 1} for i in range(25)]
    file.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    before = len(_all(live_server))
    first = runner.invoke(main, ["pets", "import", str(file)])
    assert first.exit_code == 0, first.output
    assert "25 animals stored" in first.stdout
    after_first = len(_all(live_server))
    second = runner.invoke(main, ["pets", "import", str(file)])
    assert second.exit_code == 0
    assert after_first - before == 25
    assert len(_all(live_server)) == after_first


def test_import_csv_reports_and_skips_invalid_records(
    runner: CliRunner, live_server: LiveServer, tmp_path: Path
) -> None:
    file = tmp_path / "pets.csv"
    file.write_text("name,categoryId,status\nMilo,1,pending\n,2,\nOtis,x,\nNala,4,\n")
    before = len(_all(live_server))
    result = runner.invoke(main, ["pets", "import", str(file)])
    assert result.exit_code == 5
    assert "record 2: invalid_request" in result.stderr
    assert "record 3: invalid_request" in result.stderr
    names = [p["name"] for p in _all(live_server)[before:]]
    assert names == ["Milo", "Nala"]
