"""``petstore keys``: create, list and revoke API keys, with their scopes and rate
limits (interface: authentication; D13, D21, D22). Keys are made and read through
:mod:`petstore.server.rules.keys`."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import click

from petstore.cli.store import settings_or_usage_error, with_store
from petstore.cli.tables import fit_width, table, wide_option
from petstore.server.config import check_rate_limit
from petstore.server.rules import keys
from petstore.server.store import ApiKey, Store
from petstore.text import printable


class Timestamp(click.ParamType[datetime]):
    """An ISO 8601 date and time as people paste it (``2031-01-01T00:00:00Z``,
    ``2031-01-01T00:00:00.000Z``, ``+02:00``, no zone, a bare date); a time without a
    zone, and a bare date (midnight), are UTC. Converts to an aware datetime."""

    name = "timestamp"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            moment = datetime.fromisoformat(str(value).strip())
        except ValueError:
            self.fail(
                f"'{printable(str(value))}' is not an ISO 8601 date and time, e.g. "
                "2031-01-01T00:00:00Z or 2031-01-01",
                param,
                ctx,
            )
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _rate_limit(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return check_rate_limit(value)
    except ValueError as exc:
        raise click.BadParameter(printable(str(exc)), ctx=ctx, param=param) from None


@click.group("keys")
def keys_group() -> None:
    """Create, list and revoke API keys."""


@keys_group.command("create")
@click.option("--name", required=True, help="A label for the key, e.g. the client's name.")
@click.option(
    "--expires-at",
    type=Timestamp(),
    metavar="WHEN",
    help="When the key stops working, in ISO 8601: 2031-01-01T00:00:00Z, or a date "
    "(2031-01-01, midnight UTC); without a zone, UTC.",
)
@click.option(
    "--scope",
    "scopes",
    multiple=True,
    type=click.Choice(keys.SCOPES),
    help="What the key may do (repeatable): pets:read (list and get animals), pets:write "
    "(add animals). Without --scope, both.",
)
@click.option(
    "--rate-limit",
    callback=_rate_limit,
    metavar="LIMIT",
    help="The key's own rate limit instead of the service's PETSTORE_RATE_LIMIT, e.g. "
    "6000/minute, 10/sec or '100 per minute'.",
)
def keys_create(
    name: str, expires_at: datetime | None, scopes: tuple[str, ...], rate_limit: str | None
) -> None:
    """Create a key. The key is printed once, alone on the last line."""
    now = datetime.now(UTC)
    if expires_at is not None and expires_at <= now:
        raise click.BadParameter(
            f"the expiry must be in the future ({expires_at.isoformat()} has passed)",
            param_hint="'--expires-at'",
        )
    if not name.strip() or len(name) > keys.NAME_MAX:
        raise click.BadParameter(
            f"a key name is 1 to {keys.NAME_MAX} characters, not blank", param_hint="'--name'"
        )

    async def create(store: Store) -> tuple[ApiKey, str]:
        return await keys.create(
            store.api_keys,
            name=name,
            now=now,
            expires_at=expires_at,
            scopes=scopes or keys.SCOPES,
            rate_limit=rate_limit,
        )

    try:
        record, key = with_store(settings_or_usage_error(), create)
    except ValueError as exc:
        raise click.BadParameter(printable(str(exc))) from None
    click.echo(
        f"Created API key {record.id} ({printable(record.name)}, prefix {record.prefix}, "
        f"scopes {' '.join(record.scopes)}, rate limit {record.rate_limit or 'default'}).",
        err=True,
    )
    click.echo("Store it now: it cannot be shown again.", err=True)
    click.echo(key)


def _state(record: ApiKey, now: datetime) -> str:
    if record.revoked_at is not None:
        return "revoked"
    if record.expires_at is not None and record.expires_at <= now:
        return "expired"
    return "active"


@keys_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per key.")
@wide_option
def keys_list(as_json: bool, wide: bool) -> None:
    """List keys: id, name, prefix, scopes, rate limit, created, expires and state
    (active, expired or revoked). Never a secret.

    On a terminal, a name too long for its width is shortened with an ellipsis
    (--wide: whole); to a pipe every name is whole."""
    records = with_store(settings_or_usage_error(), lambda store: keys.list_keys(store.api_keys))
    now = datetime.now(UTC)

    def iso(value: datetime | None) -> str | None:
        return value.isoformat(timespec="seconds") if value else None

    if as_json:
        for r in records:
            times = {f: iso(getattr(r, f)) for f in ("created_at", "expires_at", "revoked_at")}
            fields = {"id": r.id, "name": r.name, "prefix": r.prefix, "scopes": list(r.scopes)}
            more = {"rate_limit": r.rate_limit, "state": _state(r, now)}
            click.echo(json.dumps({**fields, **more, **times}))
        return
    rows: list[tuple[str, ...]] = [
        ("ID", "NAME", "PREFIX", "SCOPES", "RATE-LIMIT", "CREATED", "EXPIRES", "STATE")
    ]
    for r in records:
        scopes = ",".join(scope.removeprefix("pets:") for scope in r.scopes)
        expires = r.expires_at.date().isoformat() if r.expires_at else "-"
        created = r.created_at.date().isoformat()
        limit = r.rate_limit or "default"
        rows.append((str(r.id), r.name, r.prefix, scopes, limit, created, expires))
        rows[-1] += (_state(r, now),)
    for line in table(rows, fit=fit_width(wide=wide), shrink=(1, 4)):
        click.echo(line)


@keys_group.command("revoke")
@click.argument("key_id", type=int)
def keys_revoke(key_id: int) -> None:
    """Revoke key KEY_ID; every instance refuses it within 5 seconds."""
    now = datetime.now(UTC)
    revoked = with_store(
        settings_or_usage_error(), lambda store: keys.revoke(store.api_keys, key_id, now=now)
    )
    if not revoked:
        raise click.ClickException(f"no active key has id {key_id}")
    click.echo(f"Revoked API key {key_id}.")
