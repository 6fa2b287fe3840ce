"""The ``pets`` commands carry every member of the wire structs: ``pets add`` has a
parameter for each member of NewPet and sends it, the table has a column for each
member of Pet, and a CSV file may hold a column for each member of NewPet. The
members come from the structs (:mod:`tests.members`): one added to Pet or NewPet
fails here until the command carries it."""

from __future__ import annotations

import json
from pathlib import Path

import click
import msgspec

from petstore.cli.csv_records import HEADER
from petstore.cli.main import main
from petstore.cli.pets import pet_rows, pets_add
from petstore.cli.records import read_records
from petstore.schemas import NewPet, Pet
from tests.cli import client_runner
from tests.conftest import LiveServer
from tests.members import sample, wire_values


def _add_arguments(values: dict[str, object]) -> list[str]:
    """``pets add``'s command line for NewPet ``values`` (by Python name): each
    member as its own argument or option, found by name."""
    params = {param.name: param for param in pets_add.params}
    args: list[str] = []
    for field in msgspec.structs.fields(NewPet):
        param = params.get(field.name)
        assert param is not None, f"pets add has no parameter for NewPet's {field.encode_name}"
        value = str(msgspec.to_builtins(values[field.name]))
        args += [value] if isinstance(param, click.Argument) else [param.opts[0], value]
    return args


def test_pets_add_sends_every_member_of_new_pet(live_server: LiveServer) -> None:
    new_pet = sample(NewPet)
    values = {field.name: getattr(new_pet, field.name) for field in msgspec.structs.fields(NewPet)}
    result = client_runner(live_server).invoke(
        main, ["pets", "add", *_add_arguments(values), "--json"]
    )
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert {member: shown[member] for member in wire_values(NewPet)} == wire_values(NewPet)


def test_the_table_has_a_column_for_every_member_of_pet() -> None:
    header, row = pet_rows([sample(Pet)])
    assert len(header) == len(msgspec.structs.fields(Pet))
    assert row == tuple(str(value) for value in wire_values(Pet).values())


def test_the_table_of_pets_list_shows_every_member(live_server: LiveServer) -> None:
    runner = client_runner(live_server)
    added = runner.invoke(main, ["pets", "add", "Columns", "--category-id", "4", "--json"])
    pet = msgspec.json.decode(added.stdout.encode(), type=Pet)
    listed = runner.invoke(main, ["pets", "list", "--all"])
    lines = listed.stdout.splitlines()
    assert lines[0].split() == " ".join(pet_rows([])[0]).split()
    assert lines[-1].split() == list(pet_rows([pet])[1])


def test_a_csv_file_may_hold_a_column_for_every_member_of_new_pet(tmp_path: Path) -> None:
    values = wire_values(NewPet)
    file = tmp_path / "pets.csv"
    cells = [str(msgspec.to_builtins(value)) for value in values.values()]
    file.write_text(",".join(values) + "\n" + ",".join(cells) + "\n", encoding="utf-8")
    (record,) = read_records(file)
    assert record.document is not None
    assert json.loads(record.document) == values
    assert all(member in HEADER for member in values)
