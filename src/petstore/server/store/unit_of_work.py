"""The unit of work: ``async with store.transaction() as tx:`` (``Store.transaction``)
hands out the repositories bound to one transaction, :attr:`UnitOfWork.pets` and
:attr:`UnitOfWork.idempotency`, and is the one place a write that changes stored
animals becomes visible to answers kept in memory (:mod:`.changes`).

A transaction moves the store's change signal once it has ended, committed or rolled
back (a commit whose outcome is unknown may have happened), unless each of its
statements was one that :func:`keeping_animals` lists: adding an animal, whose id is
drawn above every committed one (D5, D9), and an idempotency record's (D16). The
signal watches the statements, not the methods, so a write method added to a
repository of the unit of work moves it with no edit here, and an add cannot stand
in for a change by mistake.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, LiteralString

from petstore.server.store.changes import PetChanges
from petstore.server.store.driver import NONE, Params, Transaction
from petstore.server.store.idempotency_records import IdempotencyRecordsInTransaction
from petstore.server.store.pets import PetsInTransaction
from petstore.server.store.rows import Row

if TYPE_CHECKING:
    from petstore.server.store import Dialect


def keeping_animals(dialect: Dialect) -> frozenset[str]:
    """The statements of ``dialect`` that change no stored animal: a transaction of
    only these moves no change signal."""
    records = dialect.idempotency_records
    return frozenset({dialect.pets.insert, records.delete_expired, records.insert})


class _Watched:
    """``tx``, noting whether a statement not in ``keeping`` ran on it."""

    __slots__ = ("_keeping", "_tx", "changes_animals")

    def __init__(self, tx: Transaction, keeping: frozenset[str]) -> None:
        self._tx = tx
        self._keeping = keeping
        self.changes_animals = False

    def fetch(
        self, statement: LiteralString, params: Params = NONE
    ) -> Coroutine[Any, Any, list[Row]]:
        # The inner coroutine itself, not one more around it: a frame less a statement.
        if statement not in self._keeping:
            self.changes_animals = True
        return self._tx.fetch(statement, params)


class UnitOfWork:
    """The repositories of one transaction ``tx`` (each write of theirs committed with
    the rest of it, or rolled back with it), in ``dialect``'s SQL; ``keeping`` is
    :func:`keeping_animals` of it. Made by ``Store.transaction`` only."""

    __slots__ = ("_tx", "idempotency", "pets")

    def __init__(self, tx: Transaction, dialect: Dialect, *, keeping: frozenset[str]) -> None:
        self._tx = _Watched(tx, keeping)
        #: The animals (:class:`.pets.PetsInTransaction`).
        self.pets = PetsInTransaction(self._tx, sql=dialect.pets)
        #: The idempotency records (:class:`.idempotency_records.IdempotencyRecordsInTransaction`).
        self.idempotency = IdempotencyRecordsInTransaction(
            self._tx, sql=dialect.idempotency_records, to_db=dialect.to_db
        )

    @property
    def changes_animals(self) -> bool:
        """Whether a statement that may change stored animals ran (the signal then moves)."""
        return self._tx.changes_animals


class Transactions:
    """What ``Store.transaction`` hands out: each call a block (``async with``) of one
    transaction begun by ``begin`` (``driver.transactions``), whose :class:`UnitOfWork`
    speaks ``dialect``; once the transaction has ended, either way, ``changes`` moves
    if a statement not in ``keeping`` (:func:`keeping_animals`) ran."""

    def __init__(
        self,
        begin: Callable[[], AbstractAsyncContextManager[Transaction]],
        dialect: Dialect,
        *,
        changes: PetChanges,
    ) -> None:
        self._begin = begin
        self._dialect = dialect
        self._keeping = keeping_animals(dialect)
        self._changes = changes

    def __call__(self) -> _Block:
        return _Block(self)


class _Block:
    """One ``async with store.transaction() as tx:``."""

    __slots__ = ("_of", "_transaction", "_work")

    def __init__(self, of: Transactions) -> None:
        self._of = of
        self._work: UnitOfWork | None = None

    async def __aenter__(self) -> UnitOfWork:
        of = self._of
        self._transaction = of._begin()
        tx = await self._transaction.__aenter__()
        self._work = UnitOfWork(tx, of._dialect, keeping=of._keeping)
        return self._work

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        try:
            return await self._transaction.__aexit__(kind, exc, traceback)
        finally:
            if self._work is not None and self._work.changes_animals:
                self._of._changes.changed()
