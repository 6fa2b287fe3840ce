"""A typed Python client of the Petstore service, on httpx: :class:`Client` and
:class:`AsyncClient`, the same methods on both::

    with Client("http://127.0.0.1:8000/v1", api_key=key) as petstore:
        rex = petstore.create_pet("Rex", category_id=1)
        for pet in petstore.iter_pets(status=PetStatus.AVAILABLE):
            print(pet.id, pet.name)

Without arguments the base URL and key come from ``PETSTORE_URL`` and
``PETSTORE_API_KEY``. What the client does for its caller:

- pages: ``iter_pets`` follows ``Link: rel="next"`` until it is absent (D9);
- rides out a failover (D27): its connections carry TCP keepalives, so one left on a
  paused or vanished load balancer is dropped within seconds
  (:data:`~petstore.client.transport.KEEPALIVES`), and a call is repeated for up to
  ``retry_for`` seconds (20 s, D27's bound; ``PETSTORE_RETRY_FOR_SECONDS``) after a
  connection failure, a 429, and, when repeating is safe, a 503, a 409
  ``idempotency_conflict``, a lost connection or a timeout, with exponential backoff
  and full jitter, or the ``Retry-After`` the service sends (D15)
  (:mod:`petstore.client.retries`);
- never adds twice: ``create_pet`` sends one ``Idempotency-Key`` on every attempt,
  so a repeat is answered with the first attempt's animal (D16); a POST without the
  key (a request hook removed it) is never repeated once it may have arrived;
- warns: ``get_pet`` emits a DeprecationWarning naming the sunset and the
  replacement (D14);
- raises the typed errors of :mod:`petstore.client.errors` (D10), and
  ServiceNotFoundError when a 404 shows the base URL is not a Petstore's;
- sends a NewPet as written with ``create_pet_json`` (an importer's records), so the
  service, not the client, judges unknown and repeated members (D4).

The two classes here do the I/O (send, sleep, close). What they share that does no
I/O (the configuration, the retry decision, the transport's options,
:class:`~petstore.client.core.Page`, building requests and decoding responses) is in
:mod:`petstore.client.core`, :mod:`petstore.client.retries` and
:mod:`petstore.client.transport`; ``Page`` and the constants are re-exported here.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, Self

import anyio
import httpx

from petstore.client.core import (
    DEFAULT_SUNSET,
    ENV_API_KEY,
    ENV_URL,
    REPLACEMENT,
    ClientBase,
    EventHooks,
    Page,
    create_request,
    decode_page,
    decode_pet,
    deprecated_pet,
    json_request,
    list_params,
    next_params,
)
from petstore.client.errors import SunsetWarning
from petstore.client.retries import ENV_RETRY_FOR, RETRY_FOR, Retries
from petstore.client.transport import KEEPALIVES, transport_options
from petstore.schemas import LIMIT_MAX, Pet, PetStatus

__all__ = [
    "DEFAULT_SUNSET",
    "ENV_API_KEY",
    "ENV_RETRY_FOR",
    "ENV_URL",
    "KEEPALIVES",
    "REPLACEMENT",
    "RETRY_FOR",
    "AsyncClient",
    "Client",
    "EventHooks",
    "Page",
    "Pet",
    "PetStatus",
    "Retries",
    "SunsetWarning",
]


class Client(ClientBase[httpx.BaseTransport]):
    """The synchronous client; ``with Client() as petstore:`` closes its connections."""

    _http: httpx.Client

    def _connect(self, transport: httpx.BaseTransport | None, **options: Any) -> None:
        transport = transport or httpx.HTTPTransport(**transport_options(self.base_url))
        self._http = httpx.Client(transport=transport, **options)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request, repeated as :meth:`ClientBase._next` says. Raises TransportError."""
        started = time.monotonic()
        for attempt in itertools.count():
            try:
                outcome: httpx.Response | httpx.TransportError
                outcome = self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                outcome = exc
            step = self._next(attempt, outcome, elapsed=time.monotonic() - started)
            if isinstance(step, httpx.Response):
                return step
            time.sleep(step)
        raise AssertionError("unreachable")

    def list_pets(self, status: PetStatus | str | None = None, *, limit: int | None = None) -> Page:
        """One page of animals, ``limit`` from ``petstore.schemas.LIMIT_MIN`` to
        ``LIMIT_MAX`` (1 to 100; ``LIMIT_DEFAULT``, 20, by the service when None).
        Raises BadRequestError for a bad ``status`` or ``limit`` (D8)."""
        return decode_page(self._send("GET", "pets", params=list_params(status, limit)))

    def iter_pets(
        self, status: PetStatus | str | None = None, *, limit: int = LIMIT_MAX
    ) -> Iterator[Pet]:
        """Every animal (with ``status``), in id order, fetching ``limit`` per page (by
        default the most a page may hold) and following ``rel="next"`` until it is
        absent (D9)."""
        page = self.list_pets(status, limit=limit)
        yield from page.pets
        while page.next_url is not None:
            page = decode_page(self._send("GET", "pets", params=next_params(page.next_url)))
            yield from page.pets

    def create_pet(
        self,
        name: str,
        *,
        category_id: int,
        status: PetStatus | str | None = None,
        idempotency_key: str | None = None,
    ) -> Pet:
        """Add an animal; the service defaults ``status`` to available (D1). One
        ``Idempotency-Key`` (a new uuid4 unless given) goes with every attempt (D16).
        Raises BadRequestError for invalid fields (D2-D4), ConflictError for a key
        reused with another body."""
        members = {"name": name, "category_id": category_id, "status": status}
        content, headers = create_request(members, idempotency_key)
        response = self._send("POST", "pets", content=content, headers=headers)
        return decode_pet(response)

    def create_pet_json(self, document: bytes, *, idempotency_key: str | None = None) -> Pet:
        """Add an animal from a NewPet JSON ``document`` (bytes) sent as written, and
        return it. The service judges every member: an unknown or repeated one, a
        wrong type, a document that is not a NewPet, is BadRequestError (D2-D4).
        Idempotency keys and their errors as in :meth:`create_pet`."""
        content, headers = json_request(document, idempotency_key)
        response = self._send("POST", "pets", content=content, headers=headers)
        return decode_pet(response)

    def get_pet(self, pet_id: int) -> Pet:
        """One animal by id. Deprecated (D14): warns; raises GoneError after the
        sunset and NotFoundError when there is no such animal (D11)."""
        return deprecated_pet(self._send("GET", f"pets/{int(pet_id)}"))


