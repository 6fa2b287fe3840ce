"""The store's change signal: what every answer kept in memory is checked against.

:class:`PetChanges` holds a *generation*, a count that moves whenever an answer read
before may no longer be the database's:

- every write through this store that changes or removes stored animals moves it
  once its transaction has ended (the store's unit of work, ``Store.transaction``,
  the only way to make such writes: :mod:`.unit_of_work`), so this instance never
  answers what it changed as it was;
- a change made anywhere else moves it once seen: through another instance, or
  outside the service (an operator's ``UPDATE`` or ``DELETE`` in SQL, a restore, a
  failover). The database counts those in its *version* (triggers on ``pets``,
  migrations 0004 and 0005; PostgreSQL adds the table's identity and the server's
  start), and the signal *looks* at it in the background, at most every
  :data:`LOOK_SECONDS`, while answers are being kept. A version that moved moves the
  generation.

Adding animals moves nothing: the store hands out each new id above every committed
one (D5, D9), so a new animal is no kept animal (only found ones are kept) and lies
past every kept page (only pages that more animals follow are kept).

An answer is stamped (:meth:`stamp`) before it is read, and good (:meth:`holds`) while
the generation is the stamp's and less than :data:`KEPT_SECONDS` have passed since the
later of its read and the latest look that found the version unchanged. So a change
through this store shows at once on this instance, and any other change within
:data:`KEPT_SECONDS` (5 s) on every instance. Time comes from the injected ``monotonic``
clock, in seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from petstore.server import errors
from petstore.server.clock import Monotonic

#: Seconds an answer is good after the read or look that vouches for it: the longest
#: a change made elsewhere goes unseen by an instance.
KEPT_SECONDS = 5.0
#: Seconds between two looks at the database's version, at least.
LOOK_SECONDS = 1.0


class Stamp(NamedTuple):
    """When an answer was read: the generation and the monotonic time, in seconds."""

    generation: int
    read_at: float


class PetChanges:
    """The change signal of one store, as the module says; ``version`` reads the
    database's version of the animals (None where it keeps none)."""

    def __init__(
        self,
        version: Callable[[], Awaitable[tuple[Any, ...] | None]],
        *,
        monotonic: Monotonic,
    ) -> None:
        self._version = version
        self._now = monotonic
        self.generation = 0
        self._seen: tuple[Any, ...] | None = None  # the version as of the latest look
        self._looked = -math.inf  # when the latest look that found it unchanged was sent
        self._sent = -math.inf  # when the latest look was sent
        self._looking: asyncio.Task[None] | None = None

    def changed(self) -> None:
        """Stored animals were (or may have been) changed through this store: every
        answer stamped before is no longer good."""
        self.generation += 1

    def stamp(self) -> Stamp:
        """The stamp of an answer about to be read."""
        now = self._now()
        self._look_if_due(now)
        return Stamp(self.generation, now)

    def holds(self, stamp: Stamp) -> bool:
        """Whether an answer read with ``stamp`` is still good now (the module says when)."""
        return stamp.generation == self.generation and self.fresh(stamp.read_at)

    def fresh(self, read_at: float) -> bool:
        """Whether an answer of the current generation read at ``read_at`` (monotonic
        seconds) is still good now: :meth:`holds` for a caller that has checked the
        generation itself (kept animals check it once for all of them)."""
        now = self._now()
        self._look_if_due(now)
        return now - max(read_at, self._looked) < KEPT_SECONDS

    def _look_if_due(self, now: float) -> None:
        if self._looking is None and now - self._sent >= LOOK_SECONDS:
            self._sent = now
            self._looking = asyncio.ensure_future(self._look(now))

    async def _look(self, sent: float) -> None:
        """Read the version. One not seen before (the first, or one that moved) moves
        the generation: nothing read before it is vouched for. The same as before, and
        every answer of this generation is vouched for as of ``sent``. A database that
        cannot say (none kept, or unreachable) vouches for nothing."""
        try:
            version = await self._version()
        except errors.Unavailable:
            return
        finally:
            self._looking = None
        if version is None:
            return
        if version != self._seen:
            self._seen = version
            self.changed()
        else:
            self._looked = max(self._looked, sent)

    async def settled(self) -> None:
        """Once the look in progress, if any, is done (tests)."""
        if self._looking is not None:
            await asyncio.wait([self._looking])

    async def close(self) -> None:
        """Stop looking."""
        if self._looking is not None:
            self._looking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._looking
