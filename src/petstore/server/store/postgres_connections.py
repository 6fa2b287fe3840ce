"""The PostgreSQL store's connections: the libpq options of every one (D25), what
their errors mean (:data:`reachable`), how a call past its deadline lets go of
its connection (:class:`Call`, :func:`cut`), and how a primary that may have been
replaced is refused (:data:`SERVES`, D27)."""

from __future__ import annotations

import os
import socket
from typing import Any, LiteralString

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import DictRow, dict_row
from psycopg_pool import PoolTimeout

from petstore.server.clock import monotonic
from petstore.server.store.driver import NONE, Params, Reachable
from petstore.server.store.rows import Row

#: One row, ``serves``: false on a primary that has synchronous standbys set
#: (``synchronous_standby_names``, as pg_auto_failover sets it for D26) and streams
#: WAL to none. Such a primary may be cut off from the monitor and its secondaries
#: while the instances still reach it, and the monitor promotes a secondary 5 s
#: after it lost the primary (deploy/postgres/monitor.conf): from then on the old
#: primary's answers are stale, and pg_auto_failover's keeper does not stop it
#: while the cut lasts (docs/reliability.md). The data nodes' ``wal_sender_timeout``
#: (2 s, deploy/postgres/node.conf) ends its WAL senders within 2 s of the cut, well
#: before the promotion. Any role may count the WAL senders (their details are the
#: privileged roles'). A primary without synchronous standbys (one node, or
#: pg_auto_failover's ``wait_primary``) always serves.
SERVES = (
    "SELECT current_setting('synchronous_standby_names') = '' "
    "OR EXISTS (SELECT FROM pg_stat_get_wal_senders()) AS serves"
)
#: How long (seconds) a connection's answer to :data:`SERVES` holds before its next
#: statement asks again: the cut's 2 s plus this stays well within the monitor's 5 s.
SERVES_FOR = 0.5


class NotPrimary(psycopg.OperationalError):
    """The server answered false to :data:`SERVES` (D27): its connection is closed."""


class Connection(psycopg.AsyncConnection[Any]):
    """A pooled connection, and the one cursor its statements run on
    (:attr:`cursor_for_statements`, made by :meth:`keep_a_cursor` when the pool
    opens it): a cursor made once keeps what it learnt of its queries, their
    parameters' and results' types, where a new cursor per statement looks them up
    again. Its rows are mappings by column name. A connection runs one statement at
    a time, lent to one call at a time. Its server is asked :data:`SERVES` before
    its first statement and then at most every :data:`SERVES_FOR` seconds."""

    cursor_for_statements: psycopg.AsyncCursor[DictRow]
    #: Until when (``clock.monotonic()``) the server's last :data:`SERVES` holds.
    serves_until = 0.0
    #: Told when the server answers :data:`SERVES` false, if set.
    hosts: HostOrder | None = None

    def keep_a_cursor(self, hosts: HostOrder | None = None) -> None:
        """Make the cursor every statement on this connection runs on; ``hosts`` is
        told of a server that does not serve (:meth:`fetch`)."""
        self.cursor_for_statements = self.cursor(row_factory=dict_row)
        self.hosts = hosts

    async def fetch(self, statement: LiteralString, params: Params = NONE) -> list[Row]:
        """Run ``statement`` on :attr:`cursor_for_statements`; its rows (none for a
        statement without). Inside ``transaction()``, a ``driver.Transaction``.
        Raises :class:`NotPrimary`, having run nothing, when the server answers
        :data:`SERVES` false (asked when the last answer is older than
        :data:`SERVES_FOR`)."""
        if self.serves_until < monotonic():
            await self._ask_serves()
        return await rows_of(await self.cursor_for_statements.execute(statement, params))

    async def _ask_serves(self) -> None:
        (row,) = await rows_of(await self.cursor_for_statements.execute(SERVES))
        if not row["serves"]:
            server = (self.info.host, str(self.info.port))
            if self.hosts is not None:
                self.hosts.refused = server
            await self.close()  # the pool drops it and connects anew
            raise NotPrimary(f"{server[0]}:{server[1]} streams to no standby; it may be replaced")
        self.serves_until = monotonic() + SERVES_FOR


#: libpq options on every PostgreSQL connection (D25): the pool's, the probe's and
#: the migrations'. A peer that vanishes without a FIN (a host cut off, powered off)
#: is noticed by TCP: an idle connection after 2 s without traffic and 3 unanswered
#: probes 1 s apart (5 s), one with data unacknowledged after 5 s
#: (``tcp_user_timeout``, ms), instead of TCP's retransmission timeout (about 15
#: minutes on Linux). 5 s is within the store's ``timeout`` (5 s by default) plus a
#: margin, and far above a loopback or LAN round trip, so a busy but live server is
#: never taken for dead. A value the operator put in the URL wins.
KEEPALIVES: dict[str, str] = {
    "keepalives": "1",
    "keepalives_idle": "2",
    "keepalives_interval": "1",
    "keepalives_count": "3",
    "tcp_user_timeout": "5000",
}