class AsyncClient(ClientBase[httpx.AsyncBaseTransport]):
    """The asynchronous twin of :class:`Client`: ``async with``, an
    ``httpx.AsyncBaseTransport``, coroutine event hooks, ``async for`` in ``iter_pets``."""

    _http: httpx.AsyncClient

    def _connect(self, transport: httpx.AsyncBaseTransport | None, **options: Any) -> None:
        transport = transport or httpx.AsyncHTTPTransport(**transport_options(self.base_url))
        self._http = httpx.AsyncClient(transport=transport, **options)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        started = time.monotonic()
        for attempt in itertools.count():
            try:
                outcome: httpx.Response | httpx.TransportError
                outcome = await self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                outcome = exc
            step = self._next(attempt, outcome, elapsed=time.monotonic() - started)
            if isinstance(step, httpx.Response):
                return step
            await anyio.sleep(step)
        raise AssertionError("unreachable")

    async def list_pets(
        self, status: PetStatus | str | None = None, *, limit: int | None = None
    ) -> Page:
        """See :meth:`Client.list_pets`."""
        return decode_page(await self._send("GET", "pets", params=list_params(status, limit)))

    async def iter_pets(
        self, status: PetStatus | str | None = None, *, limit: int = LIMIT_MAX
    ) -> AsyncIterator[Pet]:
        """See :meth:`Client.iter_pets`; use with ``async for``."""
        page = await self.list_pets(status, limit=limit)
        for pet in page.pets:
            yield pet
        while page.next_url is not None:
            page = decode_page(await self._send("GET", "pets", params=next_params(page.next_url)))
            for pet in page.pets:
                yield pet

    async def create_pet(
        self,
        name: str,
        *,
        category_id: int,
        status: PetStatus | str | None = None,
        idempotency_key: str | None = None,
    ) -> Pet:
        """See :meth:`Client.create_pet`."""
        members = {"name": name, "category_id": category_id, "status": status}
        content, headers = create_request(members, idempotency_key)
        response = await self._send("POST", "pets", content=content, headers=headers)
        return decode_pet(response)

    async def create_pet_json(self, document: bytes, *, idempotency_key: str | None = None) -> Pet:
        """See :meth:`Client.create_pet_json`."""
        content, headers = json_request(document, idempotency_key)
        response = await self._send("POST", "pets", content=content, headers=headers)
        return decode_pet(response)

    async def get_pet(self, pet_id: int) -> Pet:
        """See :meth:`Client.get_pet`."""
        return deprecated_pet(await self._send("GET", f"pets/{int(pet_id)}"))
