"""Kept pages, a speed device (``PETSTORE_KEEP_ANSWERS``): a listPets page that more
animals follow is answered again from memory for a few seconds, encoded, with the
cursor of the page after it.

Such a page never changes through the API: animals are never changed or removed (the
interface has no such operation), and every new id is above every committed one (D5,
D9), so a new animal can only extend the last page. The last page is never kept, so
new animals show at once. A change made outside the API is seen within
:data:`~petstore.server.store.kept_pets.KEPT_SECONDS` of the read that fetched the
page (docs/operations/run.md, "What an instance keeps in memory").

Pages are kept by the request's status, limit and cursor as sent: a page is kept
only after :class:`~petstore.server.rules.pagination.Pages` answered it, so a cursor
found here was verified for that status when it was first asked.
"""

from __future__ import annotations

from lru import LRU

from petstore.schemas import PetStatus
from petstore.server.clock import Monotonic
from petstore.server.rules.pagination import PageSource
from petstore.server.store.kept_pets import KEPT_SECONDS

#: Bytes of encoded pages kept at most.
KEPT_PAGES_BYTES = 16 * 2**20

#: A page as asked: the status filter, the limit, the cursor as sent.
PageKey = tuple[PetStatus | None, int, str | None]


class KeptPages:
    """``pages`` whose pages that more animals follow are answered from memory for
    ``seconds`` after their read (``monotonic`` tells the time), at most
    ``max_bytes`` of bodies held: the pages used least recently make room, and a
    page larger than ``max_bytes`` is not held."""

    def __init__(
        self,
        pages: PageSource,
        *,
        monotonic: Monotonic,
        seconds: float = KEPT_SECONDS,
        max_bytes: int = KEPT_PAGES_BYTES,
    ) -> None:
        self._inner = pages
        self._now = monotonic
        self._seconds = seconds
        self._max_bytes = max_bytes
        self._bytes = 0  # of the bodies held
        # key -> (body, next cursor, read at). Every body is at least 2 bytes ("[]"),
        # so the count bound never drops a page before the bytes do.
        self._pages: LRU[PageKey, tuple[bytes, str, float]] = LRU(max(1, max_bytes))

    async def page(
        self, *, status: PetStatus | None, limit: int, cursor: str | None
    ) -> tuple[bytes, str | None]:
        """``PageSource.page``: the kept page if read less than ``seconds`` ago."""
        key = (status, limit, cursor)
        held = self._pages.get(key)
        if held is not None:
            if self._now() - held[2] < self._seconds:
                return held[0], held[1]
            self._drop(key)
        read_at = self._now()
        body, next_cursor = await self._inner.page(status=status, limit=limit, cursor=cursor)
        if next_cursor is not None:
            self._hold(key, body, next_cursor, read_at)
        return body, next_cursor

    def _hold(self, key: PageKey, body: bytes, next_cursor: str, read_at: float) -> None:
        if len(body) > self._max_bytes:
            return
        self._drop(key)
        self._pages[key] = (body, next_cursor, read_at)
        self._bytes += len(body)
        # Not popitem(): lru-dict 1.4.1's keeps a reference to what it returns
        # (amitdev/lru-dict#64), so every page dropped would stay in memory.
        while self._bytes > self._max_bytes and (oldest := self._pages.peek_last_item()):
            self._drop(oldest[0])

    def _drop(self, key: PageKey) -> None:
        held = self._pages.pop(key, None)
        if held is not None:
            self._bytes -= len(held[0])
