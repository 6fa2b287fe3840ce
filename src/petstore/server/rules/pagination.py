"""listPets pages: their size (D8) and signed cursors (D9).

A page holds ``LIMIT_MIN`` to ``LIMIT_MAX`` animals, ``LIMIT_DEFAULT`` when the
request names no ``limit`` (interface: List animals, Limits). The bounds are the
rule of this module; they are defined in :mod:`petstore.schemas`, beside the wire
contract, because the client side states them too (``petstore pets list --limit``)
and may not import the server. The HTTP layer reads them from here.

:class:`Pages` is what listPets asks for a page (:class:`PageSource`): it verifies
the cursor, reads the page, encodes it and issues the next cursor.

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
from typing import Protocol

from lru import LRU

from petstore.schemas import LIMIT_DEFAULT as LIMIT_DEFAULT
from petstore.schemas import LIMIT_MAX as LIMIT_MAX
from petstore.schemas import LIMIT_MIN as LIMIT_MIN
from petstore.schemas import PetStatus, encode
from petstore.server import errors
from petstore.server.rules import pets
from petstore.server.store import PetRepository

_VERSION = 1
_PAYLOAD = struct.Struct(">Bqb")  # version, last id, status index (-1: no filter)
_SIGNATURE_BYTES = 16
_STATUSES = tuple(PetStatus)
_VERIFIED_MAX = 10_000


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


class PageSource(Protocol):
    """What listPets asks for a page: :class:`Pages`, or a speed device around it
    (``rules.kept_pages.KeptPages``)."""

    async def page(
        self, *, status: PetStatus | None, limit: int, cursor: str | None
    ) -> tuple[bytes, str | None]:
        """The JSON body of the page of ``limit`` animals (``LIMIT_MIN`` to
        ``LIMIT_MAX``) with ``status`` that follows ``cursor`` (the first page when
        None), and the cursor of the page after it, None on the last page (D7, D9).

        Raises InvalidRequest for a cursor not issued here or issued for another
        ``status``, and Unavailable when the database cannot be read.
        """
        ...


class Pages:
    """The pages of listPets over the ``pets`` repository, their cursors signed by
    ``cursors``."""

    def __init__(self, pets: PetRepository, cursors: CursorSigner) -> None:
        self._pets = pets
        self._cursors = cursors

    async def page(
        self, *, status: PetStatus | None, limit: int, cursor: str | None
    ) -> tuple[bytes, str | None]:
        """:meth:`PageSource.page`."""
        after_id = 0 if cursor is None else self._cursors.last_id(cursor, status=status)
        page, more = await pets.list_page(self._pets, status=status, limit=limit, after_id=after_id)
        body = encode(page)
        if not more:
            return body, None
        return body, self._cursors.issue(last_id=page[-1].id, status=status)
