"""Idempotency keys on createPet (D16), over HTTP against the real app, on both
backends: replays, reuse with another body, per-API-key scope, header syntax,
expiry and purge, the record stored with the animal, and 409 while in flight."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import httpx2 as httpx
import msgspec
import pytest
from starlette.testclient import TestClient

from petstore.schemas import NewPet, PetStatus
from petstore.server.app import create_app
from petstore.server.config import Settings
from petstore.server.rules.idempotency import fingerprint
from petstore.server.store.postgres import ID_ORDER_LOCK
from tests import examples
from tests.conftest import NOW, FakeClock, run_sql

REX = b'{"name":"Rex","categoryId":1}'


@pytest.fixture(autouse=True)
def _no_records_of_other_tests(database_url: str) -> None:
    """The PostgreSQL run database is emptied per test without this table, and API
    key ids restart at 1, so a record of an earlier test would otherwise replay."""
    run_sql(database_url, "DELETE FROM idempotency_records")


def _create(
    client: TestClient,
    auth: dict[str, str],
    key: str | bytes | None,
    body: bytes = REX,
) -> httpx.Response:
    headers: dict[str, Any] = {**auth, "Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return client.post("/v1/pets", content=body, headers=headers)


def _pet_count(database_url: str) -> int:
    return int(run_sql(database_url, "SELECT count(*) AS n FROM pets")[0]["n"])


def _record_count(database_url: str) -> int:
    return int(run_sql(database_url, "SELECT count(*) AS n FROM idempotency_records")[0]["n"])


def _listed(client: TestClient, auth: dict[str, str]) -> list[dict[str, Any]]:
    response = client.get("/v1/pets", headers=auth)
    assert response.status_code == 200
    listed: list[dict[str, Any]] = response.json()
    return listed


def _assert_created(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 201, response.text
    assert "idempotent-replayed" not in response.headers
    pet: dict[str, Any] = response.json()
    return pet


def _assert_replay_of(response: httpx.Response, original: httpx.Response) -> None:
    assert response.status_code == 201, response.text
    assert response.headers["idempotent-replayed"] == "true"
    assert response.content == original.content


def _assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["code"] == code
    assert body["status"] == status
    return body


# Replays ------------------------------------------------------------------------------


@pytest.mark.parametrize("retries", [1, 3])
def test_replay_returns_the_original_201_and_creates_nothing(
    client: TestClient, auth: dict[str, str], database_url: str, retries: int
) -> None:
    first = _create(client, auth, "retry-me")
    pet = _assert_created(first)
    assert pet == examples.pet(1, "Rex", 1)
    for _ in range(retries):
        _assert_replay_of(_create(client, auth, "retry-me"), first)
    assert _listed(client, auth) == [pet]
    assert _pet_count(database_url) == 1
    assert _record_count(database_url) == 1


def test_a_create_without_a_key_is_never_a_replay(
    client: TestClient, auth: dict[str, str], database_url: str
) -> None:
    ids = {_assert_created(_create(client, auth, None))["id"] for _ in range(2)}
    assert ids == {1, 2}
    assert _record_count(database_url) == 0


@pytest.mark.parametrize(
    ("first_body", "second_body"),
    [
        pytest.param(REX, b'{ "categoryId" : 1 ,\n\t"name" : "Rex" }\n', id="order-and-whitespace"),
        pytest.param(REX, b'{"name":"Rex","categoryId":1,"status":"available"}', id="default-sent"),
        pytest.param(
            b'{"status":"available","categoryId":1,"name":"Rex"}', REX, id="default-omitted"
        ),
        pytest.param(
            b'{"name":"Rex","categoryId":1,"status":"sold"}',
            b'{"status": "sold", "categoryId": 1, "name": "Rex"}',
            id="explicit-status",
        ),
        pytest.param(b'{"name":"R\\u0065x","categoryId":1}', REX, id="json-escape"),
    ],
)
def test_an_equivalent_body_is_a_replay(
    client: TestClient,
    auth: dict[str, str],
    database_url: str,
    first_body: bytes,
    second_body: bytes,
) -> None:
    first = _create(client, auth, "same-pet", first_body)
    _assert_created(first)
    _assert_replay_of(_create(client, auth, "same-pet", second_body), first)
    assert _pet_count(database_url) == 1


@pytest.mark.parametrize(
    "other_body",
    [
        pytest.param(b'{"name":"Max","categoryId":1}', id="name"),
        pytest.param(b'{"name":"Rex","categoryId":2}', id="categoryId"),
        pytest.param(b'{"name":"Rex","categoryId":1,"status":"pending"}', id="status"),
        pytest.param(b'{"name":"rex","categoryId":1}', id="name-case"),
    ],
)
def test_same_key_with_a_different_body_is_422_and_creates_nothing(
    client: TestClient, auth: dict[str, str], database_url: str, other_body: bytes
) -> None:
    first = _create(client, auth, "reused", REX)
    pet = _assert_created(first)
    body = _assert_error(_create(client, auth, "reused", other_body), 422, "idempotency_key_reused")
    assert "Idempotency-Key" in body["message"]
    assert _listed(client, auth) == [pet]
    assert _pet_count(database_url) == 1
    # The key still belongs to the original request.
    _assert_replay_of(_create(client, auth, "reused", REX), first)


def test_keys_of_different_api_keys_do_not_collide(
    client: TestClient, make_key: Callable[..., str], database_url: str
) -> None:
    alice = {"Authorization": f"Bearer {make_key('alice')}"}
    bob = {"Authorization": f"Bearer {make_key('bob')}"}
    alice_first = _create(client, alice, "shared")
    bob_first = _create(client, bob, "shared")
    alice_pet, bob_pet = _assert_created(alice_first), _assert_created(bob_first)
    assert alice_pet["id"] != bob_pet["id"]
    # Each API key's retry gets its own animal back, even with another key's body.
    _assert_replay_of(_create(client, alice, "shared"), alice_first)
    _assert_replay_of(_create(client, bob, "shared"), bob_first)
    carol = {"Authorization": f"Bearer {make_key('carol')}"}
    _assert_created(_create(client, carol, "shared", b'{"name":"Max","categoryId":2}'))
    assert _pet_count(database_url) == 3


# Header syntax ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first_key", "second_key"),
    [
        pytest.param('"abc"', "abc", id="string-then-token"),
        pytest.param("abc", '"abc"', id="token-then-string"),
        pytest.param('"abc"', '"abc"', id="string-twice"),
        pytest.param("abc", "abc", id="token-twice"),
        pytest.param('"a:b/c"', "a:b/c", id="token-characters"),
    ],
)
def test_a_quoted_string_and_a_bare_token_are_the_same_key(
    client: TestClient, auth: dict[str, str], database_url: str, first_key: str, second_key: str
) -> None:
    first = _create(client, auth, first_key)
    _assert_created(first)
    _assert_replay_of(_create(client, auth, second_key), first)
    assert _pet_count(database_url) == 1


@pytest.mark.parametrize(
    ("header", "stored"),
    [
        pytest.param("k" * 255, "k" * 255, id="token-255"),
        pytest.param('"' + "k" * 253 + '"', "k" * 253, id="string-255-as-sent"),
        pytest.param('"with space"', "with space", id="string-with-space"),
        pytest.param('"a\\"b\\\\c"', 'a"b\\c', id="string-with-escapes"),
        pytest.param("*Ab-9.~_", "*Ab-9.~_", id="token-punctuation"),
    ],
)
def test_a_valid_key_is_accepted_and_stored_unquoted(
    client: TestClient, auth: dict[str, str], database_url: str, header: str, stored: str
) -> None:
    first = _create(client, auth, header)
    pet = _assert_created(first)
    _assert_replay_of(_create(client, auth, header), first)
    rows = run_sql(database_url, "SELECT idempotency_key, pet_id FROM idempotency_records")
    assert rows == [{"idempotency_key": stored, "pet_id": pet["id"]}]


@pytest.mark.parametrize(
    "header",
    [
        pytest.param("", id="empty"),
        pytest.param('""', id="empty-string"),
        pytest.param("k" * 256, id="token-256"),
        pytest.param('"' + "k" * 254 + '"', id="string-256-as-sent"),
        pytest.param("a b", id="unquoted-space"),
        pytest.param("clé".encode(), id="non-ascii-token"),
        pytest.param('"clé"'.encode(), id="non-ascii-string"),
        pytest.param('"abc', id="unbalanced-open"),
        pytest.param('abc"', id="unbalanced-close"),
        pytest.param('"a"b"', id="inner-quote-unescaped"),
        pytest.param("1abc", id="token-starting-with-digit"),
        pytest.param("a,b", id="list"),
    ],
)
def test_an_invalid_key_is_400_naming_the_header_and_creates_nothing(
    client: TestClient, auth: dict[str, str], database_url: str, header: str | bytes
) -> None:
    body = _assert_error(_create(client, auth, header), 400, "invalid_request")
    assert "Idempotency-Key" in body["message"]
    assert _listed(client, auth) == []
    assert _pet_count(database_url) == 0
    assert _record_count(database_url) == 0


@pytest.mark.parametrize(
    "invalid_body",
    [
        pytest.param(b'{"name":', id="malformed"),
        pytest.param(b'{"categoryId":1}', id="missing-name"),
        pytest.param(b'{"name":"Rex","categoryId":1,"id":5}', id="unknown-field"),
        pytest.param(b'{"name":"Rex","categoryId":0}', id="out-of-range"),
        pytest.param(b"", id="empty"),
    ],
)
def test_a_request_with_an_invalid_body_does_not_consume_the_key(
    client: TestClient, auth: dict[str, str], database_url: str, invalid_body: bytes
) -> None:
    refused = _create(client, auth, "fix-and-retry", invalid_body)
    assert refused.status_code == 400, refused.text
    assert _record_count(database_url) == 0
    pet = _assert_created(_create(client, auth, "fix-and-retry", REX))
    assert pet["id"] == 1
    assert _pet_count(database_url) == 1


def test_a_failed_create_does_not_consume_the_key(
    client: TestClient, auth: dict[str, str], database_url: str
) -> None:
    """The record is in the animal's transaction: when writing it fails, the animal
    is rolled back too, and the key stays free for the retry."""
    if database_url.startswith("sqlite"):
        run_sql(
            database_url,
            "CREATE TRIGGER refuse_records BEFORE INSERT ON idempotency_records "
            "BEGIN SELECT RAISE(ABORT, 'refused by test'); END",
        )
        drop = "DROP TRIGGER refuse_records"
    else:
        run_sql(
            database_url,
            "CREATE FUNCTION refuse_records() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'refused by test'; END $$",
        )
        run_sql(
            database_url,
            "CREATE TRIGGER refuse_records BEFORE INSERT ON idempotency_records "
            "FOR EACH ROW EXECUTE FUNCTION refuse_records()",
        )
        drop = "DROP TRIGGER refuse_records ON idempotency_records"
    try:
        failed = _create(client, auth, "atomic")
        assert failed.status_code >= 500, failed.text
        assert _pet_count(database_url) == 0
        assert _record_count(database_url) == 0
    finally:
        run_sql(database_url, drop)
        if not database_url.startswith("sqlite"):
            run_sql(database_url, "DROP FUNCTION refuse_records()")
    pet = _assert_created(_create(client, auth, "atomic"))
    assert _listed(client, auth) == [pet]


# Storage and expiry -----------------------------------------------------------------


def test_the_record_is_stored_with_the_animal(
    client: TestClient, auth: dict[str, str], database_url: str
) -> None:
    _assert_created(_create(client, auth, None, b'{"name":"NoKey","categoryId":3}'))
    created = _create(client, auth, '"stored"', b'{"name":"Keyed","categoryId":4}')
    pet = _assert_created(created)
    rows = run_sql(
        database_url, "SELECT idempotency_key, pet_id, response FROM idempotency_records"
    )
    assert len(rows) == 1
    assert rows[0]["idempotency_key"] == "stored"
    assert rows[0]["pet_id"] == pet["id"] == 2
    assert json.loads(rows[0]["response"]) == pet == created.json()


def test_a_replay_answers_the_stored_animal_in_todays_shape(
    client: TestClient, auth: dict[str, str], database_url: str
) -> None:
    """A record stored by an earlier release keeps its Pet as that release wrote it:
    the replay is the same animal as today's Pet, members in today's order, one
    today's Pet no longer has left out."""
    pet = _assert_created(_create(client, auth, "deployed", b'{"name":"Old","categoryId":2}'))
    earlier = {"status": "available", "legacy": True, "categoryId": 2, "name": "Old"}
    run_sql(
        database_url,
        "UPDATE idempotency_records SET response = ?",
        (json.dumps({**earlier, "id": pet["id"]}, indent=1),),
    )
    replay = _create(client, auth, "deployed", b'{"name":"Old","categoryId":2}')
    assert replay.status_code == 201
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.content == json.dumps(pet, separators=(",", ":")).encode()


