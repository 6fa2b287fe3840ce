"""listPets pages: signed cursors (D9) and the cache of pages that cannot change.

:class:`Pages` is what listPets asks for a page: it verifies the cursor, reads the
page, encodes it, issues the next cursor, and keeps the pages that can be kept.

A cursor is the base64url (unpadded) of 10 bytes of payload followed by the first
16 bytes of their HMAC-SHA256 under ``PETSTORE_CURSOR_SECRET``. The payload is a
format version, the last id of the page, and the ``status`` filter it was issued
for, so a cursor cannot be forged, altered, or reused with another filter. Keyset
paging (``id > last``) keeps pages right while animals are added.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import struct
import time

from lru import LRU

from petstore.schemas import PetStatus, encode
from petstore.server import errors
from petstore.server.rules import pets
from petstore.server.store import Store
from petstore.server.store.kept import KEPT_SECONDS

_VERSION = 1
_PAYLOAD = struct.Struct(">Bqb")  # version, last id, status index (-1: no filter)
_SIGNATURE_BYTES = 16
_STATUSES = list(PetStatus)
_VERIFIED_MAX = 10_000
#: At most this many bytes of encoded listPets pages are held in memory.
PAGE_CACHE_BYTES = 16 * 2**20


class CursorSigner:
    """Issues and verifies cursors with one deployment-wide secret."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret
        # Cursors verified before: the check is a pure function of the cursor and the
        # status, and a client walking pages presents each cursor again and again.
        self._verified: LRU[tuple[str, PetStatus | None], int] = LRU(_VERIFIED_MAX)

    def _sign(self, payload: bytes) -> bytes:
        return hmac.digest(self._secret, payload, "sha256")[:_SIGNATURE_BYTES]

    def issue(self, *, last_id: int, status: PetStatus | None) -> str:
        """The cursor for the page that follows the animal ``last_id``."""
        index = -1 if status is None else _STATUSES.index(status)
        payload = _PAYLOAD.pack(_VERSION, last_id, index)
        return base64.urlsafe_b64encode(payload + self._sign(payload)).rstrip(b"=").decode()

    def last_id(self, cursor: str, *, status: PetStatus | None) -> int:
        """The last id a valid ``cursor`` stands after.

        Raises InvalidRequest when the cursor was not issued by this deployment,
        was altered in any way, or was issued for another ``status``.
        """
        last_id = self._verified.get((cursor, status))
        if last_id is None:
            last_id = self._verify(cursor, status)
            self._verified[(cursor, status)] = last_id
        return last_id

    def _verify(self, cursor: str, status: PetStatus | None) -> int:
        invalid = errors.InvalidRequest("cursor: not a cursor issued by this service")
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        except (binascii.Error, ValueError):
            raise invalid from None
        if len(raw) != _PAYLOAD.size + _SIGNATURE_BYTES or (
            base64.urlsafe_b64encode(raw).rstrip(b"=").decode() != cursor
        ):
            raise invalid
        payload, signature = raw[: _PAYLOAD.size], raw[_PAYLOAD.size :]
        if not hmac.compare_digest(signature, self._sign(payload)):
            raise invalid
        version, last_id, index = _PAYLOAD.unpack(payload)
        if version != _VERSION or not -1 <= index < len(_STATUSES):
            raise invalid
        if (None if index == -1 else _STATUSES[index]) is not status:
            raise errors.InvalidRequest(
                "cursor: issued for a different status filter; keep the status of the "
                "request that returned it"
            )
        return int(last_id)


#: A listPets page as asked: the status filter, the id it starts after, the limit.
PageKey = tuple[PetStatus | None, int, int]


