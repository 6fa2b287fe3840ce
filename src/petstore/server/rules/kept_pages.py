"""Kept pages, a speed device (``PETSTORE_KEEP_ANSWERS``): a listPets page that more
animals follow is answered again from memory, encoded, with the cursor of the page
after it, while the store's change signal holds it good
(``store.changes.PetChanges``): at once after a change through this instance's store,
within :data:`~petstore.server.store.changes.KEPT_SECONDS` after any other.

Only pages that more animals follow are kept: every new id is above every committed
one (D5, D9), so a new animal can only extend the last page, which is never kept, and
new animals show at once.

Pages are kept by the request's status, limit and cursor as sent: a page is kept
only after :class:`~petstore.server.rules.pagination.Pages` answered it, so a cursor
found here was verified for that status when it was first asked.
"""

from __future__ import annotations

from lru import LRU

from petstore.schemas import PetStatus
from petstore.server.rules.pagination import PageSource
from petstore.server.store.changes import PetChanges, Stamp

#: Bytes of kept pages at most, each page counted with its bookkeeping.
KEPT_PAGES_BYTES = 16 * 2**20
#: What a kept page holds besides its body and its next cursor (its key, stamp and
#: place in the cache), in bytes, as ``python -m bench.memory`` measures it: counted
#: with each page, so that many small pages stay within the bound too.
ENTRY_BYTES = 320

#: A page as asked: the status filter, the limit, the cursor as sent.
PageKey = tuple[PetStatus | None, int, str | None]


class KeptPages:
    """``pages`` whose pages that more animals follow are answered from memory while
    ``changes`` holds them good, at most ``max_bytes`` held, each page counted as its
    body, its cursor and :data:`ENTRY_BYTES`: the pages used least recently make room,
    and a page larger than ``max_bytes`` is not held."""

    def __init__(
        self, pages: PageSource, *, changes: PetChanges, max_bytes: int = KEPT_PAGES_BYTES
    ) -> None:
        self._inner = pages
        self._changes = changes
        self._max_bytes = max_bytes
        self._bytes = 0  # of the pages held, as counted
        # key -> (body, next cursor, stamp). Every page counts more than ENTRY_BYTES,
        # so the count bound (one more than fits, the page just added) never drops a
        # page before the bytes do.
        self._pages: LRU[PageKey, tuple[bytes, str, Stamp]] = LRU(max_bytes // ENTRY_BYTES + 1)

    async def page(
        self, *, status: PetStatus | None, limit: int, cursor: str | None
    ) -> tuple[bytes, str | None]:
        """``PageSource.page``: the kept page while it holds good."""
        key = (status, limit, cursor)
        held = self._pages.get(key)
        if held is not None:
            if self._changes.holds(held[2]):
                return held[0], held[1]
            self._drop(key)
        stamp = self._changes.stamp()
        body, next_cursor = await self._inner.page(status=status, limit=limit, cursor=cursor)
        if next_cursor is not None:
            self._hold(key, body, next_cursor, stamp)
        return body, next_cursor

    def _hold(self, key: PageKey, body: bytes, next_cursor: str, stamp: Stamp) -> None:
        size = _size(body, next_cursor)
        if size > self._max_bytes:
            return
        self._drop(key)
        self._pages[key] = (body, next_cursor, stamp)
        self._bytes += size
        # Not popitem(): lru-dict 1.4.1's keeps a reference to what it returns
        # (amitdev/lru-dict#64), so every page dropped would stay in memory.
        while self._bytes > self._max_bytes and (oldest := self._pages.peek_last_item()):
            self._drop(oldest[0])

    def _drop(self, key: PageKey) -> None:
        held = self._pages.pop(key, None)
        if held is not None:
            self._bytes -= _size(held[0], held[1])


def _size(body: bytes, next_cursor: str) -> int:
    """What a kept page counts toward the bound."""
    return len(body) + len(next_cursor) + ENTRY_BYTES