def test_the_fingerprint_is_version_1_for_todays_members() -> None:
    """D16: records stored before this release hold version 1 fingerprints, the
    SHA-256 of the compact NewPet with every member, defaults applied; a retry made
    across the deploy must still match them."""
    rex = NewPet("Rex", 1)
    expected = hashlib.sha256(b'{"name":"Rex","categoryId":1,"status":"available"}').hexdigest()
    assert fingerprint(rex) == expected
    assert fingerprint(NewPet("Rex", 1, PetStatus.SOLD)) != expected


def test_a_member_added_to_newpet_at_its_default_changes_no_fingerprint() -> None:
    """A deploy that adds an optional member to NewPet: a body that leaves it out (or
    sends its default) fingerprints as before; one that sets it does not."""
    fields = [(f.name, f.type, f.default) for f in msgspec.structs.fields(NewPet)]
    grown = msgspec.defstruct(
        "GrownNewPet", [*fields, ("nickname", str | None, None)], rename="camel"
    )
    before = fingerprint(NewPet("Rex", 1))
    assert fingerprint(grown("Rex", 1)) == before
    assert fingerprint(grown("Rex", 1, PetStatus.AVAILABLE, None)) == before
    assert fingerprint(grown("Rex", 1, PetStatus.AVAILABLE, "Rexy")) != before


