"""``petstore pets``: call a running service through :mod:`petstore.client`.

Human tables by default, ``--json`` for scripts (one JSON object per line). The
service and key come from ``--url``/``--api-key`` or ``PETSTORE_URL`` /
``PETSTORE_API_KEY``. Exit codes tell failures apart:

====  ==========================================================
0     success
1     any other error answer of the service
2     bad usage (click)
3     the API key was refused (401)
4     no such animal (404) or the operation is gone (410)
5     the request was refused as invalid (400, 409, 413, 415, 422)
6     rate limited (429) after the client's retries
7     the service failed (5xx) after the client's retries
8     the service could not be reached
====  ==========================================================
"""

from __future__ import annotations

import csv
import hashlib
import json
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click
import msgspec

from petstore.client import Client
from petstore.client_errors import (
    AuthenticationError,
    BadRequestError,
    ConflictError,
    GoneError,
    NotFoundError,
    PayloadError,
    PetstoreClientError,
    RateLimitedError,
    ServerError,
    TransportError,
)
from petstore.schemas import Pet, PetStatus

T = TypeVar("T")

_EXIT_CODES: list[tuple[type[PetstoreClientError], int]] = [
    (AuthenticationError, 3),
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


def _fail(error: PetstoreClientError) -> click.exceptions.Exit:
    """Report ``error`` on stderr; the Exit to raise, with the code for its family."""
    click.echo(f"Error: {error.code}: {error.message}", err=True)
    code = next((code for cls, code in _EXIT_CODES if isinstance(error, cls)), 1)
    return click.exceptions.Exit(code)


def _call(action: Callable[[], T]) -> T:
    try:
        return action()
    except PetstoreClientError as exc:
        raise _fail(exc) from None


def _client(ctx: click.Context) -> Client:
    options = ctx.parent.params if ctx.parent else {}
    try:
        return Client(options.get("url"), api_key=options.get("api_key"))
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
@click.option("--url", help="Service base URL ending in /v1 [PETSTORE_URL].")
@click.option("--api-key", help="API key [PETSTORE_API_KEY]; prefer the variable.")
def pets_group(url: str | None, api_key: str | None) -> None:
    """List, add, get and import animals on a running service."""


@pets_group.command("list")
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


def _records(path: Path) -> Iterator[dict[str, Any]]:
    """NewPet-shaped dicts from JSON lines or CSV (header: name,categoryId[,status])."""
    with path.open(encoding="utf-8", newline="") as lines:
        if path.suffix.lower() == ".csv":
            for row in csv.DictReader(lines):
                record: dict[str, Any] = {"name": row.get("name", "")}
                raw_category = (row.get("categoryId") or row.get("category_id") or "").strip()
                record["categoryId"] = int(raw_category) if raw_category.isdigit() else raw_category
                if row.get("status"):
                    record["status"] = row["status"]
                yield record
            return
        for number, line in enumerate(lines, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise click.BadParameter(f"line {number}: not JSON ({exc.msg})") from None


@pets_group.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.pass_context
def pets_import(ctx: click.Context, file: Path) -> None:
    """Add every animal of FILE (JSON lines, or CSV with a header).

    Each record's Idempotency-Key is derived from its position and content, so
    running the import again after an interruption, within 24 hours and with the
    same API key, adds nothing twice. Invalid records are reported and skipped.
    """
    records = list(_records(file))
    sent = 0
    failures: list[str] = []
    progress = click.progressbar(records, label=f"Importing {file.name}", file=sys.stderr)
    with _client(ctx) as client, progress as bar:
        for index, record in enumerate(bar, 1):
            canonical = json.dumps(record, sort_keys=True, ensure_ascii=False)
            key = hashlib.sha256(f"{index}:{canonical}".encode()).hexdigest()
            try:
                client.create_pet(
                    record.get("name"),  # type: ignore[arg-type]
                    category_id=record.get("categoryId"),  # type: ignore[arg-type]
                    status=record.get("status"),
                    idempotency_key=key,
                )
                sent += 1
            except (BadRequestError, ConflictError, PayloadError) as exc:
                failures.append(f"record {index}: {exc.code}: {exc.message}")
            except PetstoreClientError as exc:
                raise _fail(exc) from None
    for failure in failures:
        click.echo(failure, err=True)
    click.echo(f"{sent} animals stored (new or already imported), {len(failures)} refused.")
    if failures:
        ctx.exit(5)