class PageCache:
    """Encoded pages of listPets that more animals follow, for a store whose such
    pages never change through the API (``Store.full_pages_are_final``): a page asked
    again, like the first page or one a cursor names, is answered without the
    database, the JSON encoder or the signer. Served on SQLite it took S1 (the first
    page) from 0.24 to 0.49 of the raw ASGI baseline, S2 from 0.11 to 0.47 and S5
    (walking by cursor) from 0.20 to 0.40; holding the next cursor with each page, S5
    to 0.53; on PostgreSQL (issue 28, a loaded machine), S1 0.33 -> 0.50, S2 0.41 ->
    0.62, S5 0.29 -> 0.60 (docs/performance.md).

    A page is answered from here for at most ``max_age`` seconds after it was read
    (``store.kept.KEPT_SECONDS``: the bound on a change made outside the API,
    docs/operations.md), and bounded by the bytes of the bodies held (``max_bytes``):
    the pages used least recently make room (an ``lru.LRU`` in use order, the bytes
    counted here). A page larger than ``max_bytes`` is not held.
    """

    def __init__(self, max_bytes: int, *, max_age: float = KEPT_SECONDS) -> None:
        self._max_age = max_age
        self._max_bytes = max_bytes
        self._bytes = 0  # of the bodies held
        # key -> ((body, next cursor), monotonic time it goes stale). Every body is at
        # least 2 bytes ("[]"), so the count bound never drops a page before the bytes do.
        self._pages: LRU[PageKey, tuple[tuple[bytes, str], float]] = LRU(max(1, max_bytes))

    def get(self, key: PageKey) -> tuple[bytes, str] | None:
        """The JSON body of the page ``key`` and the cursor of the page after it, if
        held and read less than ``max_age`` seconds ago."""
        held = self._pages.get(key)
        if held is None:
            return None
        if held[1] <= time.monotonic():
            self._drop(key)
            return None
        return held[0]

    def put(
        self, key: PageKey, body: bytes, next_cursor: str, *, read_at: float | None = None
    ) -> None:
        """Hold the page ``key``: its JSON ``body`` and the cursor that follows it, as
        read at ``read_at`` (``time.monotonic()`` taken before the read; None: now)."""
        if len(body) > self._max_bytes:
            return
        read_at = time.monotonic() if read_at is None else read_at
        self._drop(key)
        self._pages[key] = ((body, next_cursor), read_at + self._max_age)
        self._bytes += len(body)
        # Not popitem(): lru-dict 1.4.1's keeps a reference to what it returns
        # (amitdev/lru-dict#64), so every page dropped stayed in memory.
        while self._bytes > self._max_bytes and (oldest := self._pages.peek_last_item()):
            self._drop(oldest[0])

    def _drop(self, key: PageKey) -> None:
        held = self._pages.pop(key, None)
        if held is not None:
            self._bytes -= len(held[0][0])


class Pages:
    """The pages of listPets over ``store``, their cursors signed by ``cursors``;
    pages are kept in a :class:`PageCache` when the store's full pages are final."""

    def __init__(self, store: Store, cursors: CursorSigner) -> None:
        self._store = store
        self._cursors = cursors
        self._cache = PageCache(PAGE_CACHE_BYTES) if store.full_pages_are_final else None

    async def page(
        self, *, status: PetStatus | None, limit: int, cursor: str | None
    ) -> tuple[bytes, str | None]:
        """The JSON body of the page of ``limit`` animals (1-100) with ``status`` that
        follows ``cursor`` (the first page when None), and the cursor of the page
        after it, None on the last page (D7, D9).

        Raises InvalidRequest for a cursor not issued here or issued for another
        ``status``, and Unavailable when the database cannot be read.
        """
        after_id = 0 if cursor is None else self._cursors.last_id(cursor, status=status)
        key = (status, after_id, limit)
        cache = self._cache
        if cache is not None:
            cached = cache.get(key)
            if cached is not None:
                return cached
        read_at = time.monotonic()
        page, more = await pets.list_page(
            self._store, status=status, limit=limit, after_id=after_id
        )
        body = encode(page)
        if not more:
            return body, None
        next_cursor = self._cursors.issue(last_id=page[-1].id, status=status)
        if cache is not None:
            cache.put(key, body, next_cursor, read_at=read_at)
        return body, next_cursor
