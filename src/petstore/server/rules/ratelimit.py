"""Per-API-key rate limits (D15) with the ``limits`` library.

Counters live in memory (one instance) or in Redis (``PETSTORE_REDIS_URL``: every
instance shares one budget): :class:`petstore.server.store.counters.Counters`.
:meth:`RateLimiter.hit` gives the future of the request's :class:`Quota`; the HTTP layer
turns it into the IETF fields of draft-ietf-httpapi-ratelimit-headers. The partition key is
the API key's id, never the key. Hits are counted a turn of the event loop at a time,
one increment per key (:class:`petstore.server.batches.TurnBatcher`), each hit still
getting its own count. When Redis cannot be reached the service fails open: it
answers, logs the fault at most once a minute, and ``/readyz`` says so. After a failed
count the store is left alone for :data:`RETRY_AFTER_FAILURE_SECONDS`, every hit
meanwhile failing open at once: a request does not wait on an unreachable store more
than once a second in each worker, and counting starts again within a second of its
return. A count that failed while the worker's event loop stood still
(:class:`~petstore.server.clock.LoopBeat`: paused, starved of the processor) may
have been cut by its own timeout expiring while the loop did not run, an answer of
the store waiting unread: it says nothing of the store, and is asked once more.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter

import msgspec
from limits import RateLimitItem, parse
from lru import LRU

from petstore.server import clock
from petstore.server.batches import TurnBatcher
from petstore.server.store.counters import Counters

log = logging.getLogger("petstore.ratelimit")
POLICY = "default"
_LOG_EVERY_SECONDS = 60.0
_KEYS_MAX = 100_000
#: Seconds after a failed count during which hits fail open without asking the store.
RETRY_AFTER_FAILURE_SECONDS = 1.0

#: Whose window a hit counts in: the API key's id, and its own limit (D22) or None
#: for the service's. A key whose limit changes gets a window of its own.
Slot = tuple[int, str | None]


class Quota(msgspec.Struct, frozen=True, kw_only=True):
    """Where one request leaves its API key's window (D15); made by keyword only (its
    members are all seconds or counts)."""

    #: Requests still allowed in the window, 0 or more.
    remaining: int
    #: Seconds until the window resets.
    reset: int
    #: Seconds to wait when this request is over the limit (then refused), else None.
    retry_after: int | None


class _Window:
    """One slot's fixed window: its counter key in the storage (which names the
    limit), the requests it allows, its length in seconds, and when the current
    window ends (epoch seconds; 0 until first asked)."""

    __slots__ = ("key", "length", "limit", "reset_at")

    def __init__(self, key: str, limit: int, length: int) -> None:
        self.key = key
        self.limit = limit
        self.length = length
        self.reset_at = 0.0


class RateLimiter:
    """Counts requests per API key in fixed windows: of ``limit``, or of a key's own
    limit (D22) when :meth:`hit` names one."""

    def __init__(
        self,
        limit: str,
        *,
        counters: Counters,
        epoch: clock.Epoch = clock.epoch,
        monotonic: clock.Monotonic = clock.monotonic,
    ) -> None:
        """``limit`` in the ``limits`` notation (``600/minute``), counted in
        ``counters``; ``epoch`` tells when a window ends (the storage states it in
        epoch seconds), ``monotonic`` when the last failure was logged. Raises
        ValueError for a bad notation."""
        self._epoch = epoch
        self._monotonic = monotonic
        self.item: RateLimitItem = parse(limit)
        #: Requests allowed per window, and the window's length in seconds.
        self.limit: int = self.item.amount
        self.window: int = self.item.get_expiry()
        self._counters = counters
        self._storage = counters.storage
        # The slots seen lately (a few thousand keys in practice), bounded.
        self._windows: LRU[Slot, _Window] = LRU(_KEYS_MAX)
        self.store_error: str | None = None
        self._logged_at = -math.inf
        self._failed_at = -math.inf
        self._hits = TurnBatcher(self._count)
        self._beat = clock.LoopBeat()

    def policy(self, own_limit: str | None = None) -> tuple[int, int]:
        """The requests a window and the window in seconds of a key with ``own_limit``
        (D22; the service's limit when None). Raises ValueError for a bad notation."""
        if own_limit is None:
            return self.limit, self.window
        item = parse(own_limit)
        return item.amount, item.get_expiry()

    def hit(self, api_key_id: int, own_limit: str | None = None) -> asyncio.Future[Quota | None]:
        """Count one request of ``api_key_id``, whose own limit is ``own_limit`` (D22;
        None for the service's): the future of where it leaves the key's window, or
        of None while the counter store is unreachable and the limiter fails open.
        The hit is counted with the others of this turn of the loop (:meth:`_count`);
        raises Unavailable once the limiter is closing."""
        slot = (api_key_id, own_limit)
        return self._hits.submit(self._windows.get(slot) or self._window_for(slot))

    async def _count(self, windows: list[_Window]) -> list[Quota | None]:
        """Count the hits of one turn of the loop (:class:`TurnBatcher`), one window
        per hit: where each hit leaves its window, or None for every hit while the
        store is unreachable (fail open).

        One ``incr`` by the number of hits per key instead of one per hit (with
        Redis, a round trip each). The counts are those of the hits one after the other: the
        window's total less the hits that follow in the batch. The window's end is
        remembered per key and asked again only when a window opens or has passed.
        """
        if self._monotonic() - self._failed_at < RETRY_AFTER_FAILURE_SECONDS:
            return [None] * len(windows)  # failed just now: not asked again yet
        amounts = Counter(windows)
        self._beat.start()
        stills = self._beat.stills
        try:
            try:
                totals = await self._ask(amounts)
            except Exception:
                if self._beat.stills == stills:
                    raise
                # Failed while this worker's loop stood still: asked once more,
                # counted twice at worst (the module says why).
                totals = await self._ask(amounts)
        except Exception as exc:  # the limiter store is down: fail open (D15)
            self._failed_at = self._monotonic()
            self.store_error = f"{type(exc).__name__}: {exc}"
            if self._monotonic() - self._logged_at > _LOG_EVERY_SECONDS:
                self._logged_at = self._monotonic()
                log.warning("rate limit store unreachable, failing open: %s", self.store_error)
            return [None] * len(windows)
        self.store_error = None
        now = self._epoch()
        # Each window's count so far and its seconds to reset, the same for its hits.
        counts = {
            window: [count, max(0, math.ceil(reset_at - now))]
            for window, (count, reset_at) in totals.items()
        }
        quotas: list[Quota | None] = []
        for window in windows:
            counted = counts[window]
            count = counted[0] = counted[0] + 1
            reset = counted[1]
            limit = window.limit
            quotas.append(
                Quota(
                    remaining=limit - count if count < limit else 0,
                    reset=reset,
                    retry_after=None if count <= limit else reset,
                )
            )
        return quotas

    async def _ask(self, amounts: Counter[_Window]) -> dict[_Window, tuple[int, float]]:
        """Add each window's ``amounts`` of hits: its count before them, and its end.
        Raises what the store raises."""
        if len(amounts) == 1:  # the usual turn: one key, and no task for a gather
            ((window, amount),) = amounts.items()
            return {window: await self._incr(window, amount)}
        incrs = (self._incr(window, amount) for window, amount in amounts.items())
        return dict(zip(amounts, await asyncio.gather(*incrs), strict=True))

    async def _incr(self, window: _Window, amount: int) -> tuple[int, float]:
        """Add ``amount`` hits to ``window``: its count before them, and its end."""
        count = await self._storage.incr(window.key, window.length, amount)
        if count == amount or window.reset_at <= self._epoch():
            window.reset_at = await self._storage.get_expiry(window.key)
        return count - amount, window.reset_at

    def _window_for(self, slot: Slot) -> _Window:
        """A new window for ``slot``, remembered. Its counter key names the limit, so
        a key whose limit changes starts a counter of its own."""
        api_key_id, own_limit = slot
        item = self.item if own_limit is None else parse(own_limit)
        window = _Window(item.key_for(POLICY, str(api_key_id)), item.amount, item.get_expiry())
        self._windows[slot] = window
        return window

    async def check(self) -> str:
        """The state of the counter store for ``/readyz``: ``ok``, or how it fails open."""
        if not self._counters.shared:
            return "ok"
        if not await self._counters.check():
            self.store_error = "no answer to PING"
        elif self.store_error is not None:
            self.store_error = None
        if self.store_error is not None:
            return f"failing open, store unreachable: {self.store_error}"
        return "ok"

    async def close(self) -> None:
        """Count the hits already submitted, then release the Redis connections, if any."""
        await self._hits.close()
        self._beat.stop()
        await self._counters.close()
