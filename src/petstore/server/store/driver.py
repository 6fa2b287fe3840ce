"""What a backend gives the repositories: a small async interface to its driver
(:class:`Database`, :class:`Transaction`), over which each repository is written once.

Statements are each backend's literal SQL (``store.sqlite``, ``store.postgres``), with
named parameters (SQLite's ``:name``, psycopg's ``%(name)s``) given as a mapping; a
row comes back as a mapping of the names its statement gave the columns
(:mod:`.rows`). Timestamps go in through the dialect's ``to_db``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, LiteralString, Protocol, TypeVar

from petstore.server import errors
from petstore.server.store.rows import Row

#: A statement's named parameters.
Params = Mapping[str, Any]
T = TypeVar("T")

#: No parameters.
NONE: Params = {}


class Transaction(Protocol):
    """Statements inside one transaction of :meth:`Database.in_transaction`."""

    async def fetch(self, statement: LiteralString, params: Params = NONE) -> list[Row]:
        """Run ``statement``; its rows (none for a statement without)."""
        ...


class Database(Protocol):
    """One database through one driver. Every method raises ``errors.Unavailable``
    when the database cannot be used now (D10, D25): not open, unreachable, no
    answer within the bound. ``system`` is its OpenTelemetry ``db.system.name``."""

    system: str

    async def open(self) -> None:
        """Connect; raises ``errors.Unavailable`` (SQLite: ``sqlite3.Error``)."""
        ...

    async def read(self, statement: LiteralString, params: Params = NONE) -> list[Row]:
        """The rows of one SELECT."""
        ...

    async def write(
        self,
        statement: LiteralString,
        params: Params = NONE,
        *,
        first: LiteralString | None = None,
    ) -> list[Row]:
        """The rows of one statement, committed, durable once returned. With
        ``first``, a query run before it in the same transaction, whose one row's
        columns join ``params``."""
        ...

    async def in_transaction(self, work: Callable[[Transaction], Awaitable[T]]) -> T:
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
