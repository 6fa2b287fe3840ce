"""``petstore pets`` against a live server, through the client (issue: CLI calls)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from petstore.cli.main import main
from tests import examples
from tests.cli import client_runner
from tests.conftest import LiveServer, all_pets


@pytest.fixture
def runner(live_server: LiveServer) -> CliRunner:
    return client_runner(live_server)


def _all(live_server: LiveServer) -> list[dict[str, object]]:
    return all_pets(live_server.url, live_server.dev_key)


def test_add_get_and_list_as_json(runner: CliRunner) -> None:
    added = runner.invoke(main, ["pets", "add", "Rex", "--category-id", "3", "--json"])
    assert added.exit_code == 0, added.output
    pet = json.loads(added.stdout)
    assert pet == examples.pet(pet["id"], "Rex", 3)
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
    assert lines[0].split() == ["ID", "NAME", "CATEGORY", "ID", "STATUS"]
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
    assert "line 3: name: is required" in result.stderr
    assert "line 4: categoryId: must be a whole number" in result.stderr
    names = [p["name"] for p in _all(live_server)[before:]]
    assert names == ["Milo", "Nala"]


@pytest.mark.parametrize("where", ["before", "after", "both"])
def test_url_and_api_key_work_before_and_after_the_subcommand(
    live_server: LiveServer, where: str
) -> None:
    url, key = f"{live_server.url}/v1", live_server.dev_key
    flags = ["--url", url, "--api-key", key]
    wrong = ["--url", "http://127.0.0.1:1/v1", "--api-key", "petstore_" + "x" * 43]
    args = {
        "before": ["pets", *flags, "list", "--json"],
        "after": ["pets", "list", "--json", *flags],
        "both": ["pets", *wrong, "list", "--json", *flags],  # the later one wins
    }[where]
    result = CliRunner(env={"PETSTORE_URL": "", "PETSTORE_API_KEY": ""}).invoke(main, args)
    assert result.exit_code == 0, result.output


def test_flags_after_the_subcommand_win_over_the_environment(
    runner: CliRunner, live_server: LiveServer
) -> None:
    args = ["pets", "add", "Flag", "--category-id", "1", "--url", "http://127.0.0.1:1/v1"]
    result = runner.invoke(main, args)
    assert result.exit_code == 8, result.output
    assert "Flag" not in [p["name"] for p in _all(live_server)]
    result = runner.invoke(main, ["pets", "get", "1", "--api-key", "petstore_" + "x" * 43])
    assert result.exit_code == 3, result.output


@pytest.mark.parametrize(
    ("missing", "flag"), [("PETSTORE_URL", "--url"), ("PETSTORE_API_KEY", "--api-key")]
)
def test_missing_configuration_names_the_flag_and_the_variable(
    runner: CliRunner, missing: str, flag: str
) -> None:
    result = runner.invoke(main, ["pets", "list"], env={missing: ""})
    assert result.exit_code == 2
    assert f"pass {flag} or set {missing}" in result.stderr
    assert "base_url" not in result.output
    assert "api_key" not in result.output


class _NotPetstore(BaseHTTPRequestHandler):
    """Another web server: every path is 404, an HTML page or a JSON of its own."""

    def do_GET(self) -> None:
        json_body = self.path.startswith("/api")
        body = b'{"detail":"Not Found"}' if json_body else b"<h1>Not Found</h1>"
        self.send_response(404)
        self.send_header("Content-Type", "application/json" if json_body else "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.do_GET()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def not_petstore() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotPetstore)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("path", ["/", "", "/v2", "/v1/docs"])
@pytest.mark.parametrize(
    "command", [["list"], ["get", "1"], ["add", "Nowhere", "--category-id", "1"]]
)
def test_a_url_that_is_not_the_base_exits_8_naming_it(
    runner: CliRunner, live_server: LiveServer, path: str, command: list[str]
) -> None:
    url = f"{live_server.url}{path}"
    result = runner.invoke(main, ["pets", *command, "--url", url])
    assert result.exit_code == 8, result.output
    assert f"no Petstore service at {url.rstrip('/')}" in result.stderr
    assert "no such animal" not in result.output


@pytest.mark.parametrize("path", ["/", "/api/v1"])
@pytest.mark.parametrize("command", [["list"], ["get", "1"]])
def test_a_url_of_another_server_exits_8(
    runner: CliRunner, not_petstore: str, path: str, command: list[str]
) -> None:
    url = f"{not_petstore}{path}"
    result = runner.invoke(main, ["pets", *command, "--url", url])
    assert result.exit_code == 8, result.output
    assert f"no Petstore service at {url.rstrip('/')}" in result.stderr


@pytest.mark.parametrize("suffix", ["/v1/pets", "/v1/pets/"])
def test_a_url_of_the_pets_collection_says_so_and_exits_2(
    runner: CliRunner, live_server: LiveServer, suffix: str
) -> None:
    result = runner.invoke(main, ["pets", "list", "--url", f"{live_server.url}{suffix}"])
    assert result.exit_code == 2, result.output
    assert "is the pets collection; pass the base URL ending in /v1" in result.stderr


def test_no_such_animal_is_still_4(runner: CliRunner) -> None:
    result = runner.invoke(main, ["pets", "get", str(2**62)])
    assert result.exit_code == 4, result.output
    assert "no animal has id" in result.stderr


def test_a_key_without_the_scope_exits_9_and_adds_nothing(live_server: LiveServer) -> None:
    """D21: a read-only key lists, and adding with it is refused with its own code."""
    made = CliRunner(env={"PETSTORE_DATABASE_URL": live_server.database_url}).invoke(
        main, ["keys", "create", "--name", "report", "--scope", "pets:read"]
    )
    assert made.exit_code == 0, made.output
    reader = CliRunner(
        env={"PETSTORE_URL": f"{live_server.url}/v1", "PETSTORE_API_KEY": made.stdout.split()[-1]}
    )
    before = _all(live_server)
    assert reader.invoke(main, ["pets", "list", "--json"]).exit_code == 0
    refused = reader.invoke(main, ["pets", "add", "Rex", "--category-id", "1"])
    assert refused.exit_code == 9, refused.output
    assert "pets:write" in refused.output
    assert _all(live_server) == before
