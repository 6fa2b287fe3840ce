"""``petstore pets import`` with real files against a live server (issue: what real
clients and tools see): every record is judged as the API would judge it, what is
refused is reported by line and skipped, and the rest is stored."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from petstore.cli.main import main
from tests.cli import client_runner, import_file
from tests.conftest import LiveServer, all_pets


@pytest.fixture
def runner(live_server: LiveServer) -> CliRunner:
    return client_runner(live_server)


def _names_added(live_server: LiveServer, before: int) -> list[str]:
    return [p["name"] for p in all_pets(live_server.url, live_server.dev_key)[before:]]


def _count(live_server: LiveServer) -> int:
    return len(all_pets(live_server.url, live_server.dev_key))


def test_json_lines_with_a_line_that_is_not_json_stores_the_rest_and_exits_5(
    runner: CliRunner, live_server: LiveServer, tmp_path: Path
) -> None:
    before = _count(live_server)
    lines = [
        '{"name":"Jl-1","categoryId":1}',
        '{"name": "Jl-2", oops',
        "",
        '{"name":"Jl-3","categoryId":3}',
    ]
    result = import_file(runner, tmp_path / "pets.jsonl", "\n".join(lines) + "\n")
    assert result.exit_code == 5, result.output
    assert "line 2: not JSON" in result.stderr
    assert "2 animals stored" in result.stdout
    assert "1 refused" in result.stdout
    assert _names_added(live_server, before) == ["Jl-1", "Jl-3"]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (
            '{"name":"Loki","categoryId":22,"color":"green"}',
            "color: is not a member of a NewPet (name, categoryId, status)",
        ),
        ('{"name":"Twice","name":"Twice","categoryId":1}', "name: this member is named more"),
        ('{"name":"Nocat"}', "categoryId: is required"),
        ('{"name":"Strcat","categoryId":"1"}', "categoryId: must be a whole number"),
        ('["Arr", 1]', "body: must be a JSON object"),
    ],
)
def test_json_records_the_api_refuses_are_reported_with_its_message_and_not_stored(
    runner: CliRunner, live_server: LiveServer, tmp_path: Path, line: str, reason: str
) -> None:
    before = _count(live_server)
    first = f"Before-{uuid.uuid4().hex[:8]}"  # a record of its own: not already imported
    text = f'{{"name":"{first}","categoryId":1}}\n{line}\n'
    result = import_file(runner, tmp_path / "pets.jsonl", text)
    assert result.exit_code == 5, result.output
    refusals = [row for row in result.stderr.splitlines() if row.startswith("line ")]
    assert len(refusals) == 1
    assert refusals[0].startswith(f"line 2: {reason}")
    assert _names_added(live_server, before) == [first]


def test_a_valid_json_record_is_stored_as_written(
    runner: CliRunner, live_server: LiveServer, tmp_path: Path
) -> None:
    before = _count(live_server)
    line = '{"status":"sold","categoryId":1e1,"name":"As written"}'
    result = import_file(runner, tmp_path / "pets.jsonl", b"\xef\xbb\xbf" + line.encode() + b"\r\n")
    assert result.exit_code == 0, result.output
    added = all_pets(live_server.url, live_server.dev_key)[before:]
    assert [(p["name"], p["categoryId"], p["status"]) for p in added] == [
        ("As written", 10, "sold")
    ]


def test_a_line_that_is_not_utf8_is_reported(
    runner: CliRunner, live_server: LiveServer, tmp_path: Path
) -> None:
    before = _count(live_server)
    text = b'{"name":"Caf\xe9","categoryId":1}\n{"name":"Utf8-ok","categoryId":1}\n'
    result = import_file(runner, tmp_path / "pets.jsonl", text)
    assert result.exit_code == 5, result.output
    assert "line 1: not UTF-8" in result.stderr
    assert _names_added(live_server, before) == ["Utf8-ok"]


def test_csv_row_with_more_cells_than_the_header_is_refused(
    runner: CliRunner, live_server: LiveServer, tmp_path: Path
) -> None:
    before = _count(live_server)
    text = "name,categoryId,status\nA1,1,available,extra\nA2,2,available\n"
    result = import_file(runner, tmp_path / "pets.csv", text)
    assert result.exit_code == 5, result.output
    assert "line 2: row has 4 cells, the header has 3" in result.stderr
    assert _names_added(live_server, before) == ["A2"]


@pytest.mark.parametrize("text", ["Milo,1,pending\nNala,4,\n"])
def test_csv_without_the_header_imports_nothing_and_says_so(
    runner: CliRunner, live_server: LiveServer, tmp_path: Path, text: str
) -> None:
    before = _count(live_server)
    result = import_file(runner, tmp_path / "pets.csv", text)
    assert result.exit_code == 2, result.output
    assert "name,categoryId[,status]" in result.output
    assert "0 animals stored" not in result.output
    assert _count(live_server) == before


@pytest.mark.parametrize("header", ["name,categoryId,color", "name,status", "name,categoryId,name"])
def test_csv_with_another_header_imports_nothing(
    runner: CliRunner, live_server: LiveServer, tmp_path: Path, header: str
) -> None:
    before = _count(live_server)
    result = import_file(runner, tmp_path / "pets.csv", f"{header}\nMilo,1,x\n")
    assert result.exit_code == 2, result.output
    assert "header" in result.output
    assert _count(live_server) == before


def test_csv_refusals_say_what_is_wrong_in_plain_english_by_line(
    runner: CliRunner, live_server: LiveServer, tmp_path: Path
) -> None:
    before = _count(live_server)
    text = (
        "categoryId,name,status\n"  # any column order
        "\n"
        "1,Csv-ok,pending\n"
        ",Nocat,\n"  # line 4: empty cell
        "2,,\n"  # line 5: no name
        "x,Xcat,\n"  # line 6
        "3,Csv-sold,sold\n"
        "4,Badstatus,lost\n"  # line 8
        '5,"Two\nlines",\n'  # lines 9-10: one row, a quoted cell spanning two lines
        "0,Zero,\n"  # line 11
    )
    result = import_file(runner, tmp_path / "pets.csv", text)
    assert result.exit_code == 5, result.output
    refusals = [row for row in result.stderr.splitlines() if row.startswith("line ")]
    assert refusals == [
        "line 4: categoryId: is required",
        "line 5: name: is required",
        "line 6: categoryId: must be a whole number from 1 to 9223372036854775807",
        "line 8: status: must be one of available, pending, sold",
        "line 9: name: must not contain control characters",
        "line 11: categoryId: must be a whole number from 1 to 9223372036854775807",
    ]
    assert "expected int" not in result.output
    assert "2 animals stored" in result.stdout
    assert "6 refused" in result.stdout
    assert _names_added(live_server, before) == ["Csv-ok", "Csv-sold"]


def test_csv_short_row_misses_its_category(
    runner: CliRunner, live_server: LiveServer, tmp_path: Path
) -> None:
    result = import_file(runner, tmp_path / "pets.csv", "name,categoryId\nShort\n")
    assert result.exit_code == 5, result.output
    assert "line 2: categoryId: is required" in result.stderr


def test_reimporting_a_file_with_refusals_adds_nothing_twice(
    runner: CliRunner, live_server: LiveServer, tmp_path: Path
) -> None:
    path = tmp_path / "pets.jsonl"
    records = [{"name": "Again-1", "categoryId": 1}, {"name": "Again-2", "color": "red"}]
    text = "\n".join(json.dumps(r) for r in records) + "\n"
    before = _count(live_server)
    assert import_file(runner, path, text).exit_code == 5
    assert import_file(runner, path, text).exit_code == 5
    assert _names_added(live_server, before) == ["Again-1"]


def test_import_stops_with_the_exit_code_of_a_service_failure(
    runner: CliRunner, tmp_path: Path
) -> None:
    path = tmp_path / "pets.jsonl"
    path.write_text('{"name":"Nokey","categoryId":1}\n')
    result = runner.invoke(
        main, ["pets", "import", str(path)], env={"PETSTORE_API_KEY": "petstore_" + "x" * 43}
    )
    assert result.exit_code == 3, result.output
    assert "Stopped at line 1" in result.stderr