@pytest.mark.parametrize(
    "retry_body",
    [
        pytest.param(REX, id="same-body"),
        pytest.param(b'{"name":"Max","categoryId":2}', id="different-body"),
    ],
)
def test_a_key_older_than_24_hours_creates_a_new_animal(
    client: TestClient,
    auth: dict[str, str],
    database_url: str,
    clock: FakeClock,
    retry_body: bytes,
) -> None:
    old = _assert_created(_create(client, auth, "yesterday"))
    clock.advance(hours=24, seconds=1)
    new = _assert_created(_create(client, auth, "yesterday", retry_body))
    assert new["id"] == old["id"] + 1
    assert _pet_count(database_url) == 2
    rows = run_sql(database_url, "SELECT pet_id FROM idempotency_records")
    assert rows == [{"pet_id": new["id"]}]
    # The key now belongs to the new request.
    assert _create(client, auth, "yesterday", retry_body).headers["idempotent-replayed"] == "true"


def test_a_key_is_remembered_for_24_hours(
    client: TestClient, auth: dict[str, str], database_url: str, clock: FakeClock
) -> None:
    first = _create(client, auth, "today")
    _assert_created(first)
    clock.advance(hours=23, minutes=59, seconds=59)
    _assert_replay_of(_create(client, auth, "today"), first)
    other = _create(client, auth, "today", b'{"name":"Max","categoryId":2}')
    _assert_error(other, 422, "idempotency_key_reused")
    assert _pet_count(database_url) == 1


