"""``petstore pets import`` with the files people have (issue: what a newcomer hits):
idempotency keys from each record's content, JSON arrays, CSV headers in any case
and with ``;``, other encodings refused with a hint, empty files alike, and the
words of the summary."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from petstore.cli.records import read_records
from tests.cli import client_runner, import_file
from tests.conftest import LiveServer, all_pets


@pytest.fixture
def runner(live_server: LiveServer) -> CliRunner:
    return client_runner(live_server)


def _names(live_server: LiveServer) -> list[str]:
    return [p["name"] for p in all_pets(live_server.url, live_server.dev_key)]


def _tag() -> str:
    return uuid.uuid4().hex[:8]


# Idempotency keys ------------------------------------------------------------------


def test_a_records_key_depends_on_its_content_and_occurrence_not_its_line(
    tmp_path: Path,
) -> None:
    lines = ['{"name":"A","categoryId":1}', '{"name":"B","categoryId":1}']
    twin = '{"name":"Twin","categoryId":1}'
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_text("\n".join(["oops", lines[0], twin, lines[1], twin]) + "\n")
    second.write_text("\n".join([lines[0], twin, "", lines[1], twin, '{"name":"C"}']) + "\n")
    before = {r.document: r.idempotency_key for r in read_records(first) if r.document}
    after = [r for r in read_records(second) if r.document]
    assert [r.occurrence for r in after] == [1, 1, 1, 2, 1]
    twins = [r.idempotency_key for r in after if r.document == twin.encode()]
    assert len(set(twins)) == 2  # identical records are two animals
    keys = {r.idempotency_key for r in read_records(first) if r.document}
    assert {r.idempotency_key for r in after[:4]} == keys
    assert before[lines[0].encode()] == after[0].idempotency_key


def test_deleting_a_refused_line_and_running_again_adds_nothing_twice(
    runner: CliRunner, live_server: LiveServer, tmp_path: Path
) -> None:
    tag = _tag()
    good = [f'{{"name":"Shift-{tag}-{c}","categoryId":1}}' for c in "ABC"]
    path = tmp_path / "shifts.jsonl"
    assert import_file(runner, path, "\n".join([good[0], "not json", *good[1:]])).exit_code == 5
    again = import_file(runner, path, "\n".join(good))
    assert again.exit_code == 0, again.output
    assert sorted(n for n in _names(live_server) if tag in n) == [
        f"Shift-{tag}-A",
        f"Shift-{tag}-B",
        f"Shift-{tag}-C",
    ]


def test_identical_records_are_each_stored_once(
    runner: CliRunner, live_server: LiveServer, tmp_path: Path
) -> None:
    name = f"Twin-{_tag()}"
    text = f'{{"name":"{name}","categoryId":1}}\n' * 2
    assert import_file(runner, tmp_path / "twins.jsonl", text).exit_code == 0
    assert import_file(runner, tmp_path / "twins.jsonl", text).exit_code == 0
    assert _names(live_server).count(name) == 2


# JSON arrays -----------------------------------------------------------------------


def test_a_pretty_printed_json_array_is_read_as_records(
    runner: CliRunner, live_server: LiveServer, tmp_path: Path
) -> None:
    tag = _tag()
    records = [{"name": f"Arr-{tag}-{i}", "categoryId": i} for i in (1, 2, 3)]
    result = import_file(runner, tmp_path / "pets.json", json.dumps(records, indent=2))
    assert result.exit_code == 0, result.output
    assert "3 animals stored, 0 refused" in result.stdout
    assert [n for n in _names(live_server) if tag in n] == [r["name"] for r in records]


def test_a_json_array_refused_by_the_service_is_reported_by_its_line(
    runner: CliRunner, tmp_path: Path
) -> None:
    text = f'[\n  {{"name": "Ok-{_tag()}", "categoryId": 1}},\n  {{"name": "Nocat"}}\n]\n'
    result = import_file(runner, tmp_path / "pets.json", text)
    assert result.exit_code == 5, result.output
    refusals = [row for row in result.stderr.splitlines() if row.startswith("line ")]
    assert refusals == ["line 3: categoryId: is required"]
    assert "1 animal stored, 1 refused" in result.stdout


def test_a_broken_json_array_is_refused_whole(
    runner: CliRunner, live_server: LiveServer, tmp_path: Path
) -> None:
    before = len(_names(live_server))
    text = '[\n  {"name": "Half-1", "categoryId": 1},\n  {"name": "Half-2", "categoryId": 1\n]\n'
    result = import_file(runner, tmp_path / "pets.json", text)
    assert result.exit_code == 2, result.output
    assert "not valid JSON" in result.stderr
    assert "line 4" in result.stderr
    assert "nothing was imported" in result.stderr
    assert len(_names(live_server)) == before


# CSV -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header_and_rows",
    [
        "Name,CategoryId,Status\n{name},1,pending\n",
        "NAME;CATEGORYID\n{name};1\n",
        "name;category_id;status\n{name};1;sold\n",
        "name\tcategoryId\n{name}\t1\n",
    ],
    ids=["case", "semicolon", "semicolon-snake", "tab"],
)
def test_csv_headers_in_any_case_and_with_semicolons_are_read(
    runner: CliRunner, live_server: LiveServer, tmp_path: Path, header_and_rows: str
) -> None:
    name = f"Csv-{_tag()}"
    result = import_file(runner, tmp_path / "pets.csv", header_and_rows.format(name=name))
    assert result.exit_code == 0, result.output
    assert name in _names(live_server)


def test_a_latin1_csv_is_refused_whole_with_how_to_convert_it(
    runner: CliRunner, live_server: LiveServer, tmp_path: Path
) -> None:
    before = len(_names(live_server))
    text = "name,categoryId\nRex,1\nCaf\xe9,2\n".encode("latin-1")
    result = import_file(runner, tmp_path / "pets.csv", text)
    assert result.exit_code == 2, result.output
    assert "pets.csv is not UTF-8 text (line 3" in result.stderr
    assert "iconv -f LATIN1 -t UTF-8 pets.csv > pets-utf8.csv" in result.stderr
    assert len(_names(live_server)) == before


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_utf16_file_is_refused_with_how_to_convert_it(
    runner: CliRunner, tmp_path: Path, suffix: str
) -> None:
    result = import_file(runner, tmp_path / f"pets{suffix}", "name,categoryId\n".encode("utf-16"))
    assert result.exit_code == 2, result.output
    assert "is UTF-16 text" in result.stderr
    assert "iconv -f UTF-16 -t UTF-8" in result.stderr


def test_the_header_error_quotes_the_line_as_written(runner: CliRunner, tmp_path: Path) -> None:
    result = import_file(runner, tmp_path / "pets.csv", '"Milo";"1"\nNala;4\n')
    assert result.exit_code == 2, result.output
    assert """(it is '"Milo";"1"')""" in result.stderr


@pytest.mark.parametrize("name", ["pets.csv", "pets.jsonl", "pets.json"])
@pytest.mark.parametrize("text", ["", "\n", "  \r\n\n"])
def test_empty_files_of_every_kind_import_nothing_and_exit_0(
    runner: CliRunner, tmp_path: Path, name: str, text: str
) -> None:
    result = import_file(runner, tmp_path / name, text)
    assert result.exit_code == 0, result.output
    assert f"{name} holds no records: nothing to import." in result.stdout


# The summary -----------------------------------------------------------------------


def test_the_summary_is_singular_for_one_and_says_a_rerun_adds_nothing_twice(
    runner: CliRunner, tmp_path: Path
) -> None:
    result = import_file(
        runner, tmp_path / "one.jsonl", f'{{"name":"One-{_tag()}","categoryId":1}}'
    )
    assert result.exit_code == 0, result.output
    assert "1 animal stored, 0 refused." in result.stdout
    assert "again with the same API key within 24 hours adds none of them twice" in (result.stdout)
