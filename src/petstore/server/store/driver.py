"""What a backend gives :class:`.queries.SQLStore`: its literal SQL
(:class:`Statements`) and a small async interface to its driver (:class:`Database`,
:class:`Transaction`).

Each backend writes every statement out in its own dialect (``?`` for SQLite,
``%s`` for psycopg); nothing is derived from another statement. Parameters are the
same on both: timestamps go through :attr:`Statements.to_db` and come back through
:attr:`Statements.from_db`; many animals or many ids go in as one JSON text
parameter, which both databases take apart in SQL (``json_each``,
``json_to_recordset``), one statement whatever their number.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, LiteralString, NamedTuple, Protocol, TypeVar

from petstore.server import errors

Row = Sequence[Any]
Params = tuple[Any, ...]
T = TypeVar("T")


class Statements(NamedTuple):
    """One backend's SQL, each statement with the parameters its comment names."""

    #: The animals of a JSON array of NewPets (``name``, ``categoryId``, ``status``),
    #: committed by the statement itself, ids drawn in id order (D9): json; rows
    #: ``id, name, category_id, status``, in any order.
    insert_pets: LiteralString
    #: One animal inside a transaction that already holds the id order: name,
    #: category_id, status; its ``id``.
    insert_pet: LiteralString
    #: What a transaction that inserts animals runs first to hold the id order
    #: (D9); None where the transaction itself does (SQLite's one writer).
    lock_id_order: LiteralString | None
    #: A keyset page (D7): after_id, limit.
    list_pets: LiteralString
    #: A keyset page of one status: status, after_id, limit.
    list_pets_of_status: LiteralString
    #: One animal: id.
    get_pet: LiteralString
    #: The animals of a JSON array of ids: json.
    get_pets: LiteralString
    #: One row: the animals' version (``Store.pets_version``); None where none is kept.
    pets_version: LiteralString | None
    #: api_key_id, key, expired_before.
    delete_expired_claim: LiteralString
    #: api_key_id, key, fingerprint, pet_id, response, created_at; a row when stored.
    insert_claim: LiteralString
    #: api_key_id, key.
    select_claim: LiteralString
    #: api_key_id, key, created_after.
    find_idempotency_record: LiteralString
    #: created_before; deletes.
    purge_idempotency_records: LiteralString
    #: name, prefix, key_hash, created_at, expires_at, scopes, rate_limit; the key's row.
    insert_api_key: LiteralString
    list_api_keys: LiteralString
    #: revoked_at, id; a row when a key was revoked.
    revoke_api_key: LiteralString
    #: prefix.
    find_api_keys: LiteralString
    #: now.
    count_active_api_keys: LiteralString
    #: One row: whether the migrations' version table exists.
    schema_exists: LiteralString
    schema_revision: LiteralString
    #: An aware datetime as a parameter.
    to_db: Callable[[datetime], Any]
    #: A stored timestamp (or NULL) as an aware datetime (or None).
    from_db: Callable[[Any], datetime | None]


class Transaction(Protocol):
    """Statements inside one transaction of :meth:`Database.in_transaction`."""

    async def fetch(self, statement: LiteralString, params: Params = ()) -> list[Row]:
        """Run ``statement``; its rows (none for a statement without)."""
        ...


class Database(Protocol):
    """One database through one driver. Every method raises ``errors.Unavailable``
    when the database cannot be used now (D10, D25): not open, unreachable, no
    answer within the bound."""

    statements: Statements

    async def open(self) -> None:
        """Connect; raises ``errors.Unavailable`` (SQLite: ``sqlite3.Error``)."""
        ...

    def read(self, statement: LiteralString, params: Params = ()) -> Awaitable[list[Row]]:
        """The rows of one SELECT."""
        ...

    def write(self, statement: LiteralString, params: Params = ()) -> Awaitable[list[Row]]:
        """The rows of one statement that commits on its own, durable once awaited.
        An awaitable, not a coroutine: SQLite hands back its writer thread's future
        itself, so that a caller that only waits for it (group commit) needs no task."""
        ...

    def in_transaction(self, work: Callable[[Transaction], Awaitable[T]]) -> Awaitable[T]:
        """``work``'s result, its statements committed together, durable on return;
        rolled back when it raises (and what it raised raised again)."""
        ...

    def stats(self) -> dict[str, int]:
        """Connection figures: ``size``, ``available``, ``requests_waiting``."""
        ...

    async def close(self) -> None:
        """Release every connection; safe without open and twice."""
        ...


class Reachable:
    """``with reachable:`` turns the driver errors of ``unavailable`` (types, never
    message text) into ``errors.Unavailable`` (503 with Retry-After, D10, D25): the
    database cannot be used now, and a retry shortly may succeed."""

    __slots__ = ("_unavailable",)

    def __init__(self, *unavailable: type[BaseException]) -> None:
        self._unavailable = unavailable

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if kind is not None and issubclass(kind, self._unavailable):
            raise errors.Unavailable("the database is unavailable; retry shortly") from exc
