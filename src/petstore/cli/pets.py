"""``petstore pets``: call a running service through :mod:`petstore.client`.

Human tables by default, ``--json`` for scripts (one JSON object per line). The
service and key come from ``--url``/``--api-key``, given before or after the
subcommand (after wins), or else ``PETSTORE_URL`` / ``PETSTORE_API_KEY``. Exit
codes tell failures apart:

====  ==========================================================
0     success
1     any other error answer of the service
2     bad usage or configuration (click): no URL or key, a URL naming the pets
      collection instead of the base, a CSV file without its header
3     the API key was refused (401)
4     no such animal (404) or the operation is gone (410)
5     the request was refused as invalid (400, 409, 413, 415, 422); for
      ``import``, one or more records were refused (the others are stored)
6     rate limited (429) after the client's retries
7     the service failed (5xx) after the client's retries
8     no Petstore service at the URL: unreachable, or a 404 shows the URL is not
      the base of a Petstore (e.g. it lacks ``/v1``)
9     the API key lacks the operation's scope (403, D21)
====  ==========================================================
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click
import msgspec

from petstore.cli.records import read_records
from petstore.client import ENV_API_KEY, ENV_URL, Client
from petstore.client.errors import (
    AuthenticationError,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    GoneError,
    NotFoundError,
    PayloadError,
    PetstoreClientError,
    RateLimitedError,
    ServerError,
    ServiceNotFoundError,
    TransportError,
)
from petstore.schemas import Pet, PetStatus

T = TypeVar("T")

_EXIT_CODES: list[tuple[type[PetstoreClientError], int]] = [
    (AuthenticationError, 3),
    (ForbiddenError, 9),
    (ServiceNotFoundError, 8),  # before its base class NotFoundError
    (NotFoundError, 4),
    (GoneError, 4),
    (BadRequestError, 5),
    (ConflictError, 5),
    (PayloadError, 5),
    (RateLimitedError, 6),
    (ServerError, 7),
    (TransportError, 8),
]
_STATUS = click.Choice([status.value for status in PetStatus])
_REFUSED = (BadRequestError, ConflictError, PayloadError)  # a record, not the service


def _fail(error: PetstoreClientError) -> click.exceptions.Exit:
    """Report ``error`` on stderr; the Exit to raise, with the code for its family."""
    if isinstance(error, ServiceNotFoundError):
        click.echo(f"Error: {error.message}", err=True)
    else:
        click.echo(f"Error: {error.code}: {error.message}", err=True)
    code = next((code for cls, code in _EXIT_CODES if isinstance(error, cls)), 1)
    return click.exceptions.Exit(code)


def _call(action: Callable[[], T]) -> T:
    try:
        return action()
    except PetstoreClientError as exc:
        raise _fail(exc) from None


def _remember(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """Keep ``--url``/``--api-key`` in the context tree's shared ``meta``: given after
    the subcommand it is parsed last, so it wins over the one before."""
    if value is not None:
        ctx.meta[f"petstore.cli.pets.{param.name}"] = value


def _connection(command: Callable[..., None]) -> Callable[..., None]:
    """Add ``--url`` and ``--api-key`` to ``command`` (the group and every subcommand)."""
    key = click.option(
        "--api-key",
        metavar="KEY",
        expose_value=False,
        callback=_remember,
        help=f"API key [env: {ENV_API_KEY}]; prefer the variable.",
    )
    url = click.option(
        "--url",
        metavar="URL",
        expose_value=False,
        callback=_remember,
        help=f"Service base URL ending in /v1 [env: {ENV_URL}].",
    )
    return url(key(command))


def _client(ctx: click.Context) -> Client:
    """The client for the URL and key of the command line, else of the environment.
    Raises click.UsageError (exit 2) when one is missing or the URL is not a base."""
    url = ctx.meta.get("petstore.cli.pets.url") or os.environ.get(ENV_URL)
    key = ctx.meta.get("petstore.cli.pets.api_key") or os.environ.get(ENV_API_KEY)
    if not url:
        raise click.UsageError(f"no service URL: pass --url or set {ENV_URL} (it ends in /v1)")
    if not key:
        raise click.UsageError(f"no API key: pass --api-key or set {ENV_API_KEY}")
    try:
        return Client(url, api_key=key)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def _show(pets: list[Pet], *, as_json: bool) -> None:
    if as_json:
        for pet in pets:
            click.echo(msgspec.json.encode(pet))
        return
    rows = [("ID", "NAME", "CATEGORY", "STATUS")]
    rows += [(str(p.id), p.name, str(p.category_id), p.status.value) for p in pets]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


@click.group("pets")
@_connection
def pets_group() -> None:
    """List, add, get and import animals on a running service."""


@pets_group.command("list")
@_connection
@click.option("--status", type=_STATUS, help="Only animals with this status.")
@click.option("--limit", type=click.IntRange(1, 100), help="Page size (1-100, default 20).")
@click.option("--all", "every", is_flag=True, help="Follow every page to the end.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per animal.")
@click.pass_context
def pets_list(
    ctx: click.Context, status: str | None, limit: int | None, every: bool, as_json: bool
) -> None:
    """List animals in id order: one page, or with --all every page."""
    with _client(ctx) as client:
        if every:
            pets = _call(lambda: list(client.iter_pets(status, limit=limit or 100)))
        else:
            pets = _call(lambda: client.list_pets(status, limit=limit).pets)
    _show(pets, as_json=as_json)


@pets_group.command("add")
@_connection
@click.argument("name")
@click.option("--category-id", type=int, required=True, help="The category's id (>= 1).")
@click.option("--status", type=_STATUS, help="Default: available.")
@click.option("--json", "as_json", is_flag=True, help="Print the animal as JSON.")
@click.pass_context
def pets_add(
    ctx: click.Context, name: str, category_id: int, status: str | None, as_json: bool
) -> None:
    """Add an animal (retried safely with an Idempotency-Key)."""
    with _client(ctx) as client:
        pet = _call(lambda: client.create_pet(name, category_id=category_id, status=status))
    _show([pet], as_json=as_json)


@pets_group.command("get")
@_connection
@click.argument("pet_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print the animal as JSON.")
@click.pass_context
def pets_get(ctx: click.Context, pet_id: int, as_json: bool) -> None:
    """Get one animal by id (a deprecated operation: a notice goes to stderr)."""
    with _client(ctx) as client, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DeprecationWarning)
        pet = _call(lambda: client.get_pet(pet_id))
    for warning in caught:
        click.echo(f"Note: {warning.message}", err=True)
    _show([pet], as_json=as_json)


@pets_group.command("import")
@_connection
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.pass_context
def pets_import(ctx: click.Context, file: Path) -> None:
    """Add every animal of FILE: JSON lines, or CSV with the header name,categoryId[,status].

    Each record is sent as written and the service judges it; a record it refuses,
    a line that is not JSON and a row with more cells than the header are reported
    (line and reason) and skipped, and the exit code is then 5. Each record's
    Idempotency-Key is derived from its line and content, so running the import
    again, within 24 hours and with the same API key, adds nothing twice.
    """
    records = read_records(file)
    stored, stopped = 0, 0
    refused: list[str] = []
    error: PetstoreClientError | None = None
    progress = click.progressbar(records, label=f"Importing {file.name}", file=sys.stderr)
    with _client(ctx) as client, progress as bar:
        for record in bar:
            try:
                if record.document is None:
                    refused.append(f"line {record.line}: {record.reason}")
                    continue
                client.create_pet_json(record.document, idempotency_key=record.idempotency_key)
                stored += 1
            except _REFUSED as exc:
                refused.append(f"line {record.line}: {exc.message}")
            except PetstoreClientError as exc:  # not the record's fault: stop
                error, stopped = exc, record.line
                break
    for reason in refused:
        click.echo(reason, err=True)
    click.echo(f"{stored} animals stored (new or already imported), {len(refused)} refused.")
    if error is not None:
        click.echo(f"Stopped at line {stopped}; the rest of {file.name} was not sent.", err=True)
        raise _fail(error)
    if refused:
        ctx.exit(5)
