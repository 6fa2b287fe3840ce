"""Per-API-key rate limits (D15) with the ``limits`` library.

Counters live in memory (one instance) or in Redis (``PETSTORE_REDIS_URL``: every
instance shares one budget). Every ``/v1/pets`` response carries the IETF fields of
draft-ietf-httpapi-ratelimit-headers; the partition key is the API key's id, never
the key. When Redis cannot be reached the service fails open: it answers, logs the
fault at most once a minute, and ``/readyz`` says so.
"""

from __future__ import annotations

import logging
import math
import time

from limits import RateLimitItem, parse
from limits.aio.storage import RedisStorage
from limits.aio.strategies import FixedWindowRateLimiter
from limits.storage import MemoryStorage
from redis.asyncio import ConnectionPool

log = logging.getLogger("petstore.ratelimit")
POLICY = "default"
_LOG_EVERY_SECONDS = 60.0


class RateLimiter:
    """Counts requests per API key in fixed windows of the configured limit."""

    def __init__(self, limit: str, *, redis_url: str | None = None) -> None:
        self.item: RateLimitItem = parse(limit)
        # In memory the synchronous storage is used: no I/O, so no coroutine to pay for.
        self._memory: MemoryStorage | None = None
        self._shared: FixedWindowRateLimiter | None = None
        self._redis: RedisStorage | None = None
        # Our own pool, so shutdown can close its connections (limits has no close).
        self._redis_pool: ConnectionPool | None = None
        if redis_url:
            self._redis_pool = ConnectionPool.from_url(
                redis_url, socket_timeout=0.25, socket_connect_timeout=0.25
            )
            self._redis = RedisStorage(
                f"async+{redis_url}",
                implementation="redispy",
                connection_pool=self._redis_pool,  # type: ignore[arg-type]  # passed through
            )
            self._shared = FixedWindowRateLimiter(self._redis)
        else:
            self._memory = MemoryStorage()
        window = self.item.get_expiry()
        self.policy_header = f'"{POLICY}";q={self.item.amount};w={window}'
        self.store_error: str | None = None
        self._logged_at = -math.inf

    async def hit(self, api_key_id: int) -> tuple[dict[str, str], int | None]:
        """Count one request of ``api_key_id``: the RateLimit headers to send, and the
        seconds to wait when the window's budget is spent (None while within it)."""
        headers = {"RateLimit-Policy": self.policy_header}
        partition = str(api_key_id)
        if self._memory is not None:
            # The fixed-window strategy's own steps, with the key built once: this
            # runs on every request. Counts past the limit are not added (as ``hit``).
            key = self.item.key_for(POLICY, partition)
            storage = self._memory
            count = storage.incr(key, self.item.get_expiry())
            if count > self.item.amount:
                storage.decr(key)
            reset = max(0, math.ceil(storage.get_expiry(key) - time.time()))
            remaining = max(0, self.item.amount - count)
            headers["RateLimit"] = f'"{POLICY}";r={remaining};t={reset}'
            return headers, None if count <= self.item.amount else reset
        assert self._shared is not None
        try:
            allowed = await self._shared.hit(self.item, POLICY, partition)
            stats = await self._shared.get_window_stats(self.item, POLICY, partition)
        except Exception as exc:  # the limiter store is down: fail open (D15)
            self.store_error = f"{type(exc).__name__}: {exc}"
            if time.monotonic() - self._logged_at > _LOG_EVERY_SECONDS:
                self._logged_at = time.monotonic()
                log.warning("rate limit store unreachable, failing open: %s", self.store_error)
            return headers, None
        self.store_error = None
        reset = max(0, math.ceil(stats.reset_time - time.time()))
        headers["RateLimit"] = f'"{POLICY}";r={stats.remaining};t={reset}'
        return headers, None if allowed else reset

    async def check(self) -> str:
        """The state of the counter store for ``/readyz``: ``ok``, or how it fails open."""
        if self._redis is None:
            return "ok"
        if not await self._redis.check():
            self.store_error = "no answer to PING"
        elif self.store_error is not None:
            self.store_error = None
        if self.store_error is not None:
            return f"failing open, store unreachable: {self.store_error}"
        return "ok"

    async def close(self) -> None:
        """Release the Redis connections, if any."""
        if self._redis_pool is not None:
            await self._redis_pool.aclose()
