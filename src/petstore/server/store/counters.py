"""Where the rate-limit counters live (D15): in this process's memory (one instance),
or in Redis (``PETSTORE_REDIS_URL``: every instance shares one budget).

The ``limits`` library counts; this module only chooses and owns its storage, so that
the rules (:mod:`petstore.server.rules.ratelimit`) import no driver. A Redis that
does not answer within :data:`REDIS_TIMEOUT_SECONDS` (a new connection's handshakes,
then its setup, within :data:`REDIS_CONNECT_SECONDS` each) is a failed call, which the
rate limiter turns into failing open; a call on a connection Redis has closed is tried
once more on a new one (:data:`REDIS_RETRY`).
"""

from __future__ import annotations

import asyncio
import socket

from limits.aio.storage import MemoryStorage, RedisStorage, Storage
from redis.asyncio import ConnectionPool
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

#: How long one Redis call on an open connection may take: a limit check must never
#: hold a request up for long (D15 fails open instead).
REDIS_TIMEOUT_SECONDS = 0.25
#: How long a new connection's handshakes may take, TCP's and TLS's (rediss://), and
#: then, as long again, its setup: the AUTH (or HELLO), a PING and the client's name
#: and version (``CLIENT SETINFO``), a few round trips and a signature check that a
#: busy host, or a new worker's first busy seconds, can stretch past a call's 0.25 s
#: (:func:`_set_up`). After a failure the rate limiter leaves Redis alone for a
#: second (``rules.ratelimit``), so an unreachable Redis costs a request this at most
#: once a second per worker.
REDIS_CONNECT_SECONDS = 1.0
#: D25: a Redis host that vanishes without a FIN is noticed by TCP as PostgreSQL's is
#: (``postgres_connections.KEEPALIVES``): an idle connection after 2 s and 3 probes 1 s
#: apart, one with data unacknowledged after 2 s. A call fails open after
#: :data:`REDIS_TIMEOUT_SECONDS` anyway; these free the dead connection itself.
REDIS_KEEPALIVE_OPTIONS = {
    socket.TCP_KEEPIDLE: 2,
    socket.TCP_KEEPINTVL: 1,
    socket.TCP_KEEPCNT: 3,
    socket.TCP_USER_TIMEOUT: 2000,
}
#: A call whose connection turns out closed (Redis restarted or closed it while it sat
#: in the pool: "Connection lost", "reset by peer") is tried once more on a new
#: connection, at once. Without it each connection opened before a Redis restart fails
#: the first count it is taken for, however long Redis has been back, and the worker
#: fails open for a second (``rules.ratelimit``). A timeout is not tried again: a Redis
#: that does not answer costs a request one wait, not two. A call cut after Redis
#: counted it is counted twice: one hit too many, never one too few.
REDIS_RETRY = Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,))
#: Seconds a pooled Redis connection may sit idle before it is tested (a PING) when
#: next taken: only after a quiet spell, so it adds no round trip under load.
REDIS_HEALTH_CHECK_SECONDS = 30


async def _set_up(connection: AbstractConnection) -> None:
    """Set up a new Redis ``connection`` (redis-py's own ``on_connect``: AUTH, PING,
    ``CLIENT SETINFO``, SELECT) within :data:`REDIS_CONNECT_SECONDS` in all, instead
    of :data:`REDIS_TIMEOUT_SECONDS` for each reply. Raises redis-py's TimeoutError
    when it takes longer (redis-py then closes the connection), and what
    ``on_connect`` raises."""
    call_timeout, connection.socket_timeout = connection.socket_timeout, None
    try:
        async with asyncio.timeout(REDIS_CONNECT_SECONDS):
            await connection.on_connect()
    except TimeoutError as exc:  # asyncio's, not a RedisError: said as redis-py's
        raise RedisTimeoutError("Timeout setting up a new connection") from exc
    finally:
        connection.socket_timeout = call_timeout


class Counters:
    """The counters' storage and what owning it takes: a health check and a close."""

    def __init__(self, redis_url: str | None = None) -> None:
        """Counters in Redis at ``redis_url`` (``redis://host:port/db``), or in memory
        when None. Nothing connects until the first count."""
        self._redis: RedisStorage | None = None
        # Our own pool, so shutdown can close its connections (limits has no close).
        self._pool: ConnectionPool | None = None
        if redis_url:
            self._pool = ConnectionPool.from_url(
                redis_url,
                socket_timeout=REDIS_TIMEOUT_SECONDS,
                socket_connect_timeout=REDIS_CONNECT_SECONDS,
                socket_keepalive=True,
                socket_keepalive_options=REDIS_KEEPALIVE_OPTIONS,
                health_check_interval=REDIS_HEALTH_CHECK_SECONDS,
                retry=REDIS_RETRY,
                redis_connect_func=_set_up,
            )
            self._redis = RedisStorage(
                f"async+{redis_url}",
                implementation="redispy",
                connection_pool=self._pool,  # type: ignore[arg-type]  # passed through
            )
        # limits' asyncio memory storage: its synchronous one starts a thread every
        # 10 ms under load to expire counters, which costs far more than a coroutine.
        self.storage: Storage = self._redis or MemoryStorage()

    @property
    def shared(self) -> bool:
        """True when the counters are in Redis, shared by every instance."""
        return self._redis is not None

    async def check(self) -> bool:
        """True when the storage answers (memory always does; Redis to a PING)."""
        return self._redis is None or bool(await self._redis.check())

    async def close(self) -> None:
        """Release the Redis connections, if any."""
        if self._pool is not None:
            await self._pool.aclose()
