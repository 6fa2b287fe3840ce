"""``petstore pets import``: every record of a file (:mod:`petstore.cli.records`) sent
to a running service, at the pace its rate limit allows.

The importer paces itself by the quota each response states (the ``RateLimit`` and
``RateLimit-Policy`` fields, D15, :class:`petstore.client.Quota`): it sends while
requests remain in the window and then waits for the window to reset, and on a 429
(the key's quota spent by another client too) it waits ``Retry-After`` and sends the
same record again. A long import is therefore slow rather than refused, and the
progress bar says what it waits for. Each record carries an Idempotency-Key made of
its content (:attr:`petstore.cli.records.Record.idempotency_key`), so running the
import again with the same API key within 24 hours adds nothing twice (D16).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from petstore.cli.connection import client, connection, fail
from petstore.cli.records import Record, read_records
from petstore.client import Client
from petstore.client.errors import (
    BadRequestError,
    ConflictError,
    PayloadError,
    PetstoreClientError,
    RateLimitedError,
)
from petstore.text import printable

_REFUSED = (BadRequestError, ConflictError, PayloadError)  # a record, not the service
_AGAIN = "with the same API key within 24 hours"


def _animals(count: int) -> str:
    return f"{count} animal" if count == 1 else f"{count} animals"


def _wait(bar: Any, seconds: float, label: str, why: str) -> None:
    """Sleep ``seconds``, the progress bar's label counting them down."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        bar.label = f"{label}: waiting {left:.0f} s for {why}"
        bar.render_progress()
        time.sleep(min(1.0, left))
    bar.label = label
    bar.render_progress()


def _send(petstore: Client, record: Record, bar: Any, label: str) -> None:
    """Send ``record`` once the quota allows, again after each 429. Raises the
    client's errors but RateLimitedError."""
    assert record.document is not None
    while True:
        quota = petstore.last_quota
        if quota is not None and (wait := quota.wait()) > 0:
            _wait(bar, wait, label, f"the rate limit ({printable(quota.describe())} for this key)")
        try:
            petstore.create_pet_json(record.document, idempotency_key=record.idempotency_key)
            return
        except RateLimitedError as exc:
            _wait(bar, exc.retry_after or 1.0, label, "the rate limit (429, Retry-After)")


@click.command("import")
@connection
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.pass_context
def pets_import(ctx: click.Context, file: Path) -> None:
    """Add every animal of FILE: JSON (an array, or one object per line), or CSV with
    the header name,categoryId[,status] (any case; comma or semicolon).

    Each record is sent as written and the service judges it; a record it refuses,
    a line that is not JSON and a row with more cells than the header are reported
    (line and reason) and skipped, and the exit code is then 5. The import waits as
    the key's rate limit requires (a key with its own, higher limit imports faster:
    petstore keys create --rate-limit 6000/minute). Running it again with the same
    API key within 24 hours adds nothing twice, so an interrupted import resumes.

    The service's reasons, the file's name and what a message quotes of the file are
    shown escaped (:func:`petstore.text.printable`): a hostile file or service cannot
    reach the terminal through them.
    """
    try:
        records = read_records(file)
    except click.UsageError as exc:  # it names the file, and may quote its first line
        raise click.UsageError(printable(exc.message)) from None
    name = printable(file.name)
    if not records:
        click.echo(f"{name} holds no records: nothing to import.")
        return
    stored, refused, done = 0, [], 0
    error: PetstoreClientError | None = None
    label = f"Importing {name}"
    bar_options: dict[str, Any] = {"label": label, "file": sys.stderr, "show_eta": True}
    with client(ctx) as petstore, click.progressbar(length=len(records), **bar_options) as bar:
        try:
            for record in records:
                if record.document is None:
                    refused.append(f"line {record.line}: {record.reason}")
                else:
                    try:
                        _send(petstore, record, bar, label)
                        stored += 1
                    except _REFUSED as exc:
                        refused.append(f"line {record.line}: {exc.message}")
                    except PetstoreClientError as exc:  # not the record's fault: stop
                        error = exc
                        break
                done += 1
                bar.update(1)
        except KeyboardInterrupt:
            bar.render_finish()
            where = f"line {records[done].line}" if done < len(records) else "the end"
            click.echo(
                f"\nInterrupted at {where} of {name}: {_animals(stored)} stored before "
                f"it. Run the same import again ({_AGAIN}) to resume: what is already "
                f"stored is not added twice.",
                err=True,
            )
            raise click.exceptions.Exit(130) from None
    for reason in refused:
        click.echo(printable(reason), err=True)
    click.echo(
        f"{_animals(stored)} stored, {len(refused)} refused. Importing {name} again "
        f"{_AGAIN} adds none of them twice."
    )
    if error is not None:
        line = records[done].line
        click.echo(f"Stopped at line {line}; the rest of {name} was not sent.", err=True)
        raise fail(error)
    if refused:
        ctx.exit(5)
