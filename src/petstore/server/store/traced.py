"""Database spans (D23): :class:`TracedDatabase` gives each statement a request runs a
child span of the request's span, at the driver's seam, so every repository method,
those added later included, is traced with no edit here.

A span is named ``<operation> <table>`` (``SELECT pets``), both read off the
statement's own text, with the OpenTelemetry database semantic-convention attributes
(``db.system.name``, ``db.operation.name``, ``db.collection.name``). Statements a
speed device runs for several requests at once (a group commit, grouped reads) are
spans of the request that started them; an answer a device gives from memory runs no
statement and has no span.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager, nullcontext
from functools import lru_cache
from typing import TYPE_CHECKING, LiteralString, TypeVar

from petstore.server.store.driver import NONE, Database, Params, Transaction, transactions
from petstore.server.store.rows import Row

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

T = TypeVar("T")

#: What a statement writes: ``INSERT INTO t``, ``UPDATE t`` or ``DELETE FROM t``,
#: also inside a ``WITH``.
_WRITE = re.compile(r"\b(INSERT)\s+INTO\s+(\w+)|\b(UPDATE)\s+(\w+)|\b(DELETE)\s+FROM\s+(\w+)", re.I)
#: The first table a query reads (a function call in ``FROM`` is no table).
_READ = re.compile(r"\bFROM\s+(\w+)\b(?!\s*\()", re.I)


@lru_cache(maxsize=256)  # statements are the dialects' constants: a few dozen
def span_name(statement: str) -> tuple[str, str]:
    """``(operation, table)`` of a statement: the write it makes (``INSERT``,
    ``UPDATE``, ``DELETE``) and its table, else its first keyword, upper case, and the
    first table it reads (``""`` when it reads none)."""
    written = _WRITE.search(statement)
    if written is not None:
        operation, table = (part for part in written.groups() if part is not None)
        return operation.upper(), table
    read = _READ.search(statement)
    return statement.split(None, 1)[0].upper(), "" if read is None else read.group(1)


class TracedDatabase:
    """``inner`` (a :class:`.driver.Database`) with a span around each statement, for
    the ``tracer``."""

    def __init__(self, inner: Database, tracer: Tracer) -> None:
        self.inner = inner
        self.system = inner.system
        self._tracer = tracer
        self._transactions = transactions(inner)

    def _span(self, statement: str) -> AbstractContextManager[object]:
        from opentelemetry.trace import get_current_span

        if not get_current_span().is_recording():  # no request span, or not sampled
            return nullcontext()
        return self._recording(*span_name(statement))

    @contextmanager
    def _recording(self, operation: str, table: str) -> Iterator[object]:
        from opentelemetry.trace import SpanKind

        attributes = {"db.system.name": self.system, "db.operation.name": operation}
        if table:
            attributes["db.collection.name"] = table
        with self._tracer.start_as_current_span(
            f"{operation} {table}".strip(), kind=SpanKind.CLIENT, attributes=attributes
        ) as span:
            yield span

    async def open(self) -> None:
        """``Database.open`` of the database traced."""
        await self.inner.open()

    async def read(self, statement: LiteralString, params: Params = NONE) -> list[Row]:
        """``Database.read``, in a span."""
        with self._span(statement):
            return await self.inner.read(statement, params)

    async def write(
        self,
        statement: LiteralString,
        params: Params = NONE,
        *,
        first: LiteralString | None = None,
    ) -> list[Row]:
        """``Database.write``, in a span (named for ``statement``)."""
        with self._span(statement):
            return await self.inner.write(statement, params, first=first)

    async def in_transaction(self, work: Callable[[Transaction], Awaitable[T]]) -> T:
        """``Database.in_transaction``, a span around each of ``work``'s statements."""
        return await self.inner.in_transaction(lambda tx: work(_TracedTransaction(tx, self)))

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        """A transaction of the database traced as a block (``driver.transactions``),
        a span around each of its statements."""
        async with self._transactions() as tx:
            yield _TracedTransaction(tx, self)

    def stats(self) -> dict[str, int]:
        """``Database.stats`` of the database traced."""
        return self.inner.stats()

    async def close(self) -> None:
        """``Database.close`` of the database traced."""
        await self.inner.close()


class _TracedTransaction:
    """``inner`` with a span of ``database``'s around each statement."""

    def __init__(self, inner: Transaction, database: TracedDatabase) -> None:
        self._inner = inner
        self._database = database

    async def fetch(self, statement: LiteralString, params: Params = NONE) -> list[Row]:
        with self._database._span(statement):
            return await self._inner.fetch(statement, params)
