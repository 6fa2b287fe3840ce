"""API key format and storage (D13): a visible ``petstore_`` type prefix, 256 random
bits, and only a SHA-256 hash of the key in the database."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from petstore.server.rules import keys
from petstore.server.store import ApiKey, open_store
from tests.conftest import NOW, run_sql

KEY_RE = re.compile(r"petstore_[A-Za-z0-9_-]{43}")


def db_path(database_url: str) -> Path:
    return Path(database_url.removeprefix("sqlite:///"))


def api_key_rows(database_url: str) -> list[dict[str, Any]]:
    return run_sql(database_url, "SELECT * FROM api_keys ORDER BY id")


def random_bytes(key: str) -> bytes:
    return base64.urlsafe_b64decode(key.removeprefix("petstore_") + "=")


def run_with_store(database_url: str, work: Callable[[Any], Any]) -> Any:
    async def run() -> Any:
        store = await open_store(database_url)
        try:
            return await work(store)
        finally:
            await store.close()

    return asyncio.run(run())


# Format -----------------------------------------------------------------------------


def test_generated_key_has_type_prefix_and_43_base64url_characters() -> None:
    key = keys.generate()
    assert key.startswith("petstore_")
    assert KEY_RE.fullmatch(key), key
    assert len(key) == len("petstore_") + 43


def test_generated_key_carries_256_random_bits() -> None:
    key = keys.generate()
    decoded = random_bytes(key)
    assert len(decoded) == 32
    # Round-trips: the 43 characters are exactly the unpadded base64url of 32 bytes.
    assert base64.urlsafe_b64encode(decoded).rstrip(b"=").decode() == key[len("petstore_") :]


def test_generated_keys_differ() -> None:
    generated = {keys.generate() for _ in range(1000)}
    assert len(generated) == 1000
    # 256 random bits: no two share even their visible prefix in a small sample.
    assert len({keys.visible_prefix(key) for key in generated}) == 1000


def test_issued_key_has_the_documented_format(make_key: Callable[..., str]) -> None:
    first, second = make_key(name="a"), make_key(name="b")
    for key in (first, second):
        assert KEY_RE.fullmatch(key), key
        assert len(random_bytes(key)) == 32
    assert first != second


def test_visible_prefix_is_type_prefix_plus_eight_characters() -> None:
    key = keys.generate()
    assert keys.visible_prefix(key) == key[: len("petstore_") + 8]


@pytest.mark.parametrize(
    "candidate",
    [
        pytest.param("", id="empty"),
        pytest.param("petstore_", id="prefix-only"),
        pytest.param("petstore_" + "A" * 42, id="42-chars"),
        pytest.param("petstore_" + "A" * 44, id="44-chars"),
        pytest.param("petstore_" + "A" * 42 + "=", id="padding"),
        pytest.param("petstore_" + "A" * 42 + "+", id="plus"),
        pytest.param("petstore_" + "A" * 42 + "/", id="slash"),
        pytest.param("petstore_" + "A" * 42 + ".", id="dot"),
        pytest.param("petstore_" + "A" * 42 + "é", id="non-ascii"),
        pytest.param("petstore_" + "A" * 42 + "٣", id="non-ascii-digit"),
        pytest.param("Petstore_" + "A" * 43, id="capitalised-prefix"),
        pytest.param("PETSTORE_" + "A" * 43, id="upper-prefix"),
        pytest.param("petstore-" + "A" * 43, id="dash-prefix"),
        pytest.param("petshop_" + "A" * 43, id="other-prefix"),
        pytest.param("A" * 52, id="no-prefix"),
        pytest.param(" petstore_" + "A" * 43, id="leading-space"),
        pytest.param("petstore_" + "A" * 43 + " ", id="trailing-space"),
        pytest.param("petstore_" + "A" * 43 + "\n", id="trailing-newline"),
        pytest.param("Bearer petstore_" + "A" * 43, id="with-scheme"),
        pytest.param("xpetstore_" + "A" * 43, id="embedded"),
    ],
)
def test_visible_prefix_of_malformed_key_is_none(candidate: str) -> None:
    assert keys.visible_prefix(candidate) is None


@pytest.mark.parametrize(
    "candidate",
    [
        "petstore_" + "A" * 43,
        "petstore_" + "-" * 43,
        "petstore_" + "_" * 43,
        "petstore_" + "9" * 43,
    ],
)
def test_visible_prefix_of_well_formed_key(candidate: str) -> None:
    assert keys.visible_prefix(candidate) == candidate[:17]


def test_hash_key_is_sha256_hex() -> None:
    key = keys.generate()
    assert keys.hash_key(key) == hashlib.sha256(key.encode()).hexdigest()
    assert re.fullmatch(r"[0-9a-f]{64}", keys.hash_key(key))


# Storage ----------------------------------------------------------------------------


def test_only_the_sha256_hash_of_a_key_is_stored(
    database_url: str, make_key: Callable[..., str]
) -> None:
    key = make_key(name="stored")
    secret = key.removeprefix("petstore_")
    (row,) = api_key_rows(database_url)
    for column, value in row.items():
        assert key not in str(value), column
        assert secret not in str(value), column
    assert row["key_hash"] == hashlib.sha256(key.encode()).hexdigest()
    assert row["prefix"] == key[:17]
    assert row["name"] == "stored"


def test_no_key_is_anywhere_in_the_database_files(
    database_url: str, make_key: Callable[..., str]
) -> None:
    """Not in a table, nor in the WAL or journal beside it."""
    if not database_url.startswith("sqlite"):
        pytest.skip("a file-level check; the rows are checked on PostgreSQL by the tests above")
    issued = [make_key(name=f"k{i}") for i in range(3)]
    path = db_path(database_url)
    files = [f for f in path.parent.iterdir() if f.name.startswith(path.name)]
    assert path in files
    content = b"".join(f.read_bytes() for f in files)
    for key in issued:
        assert key.encode() not in content
        assert key.removeprefix("petstore_").encode() not in content
        assert hashlib.sha256(key.encode()).hexdigest().encode() in content


def test_each_key_has_its_own_row_and_hash(database_url: str, make_key: Callable[..., str]) -> None:
    issued = [make_key(name=f"k{i}") for i in range(3)]
    rows = api_key_rows(database_url)
    assert [row["key_hash"] for row in rows] == [keys.hash_key(key) for key in issued]
    assert [row["name"] for row in rows] == ["k0", "k1", "k2"]
    assert all(row["revoked_at"] is None and row["expires_at"] is None for row in rows)


def test_created_record_never_carries_the_secret_or_hash(database_url: str) -> None:
    record, key = run_with_store(
        database_url, lambda store: keys.create(store.api_keys, name="ci", now=NOW)
    )
    assert isinstance(record, ApiKey)
    assert set(record.__struct_fields__) == {
        "id",
        "name",
        "prefix",
        "created_at",
        "expires_at",
        "revoked_at",
        "scopes",
        "rate_limit",
    }
    assert key not in repr(record)
    assert keys.hash_key(key) not in repr(record)
    assert record.prefix == key[:17]
    assert record.created_at == NOW


def test_expiry_is_stored_in_utc(database_url: str) -> None:
    expiry = datetime(2030, 1, 1, 4, 0, tzinfo=timezone(timedelta(hours=2)))
    record, _ = run_with_store(
        database_url,
        lambda store: keys.create(store.api_keys, name="ci", now=NOW, expires_at=expiry),
    )
    assert record.expires_at == datetime(2030, 1, 1, 2, 0, tzinfo=UTC)
    assert record.expires_at.utcoffset() == timedelta(0)


# Creation rules ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expires_at", "message"),
    [
        pytest.param("", None, "name", id="empty-name"),
        pytest.param("   ", None, "name", id="blank-name"),
        pytest.param("x" * 101, None, "name", id="name-too-long"),
        pytest.param("ci", datetime(2030, 1, 1), "zone", id="naive-expiry"),
        pytest.param("ci", NOW, "future", id="expiry-now"),
        pytest.param("ci", NOW - timedelta(seconds=1), "future", id="expiry-past"),
    ],
)
def test_create_refuses_bad_name_or_expiry(
    database_url: str, name: str, expires_at: datetime | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        run_with_store(
            database_url,
            lambda store: keys.create(store.api_keys, name=name, now=NOW, expires_at=expires_at),
        )
    assert api_key_rows(database_url) == []


@pytest.mark.parametrize("name", ["x", "x" * 100, "ci runner #1", "ünïcødé"])
def test_create_accepts_names_of_1_to_100_characters(database_url: str, name: str) -> None:
    record, _ = run_with_store(
        database_url, lambda store: keys.create(store.api_keys, name=name, now=NOW)
    )
    assert record.name == name
    assert [row["name"] for row in api_key_rows(database_url)] == [name]


def test_dev_key_is_created_only_when_no_key_is_active(database_url: str) -> None:
    first = run_with_store(database_url, lambda store: keys.ensure_dev_key(store.api_keys, now=NOW))
    assert first is not None
    assert KEY_RE.fullmatch(first)
    again = run_with_store(database_url, lambda store: keys.ensure_dev_key(store.api_keys, now=NOW))
    assert again is None
    assert [row["name"] for row in api_key_rows(database_url)] == ["dev"]


def test_dev_key_is_created_when_every_key_is_expired(
    database_url: str, make_key: Callable[..., str]
) -> None:
    make_key(name="old", expires_at=NOW + timedelta(hours=1))
    later = NOW + timedelta(hours=2)
    created = run_with_store(
        database_url, lambda store: keys.ensure_dev_key(store.api_keys, now=later)
    )
    assert created is not None
    assert [row["name"] for row in api_key_rows(database_url)] == ["old", "dev"]


# Listing and revoking ---------------------------------------------------------------


def test_list_keys_gives_every_key_by_id_and_no_secret(
    database_url: str, make_key: Callable[..., str]
) -> None:
    issued = [make_key(name="a"), make_key(name="b", expires_at=NOW + timedelta(days=1))]
    run_with_store(database_url, lambda store: keys.revoke(store.api_keys, 1, now=NOW))
    listed = run_with_store(database_url, lambda store: keys.list_keys(store.api_keys))
    assert [(r.id, r.name) for r in listed] == [(1, "a"), (2, "b")]
    assert [r.revoked_at for r in listed] == [NOW, None]
    assert listed[1].expires_at == NOW + timedelta(days=1)
    for key in issued:
        assert key not in repr(listed)
        assert keys.hash_key(key) not in repr(listed)


def test_list_keys_of_an_empty_store_is_empty(database_url: str) -> None:
    assert run_with_store(database_url, lambda store: keys.list_keys(store.api_keys)) == []


def test_revoke_marks_the_key_revoked_in_utc_once(
    database_url: str, make_key: Callable[..., str]
) -> None:
    make_key(name="a")
    at = datetime(2026, 11, 21, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    assert (
        run_with_store(database_url, lambda store: keys.revoke(store.api_keys, 1, now=at)) is True
    )
    later = NOW + timedelta(hours=1)
    assert (
        run_with_store(database_url, lambda store: keys.revoke(store.api_keys, 1, now=later))
        is False
    )
    (record,) = run_with_store(database_url, lambda store: keys.list_keys(store.api_keys))
    assert record.revoked_at == NOW
    assert record.revoked_at.utcoffset() == timedelta(0)


@pytest.mark.parametrize("key_id", [0, -1, 99])
def test_revoking_an_unknown_key_is_false(
    database_url: str, make_key: Callable[..., str], key_id: int
) -> None:
    make_key(name="a")
    assert (
        run_with_store(database_url, lambda store: keys.revoke(store.api_keys, key_id, now=NOW))
        is False
    )
    assert [row["revoked_at"] for row in api_key_rows(database_url)] == [None]


def test_revoke_refuses_a_naive_time(database_url: str, make_key: Callable[..., str]) -> None:
    make_key(name="a")
    with pytest.raises(ValueError, match="zone"):
        run_with_store(
            database_url,
            lambda store: keys.revoke(store.api_keys, 1, now=datetime(2026, 11, 21, 12, 0)),
        )
    assert [row["revoked_at"] for row in api_key_rows(database_url)] == [None]
