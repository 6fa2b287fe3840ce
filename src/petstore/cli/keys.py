"""``petstore keys``: create, list and revoke API keys (D13), with their scopes (D21)
and rate limits (D22). Keys are made and read through :mod:`petstore.server.rules.keys`."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import click

from petstore.cli.store import settings_or_usage_error, with_store
from petstore.server.rules import keys
from petstore.server.store import ApiKey, Store


@click.group("keys")
def keys_group() -> None:
    """Create, list and revoke API keys (D13)."""


@keys_group.command("create")
@click.option("--name", required=True, help="A label for the key, e.g. the client's name.")
@click.option(
    "--expires-at",
    type=click.DateTime(["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%d"]),
    help="ISO-8601 expiry, e.g. 2027-01-31T00:00:00Z (a bare date is UTC midnight).",
)
@click.option(
    "--scope",
    "scopes",
    multiple=True,
    type=click.Choice(keys.SCOPES),
    help="What the key may do (repeatable): pets:read (listPets, getPet), pets:write "
    "(createPet). Without --scope, both (D21).",
)
@click.option(
    "--rate-limit",
    help="The key's own rate limit, as PETSTORE_RATE_LIMIT (e.g. 6000/minute); without "
    "it, the service's (D22).",
)
def keys_create(
    name: str, expires_at: datetime | None, scopes: tuple[str, ...], rate_limit: str | None
) -> None:
    """Create a key. The key is printed once, alone on the last line."""
    if expires_at is not None and expires_at.tzinfo is None:
        expires_at = expires_at.replace(tzinfo=UTC)

    async def create(store: Store) -> tuple[ApiKey, str]:
        return await keys.create(
            store,
            name=name,
            now=datetime.now(UTC),
            expires_at=expires_at,
            scopes=scopes or keys.SCOPES,
            rate_limit=rate_limit,
        )

    try:
        record, key = with_store(settings_or_usage_error(), create)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    click.echo(
        f"Created API key {record.id} ({record.name}, prefix {record.prefix}, "
        f"scopes {' '.join(record.scopes)}, rate limit {record.rate_limit or 'default'}).",
        err=True,
    )
    click.echo("Store it now: it cannot be shown again.", err=True)
    click.echo(key)


@keys_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per key.")
def keys_list(as_json: bool) -> None:
    """List keys: id, name, prefix, scopes, rate limit, created, expires, revoked.
    Never a secret."""
    records = with_store(settings_or_usage_error(), keys.list_keys)

    def iso(value: datetime | None) -> str | None:
        return value.isoformat(timespec="seconds") if value else None

    if as_json:
        for r in records:
            times = {f: iso(getattr(r, f)) for f in ("created_at", "expires_at", "revoked_at")}
            fields = {"id": r.id, "name": r.name, "prefix": r.prefix, "scopes": list(r.scopes)}
            click.echo(json.dumps({**fields, "rateLimit": r.rate_limit, **times}))
        return
    rows: list[tuple[str, ...]] = [
        ("ID", "NAME", "PREFIX", "SCOPES", "RATE-LIMIT", "CREATED", "EXPIRES", "REVOKED")
    ]
    for r in records:
        shown = (iso(t) or "-" for t in (r.created_at, r.expires_at, r.revoked_at))
        limit = r.rate_limit or "default"
        rows.append((str(r.id), r.name, r.prefix, ",".join(r.scopes), limit, *shown))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


@keys_group.command("revoke")
@click.argument("key_id", type=int)
def keys_revoke(key_id: int) -> None:
    """Revoke key KEY_ID; every instance refuses it within 5 seconds (D13)."""
    now = datetime.now(UTC)
    revoked = with_store(
        settings_or_usage_error(), lambda store: keys.revoke(store, key_id, now=now)
    )
    if not revoked:
        raise click.ClickException(f"no active key has id {key_id}")
    click.echo(f"Revoked API key {key_id}.")
