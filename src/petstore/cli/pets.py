"""``petstore pets``: call a running service through :mod:`petstore.client`.

Human tables by default, ``--json`` for scripts (one JSON object per line). The
service and key come from ``--url`` and ``--api-key`` or ``--api-key-file``, given
before or after the subcommand (after wins), or else ``PETSTORE_URL`` /
``PETSTORE_API_KEY`` (:mod:`petstore.cli.connection`). Exit codes tell failures apart:

====  ==========================================================
0     success
1     any other error answer of the service
2     bad usage or configuration (click): no URL or key, a URL that is not
      http(s), holds a user name or password, or names the pets collection
      instead of the base, a file that cannot be imported as a whole (a CSV
      file without its header, not UTF-8)
3     the API key was refused (401)
4     no such animal (404) or the operation is gone (410)
5     the request was refused as invalid (400, 409, 413, 415, 422); for
      ``import``, one or more records were refused (the others are stored)
6     rate limited (429) after the client's retries (``import`` waits instead)
7     the service failed (5xx) after the client's retries
8     no Petstore service at the URL: unreachable, or a 404 shows the URL is not
      the base of a Petstore (e.g. it lacks ``/v1``)
9     the API key lacks the operation's scope (403)
====  ==========================================================
"""

from __future__ import annotations

import json
import typing
import warnings

import click
import msgspec

from petstore.cli.connection import call, client, connection
from petstore.cli.importer import pets_import
from petstore.cli.tables import fit_width, table, wide_option
from petstore.client import SunsetWarning
from petstore.schemas import LIMIT_DEFAULT, LIMIT_MAX, LIMIT_MIN, Pet, PetStatus
from petstore.text import printable

_STATUS = click.Choice([status.value for status in PetStatus])
#: The table's columns: every member of Pet, in order, headed by its name in capitals
#: (``category_id``: ``CATEGORY ID``), so a member added to Pet is shown unasked.
_COLUMNS = msgspec.structs.fields(Pet)
_HEADER = tuple(field.name.replace("_", " ").upper() for field in _COLUMNS)
#: The columns of free text (``name``), shortened to fit a terminal; the others
#: (ids, statuses) are always shown whole.
_SHRINK = tuple(
    i for i, field in enumerate(_COLUMNS) if str in (field.type, *typing.get_args(field.type))
)


def pet_rows(pets: list[Pet]) -> list[tuple[str, ...]]:
    """The rows of a table of ``pets``: the header, then a row per animal holding
    each member as JSON gives it (an enum's value, a number's digits), nothing for
    None."""
    rows = [_HEADER]
    for pet in pets:
        values = (msgspec.to_builtins(getattr(pet, field.name)) for field in _COLUMNS)
        rows.append(tuple("" if value is None else str(value) for value in values))
    return rows


def _show(pets: list[Pet], *, as_json: bool, wide: bool = False) -> None:
    """``pets`` as JSON lines, or as a table whose names are shortened to fit a
    terminal (never to a pipe, nor with ``wide``). The JSON is ASCII: each control and
    each character beyond ASCII is a JSON escape (``\\u001b``, ``\\u202e``), as in
    ``keys list --json``, so a name's escapes never reach the terminal and a script
    reads the same value."""
    if as_json:
        for pet in pets:
            click.echo(json.dumps(msgspec.to_builtins(pet), separators=(",", ":")))
        return
    for line in table(pet_rows(pets), fit=fit_width(wide=wide), shrink=_SHRINK):
        click.echo(line)


@click.group("pets")
@connection
def pets_group() -> None:
    """List, add, get and import animals on a running service."""


@pets_group.command("list")
@connection
@click.option("--status", type=_STATUS, help="Only animals with this status.")
@click.option(
    "--limit",
    type=click.IntRange(LIMIT_MIN, LIMIT_MAX),
    help=f"Page size ({LIMIT_MIN}-{LIMIT_MAX}, default {LIMIT_DEFAULT}).",
)
@click.option("--all", "every", is_flag=True, help="Follow every page to the end.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per animal.")
@wide_option
@click.pass_context
def pets_list(
    ctx: click.Context,
    status: str | None,
    limit: int | None,
    every: bool,
    as_json: bool,
    wide: bool,
) -> None:
    """List animals in id order: one page, or with --all every page."""
    with client(ctx) as petstore:
        if every:
            pets = call(lambda: list(petstore.iter_pets(status, limit=limit or LIMIT_MAX)))
        else:
            pets = call(lambda: petstore.list_pets(status, limit=limit).pets)
    _show(pets, as_json=as_json, wide=wide)


@pets_group.command("add")
@connection
@click.argument("name")
@click.option("--category-id", type=int, required=True, help="The category's id (>= 1).")
@click.option("--status", type=_STATUS, help="Default: available.")
@click.option("--json", "as_json", is_flag=True, help="Print the animal as JSON.")
@wide_option
@click.pass_context
def pets_add(
    ctx: click.Context,
    name: str,
    category_id: int,
    status: str | None,
    as_json: bool,
    wide: bool,
) -> None:
    """Add an animal (retried safely with an Idempotency-Key)."""
    with client(ctx) as petstore:
        pet = call(lambda: petstore.create_pet(name, category_id=category_id, status=status))
    _show([pet], as_json=as_json, wide=wide)


@pets_group.command("get", context_settings={"ignore_unknown_options": True})
@connection
@click.argument("pet_id", type=int, metavar="PET_ID")
@click.option("--json", "as_json", is_flag=True, help="Print the animal as JSON.")
@wide_option
@click.pass_context
def pets_get(ctx: click.Context, pet_id: int, as_json: bool, wide: bool) -> None:
    """Get one animal by id. Deprecated by the service: prefer pets list --status
    (a notice goes to stderr)."""
    with client(ctx) as petstore, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DeprecationWarning)
        pet = call(lambda: petstore.get_pet(pet_id))
    for warning in caught:
        if isinstance(warning.message, SunsetWarning):
            click.echo(
                f"Note: pets get calls GET /v1/pets/{{petId}}, which is deprecated and will "
                f"be removed on {printable(warning.message.sunset)}; use petstore pets list "
                f"--status STATUS instead.",
                err=True,
            )
    _show([pet], as_json=as_json, wide=wide)


pets_group.add_command(pets_import)