#: The server's own bound on the service's sessions (D25, D27): a transaction whose
#: client stops sending (its host cut off or paused after a statement, before its
#: COMMIT) is ended by the server after 2 s. Until then it holds what it locked, and a
#: create holds the lock that keeps ids in commit order, which every other create
#: waits for. Between two statements of the service's transactions there is no wait
#: on anything but the network. Not for the migrations, which may pause longer.
SERVICE_SESSION: dict[str, str] = {"options": "-c idle_in_transaction_session_timeout=2000"}

#: PostgreSQL's "database not usable now" (D10, D25): a connection refused or lost,
#: no pooled connection within the timeout (or a pool not open), a statement
#: cancelled by ``statement_timeout``, a transaction ended by the server after
#: :data:`SERVICE_SESSION`'s bound (rolled back), a missing table (a database not
#: migrated).
reachable = Reachable(
    psycopg.OperationalError,
    psycopg.errors.IdleInTransactionSessionTimeout,
    psycopg.errors.UndefinedTable,
    PoolTimeout,
)


def connection_options(
    url: str, *, defaults: dict[str, str] = KEEPALIVES, **options: Any
) -> dict[str, Any]:
    """The keyword arguments for ``psycopg.connect(url, ...)``: ``options``, then
    ``defaults`` (:data:`KEEPALIVES`; the service's pool adds :data:`SERVICE_SESSION`)
    except those the libpq ``url`` (or conninfo string) already sets. Raises
    psycopg.ProgrammingError for a URL libpq cannot parse."""
    given = conninfo_to_dict(url)
    return {**{k: v for k, v in defaults.items() if k not in given}, **options}


class HostOrder:
    """A new connection's options, for the pool's ``kwargs`` (an async callable):
    ``options``, with the server :attr:`refused` (host and port as libpq names them,
    set by a :class:`Connection`) last among the hosts of ``url`` until another is."""

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        self._url, self._options = url, options
        self.refused: tuple[str, str] | None = None

    async def __call__(self) -> dict[str, Any]:
        """The keyword arguments of the next ``connect``."""
        if self.refused is None:
            return self._options
        return {**self._options, **host_last(self._url, self.refused)}


def host_last(url: str, refused: tuple[str, str]) -> dict[str, str]:
    """libpq's ``host``, ``hostaddr`` and ``port`` of the multi-host ``url`` with the
    server ``refused`` (host, port, as a :class:`Connection` records it) moved last, so
    that a new connection tries the others first; empty for a URL of one host."""
    given = conninfo_to_dict(url)
    hosts = str(given.get("host", "")).split(",")
    if len(hosts) < 2:
        return {}
    keys = [key for key in ("host", "hostaddr", "port") if key in given]
    lists = {key: str(given[key]).split(",") for key in keys}
    lists = {key: items * len(hosts) if len(items) == 1 else items for key, items in lists.items()}
    ports = [port or "5432" for port in lists.get("port", [""] * len(hosts))]
    order = sorted(range(len(hosts)), key=lambda i: (hosts[i], ports[i]) == refused)
    return {key: ",".join(items[i] for i in order) for key, items in lists.items()}


async def rows_of(cursor: psycopg.AsyncCursor[Any]) -> list[Row]:
    """The rows of ``cursor``'s last statement (none for one that returns none)."""
    return list(await cursor.fetchall()) if returns_rows(cursor) else []


def returns_rows(cursor: psycopg.AsyncCursor[Any]) -> bool:
    """Whether ``cursor``'s last statement returned rows (a ``SELECT``, a ``RETURNING``),
    none for a ``DELETE`` without ``RETURNING``: its result's column count, read as
    it is (``cursor.description`` builds a column object for each)."""
    result = cursor.pgresult
    return result is not None and result.nfields > 0


class NoAnswer(psycopg.OperationalError):
    """A connection was lent only after its call's deadline (D25)."""


class Call:
    """One bounded call: the connection it is using, if any, and whether its deadline
    has passed."""

    __slots__ = ("conn", "expired")

    def __init__(self) -> None:
        self.conn: Connection | None = None
        self.expired = False

    def cut(self) -> None:
        """Past the deadline: cut the connection in use, if any (:func:`cut`)."""
        self.expired = True
        if self.conn is not None:
            cut(self.conn)


def cut(conn: Connection) -> None:
    """Shut ``conn``'s socket down, both ways: whatever waits on it reads end of file
    at once and fails with an OperationalError, the connection then broken and
    dropped by the pool. Not ``close``: the event loop still watches the descriptor.
    Not ``cancel``: see ``postgres_pool.PostgresDatabase._bounded``."""
    if conn.closed:
        return
    with socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
        sock.shutdown(socket.SHUT_RDWR)


def as_unavailable(exc: BaseException) -> BaseException:
    """``exc``, or ``errors.Unavailable`` caused by it when it is one of the driver's
    errors of :data:`reachable`."""
    try:
        with reachable:
            raise exc
    except BaseException as raised:
        return raised