@contextmanager
def _app_started_at(database_url: str, now: FakeClock) -> Iterator[TestClient]:
    app = create_app(Settings(database_url=database_url), clock=now)
    with TestClient(app, raise_server_exceptions=False) as started:
        yield started


def _wait_for(condition: Callable[[], bool], *, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_expired_records_are_purged_when_an_instance_starts(
    client: TestClient, auth: dict[str, str], database_url: str
) -> None:
    pets = [_assert_created(_create(client, auth, f"k{i}")) for i in range(3)]
    assert _record_count(database_url) == 3
    with _app_started_at(database_url, FakeClock(NOW + timedelta(hours=25))):
        _wait_for(lambda: _record_count(database_url) == 0)
    assert _listed(client, auth) == pets


def test_records_younger_than_24_hours_are_not_purged(
    client: TestClient, auth: dict[str, str], database_url: str, clock: FakeClock
) -> None:
    _assert_created(_create(client, auth, "old"))
    clock.advance(hours=23)
    young = _assert_created(_create(client, auth, "young", b'{"name":"Max","categoryId":2}'))
    later = FakeClock(clock())
    later.advance(hours=2)  # "old" is 25 h old, "young" 2 h

    def keys() -> list[str]:
        rows = run_sql(database_url, "SELECT idempotency_key FROM idempotency_records")
        return sorted(row["idempotency_key"] for row in rows)

    with _app_started_at(database_url, later) as restarted:
        _wait_for(lambda: keys() == ["young"])
        replay = _create(restarted, auth, "young", b'{"name":"Max","categoryId":2}')
        assert replay.status_code == 201
        assert replay.headers["idempotent-replayed"] == "true"
        assert replay.json() == young
    assert _pet_count(database_url) == 2


# In flight ----------------------------------------------------------------------------


@contextmanager
def _creates_blocked(database_url: str) -> Iterator[Callable[..., None]]:
    """Hold what the store needs to insert an animal, so a create waits in the store
    until the block ends; yields a function that returns once ``creates`` wait."""
    if database_url.startswith("sqlite"):
        conn = sqlite3.connect(database_url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        try:
            # The writer waits in SQLite's busy handler, which nothing can observe.
            yield lambda creates=1: time.sleep(0.3)
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as pg:
        pg.execute("SELECT pg_advisory_lock(%s)", (ID_ORDER_LOCK,))

        def waiting(creates: int) -> bool:
            row = pg.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            ).fetchone()
            return row is not None and row[0] >= creates

        try:
            yield lambda creates=1: _wait_for(lambda: waiting(creates))
        finally:
            pg.execute("SELECT pg_advisory_unlock(%s)", (ID_ORDER_LOCK,))


@pytest.mark.parametrize(
    "duplicate_body",
    [
        pytest.param(REX, id="same-body"),
        pytest.param(b'{"name":"Max","categoryId":2}', id="different-body"),
    ],
)
def test_a_duplicate_while_the_first_is_in_flight_is_409(
    client: TestClient, auth: dict[str, str], database_url: str, duplicate_body: bytes
) -> None:
    with ThreadPoolExecutor(max_workers=1) as pool:
        with _creates_blocked(database_url) as wait_until_blocked:
            first_future = pool.submit(_create, client, auth, "slow")
            wait_until_blocked()
            duplicate = _create(client, auth, "slow", duplicate_body)
            assert not first_future.done()
        first = first_future.result(timeout=10)
    body = _assert_error(duplicate, 409, "idempotency_conflict")
    assert "Idempotency-Key" in body["message"]
    pet = _assert_created(first)
    _assert_replay_of(_create(client, auth, "slow"), first)
    assert _listed(client, auth) == [pet]
    assert _pet_count(database_url) == 1


def test_another_key_is_not_held_up_by_one_in_flight(
    client: TestClient, auth: dict[str, str], database_url: str
) -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        with _creates_blocked(database_url) as wait_until_blocked:
            first = pool.submit(_create, client, auth, "one")
            wait_until_blocked()
            second = pool.submit(_create, client, auth, "two", b'{"name":"Max","categoryId":2}')
        ids = {_assert_created(f.result(timeout=10))["id"] for f in (first, second)}
    assert ids == {1, 2}
    assert _record_count(database_url) == 2


def _answered_later(response: httpx.Response) -> bool:
    return response.status_code != 201 or "idempotent-replayed" in response.headers


def test_a_duplicate_on_another_instance_while_in_flight_creates_nothing(
    client: TestClient, auth: dict[str, str], database_url: str, clock: FakeClock
) -> None:
    """Each instance knows only its own in-flight keys; the database still lets one
    of two concurrent creates with a key win: the other is a 409 or the replay."""
    with _app_started_at(database_url, clock) as other, ThreadPoolExecutor(max_workers=2) as pool:
        with _creates_blocked(database_url) as wait_until_blocked:
            first_future = pool.submit(_create, client, auth, "both")
            wait_until_blocked()
            duplicate_future = pool.submit(_create, other, auth, "both")
            wait_until_blocked(2)
        first = first_future.result(timeout=10)
        duplicate = duplicate_future.result(timeout=10)
    # Which of the two waiting creates commits first is the database's choice.
    created, other_answer = sorted([first, duplicate], key=_answered_later)
    pet = _assert_created(created)
    if other_answer.status_code == 409:
        _assert_error(other_answer, 409, "idempotency_conflict")
    else:
        _assert_replay_of(other_answer, created)
    assert _listed(client, auth) == [pet]
    assert _pet_count(database_url) == 1
    assert _record_count(database_url) == 1
