"""The operations of the interface (listPets, createPet, getPet) and the health checks.

Each operation reads like its interface section: authenticate, parse the request
(:mod:`.parsing`), apply the rule (``rules.pets``, ``rules.pagination``,
``rules.idempotency``), respond. Each is called with the request
(:class:`.exchange.Request`) and the answer being built (:class:`.exchange.Response`);
who may call is one call, ``rules.admission``. An error raised on the way is
answered with its Error body by the pipeline (D10).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from email.utils import format_datetime

import msgspec
from lru import LRU

from petstore.schemas import encode
from petstore.server import errors
from petstore.server.http import links, newpet, parsing
from petstore.server.http.exchange import BodyReader, Header, Request, Response
from petstore.server.http.links import LinkBase
from petstore.server.rules import keys, pets
from petstore.server.rules.admission import Admission, Verdict
from petstore.server.rules.idempotency import IdempotentCreates
from petstore.server.rules.pagination import PageSource
from petstore.server.store import Store, migrate
from petstore.server.telemetry.metrics import Metrics


@dataclass(frozen=True, slots=True)
class Creates:
    """What createPet needs beyond the store: the request ``bodies`` reader (D17), the
    ``idempotency`` records (D16) dated by ``clock``, and the ``metrics`` that count
    replays."""

    bodies: BodyReader
    idempotency: IdempotentCreates
    clock: Callable[[], datetime]
    metrics: Metrics


@dataclass(frozen=True, slots=True)
class Deprecation:
    """getPet's deprecation (D14): its ``Deprecation`` ``date``; ``clock`` says when
    its sunset (:data:`petstore.server.rules.pets.SUNSET`) has come."""

    date: datetime
    clock: Callable[[], datetime]


class PetsApi:
    """The ``/v1/pets`` operations and ``/readyz`` over what :func:`create_app` built:
    the ``store``, its ``pages`` (D9), the ``admission`` of callers (D12-D15, D21,
    D22), what ``creates`` need, getPet's ``deprecation`` and where absolute ``links`` point.
    ``drain_marker`` is the file whose existence means this instance is shutting
    down (:mod:`petstore.server.shutdown`); None: it never drains.
    """

    def __init__(
        self,
        store: Store,
        *,
        pages: PageSource,
        admission: Admission,
        creates: Creates,
        deprecation: Deprecation,
        links: LinkBase,
        drain_marker: str | None = None,
    ) -> None:
        self.store = store
        self.links = links
        self.pages = pages
        self.admission = admission
        self.creates = creates
        self.drain_marker = drain_marker
        self.clock = deprecation.clock
        self._deprecation: list[Header] = [
            (b"deprecation", f"@{int(deprecation.date.timestamp())}".encode()),  # RFC 9745
            (b"sunset", format_datetime(pets.SUNSET, usegmt=True).encode()),  # RFC 8594
        ]
        self._deprecation_by_base: LRU[str, list[Header]] = LRU(64)
        self._gone = (
            f"GET /v1/pets/{{petId}} was removed on {format_datetime(pets.SUNSET, usegmt=True)}; "
            f"use {pets.REPLACEMENT}"
        )

    async def list_pets(self, request: Request, response: Response) -> None:
        """listPets (interface: List animals): a page of animals in id order, and
        ``Link: rel="next"`` when more follow (D7-D9)."""
        response.admit(await self._admit(request, keys.READ))
        status, limit, cursor = parsing.list_query(request.query)
        body, next_cursor = await self.pages.page(status=status, limit=limit, cursor=cursor)
        headers = (
            []
            if next_cursor is None
            else [links.next_link(self.links.base(request), next_cursor, limit, status)]
        )
        await response.respond(200, body, headers)

    async def create_pet(self, request: Request, response: Response) -> None:
        """createPet (interface: Add an animal): a NewPet (D1-D4) stored durably, 201
        with the Pet; with an Idempotency-Key, a retry gets the first answer (D16)."""
        api_key_id = response.admit(await self._admit(request, keys.WRITE))
        parsing.check_json_content_type(request.header(b"content-type"))
        key = parsing.parse_idempotency_key(request.header(b"idempotency-key"))
        creates = self.creates
        new_pet = newpet.parse_new_pet(await creates.bodies.read(request, response))
        if key is None:
            await response.respond(201, encode(await pets.create(self.store.pets, new_pet)))
            return
        pet, replayed = await creates.idempotency.create(
            self.store, new_pet, api_key_id=api_key_id, key=key, now=creates.clock()
        )
        if replayed:
            creates.metrics.idempotent_replays.inc()
        headers = [(b"idempotent-replayed", b"true")] if replayed else []
        await response.respond(201, encode(pet), headers)

    async def get_pet(self, request: Request, response: Response) -> None:
        """getPet (interface: Get one animal; deprecated, D14): one animal by id, 410
        from the sunset on. Every answer, errors included, carries the deprecation
        headers."""
        response.add_headers(self._deprecation_headers(request))
        response.admit(await self._admit(request, keys.READ))
        if self.clock() >= pets.SUNSET:  # interface: Versioning
            raise errors.Gone(self._gone)
        pet = await pets.get(self.store.pets, parsing.parse_pet_id(request.path_param))
        await response.respond(200, encode(pet))

    async def readyz(self, request: Request, response: Response) -> None:
        """Readiness: the database answers and its schema is current, and how the rate
        limiter's store is. No key needed. 503 at once when the instance is shutting
        down (the drain, :mod:`petstore.server.shutdown`), so the load balancer takes it out."""
        # One stat of a file in a temporary directory: microseconds, once per check.
        if self.drain_marker is not None and os.path.exists(self.drain_marker):  # noqa: ASYNC240
            raise errors.Unavailable("this instance is shutting down; retry on another one")
        if not migrate.schema_is_usable(await self.store.schema_revision()):
            raise errors.Unavailable("the database schema is older than this code needs")
        limiter = self.admission.rate_limiter
        rate_limits = "off" if limiter is None else await limiter.check()
        await response.respond(
            200, msgspec.json.encode({"status": "ready", "rateLimits": rate_limits})
        )

    def _admit(self, request: Request, scope: str) -> Awaitable[Verdict]:
        """:meth:`Admission.admit` of ``request`` for ``scope``, to await; operations
        hand its verdict to :meth:`Response.admit` before anything else, so the body
        is read only after it."""
        return self.admission.admit(request.headers.get(b"authorization"), request.client, scope)

    def _deprecation_headers(self, request: Request) -> list[Header]:
        """getPet's D14 headers, the Link absolute under the base of :attr:`links`;
        built once for each base, the 64 last used kept."""
        base = self.links.base(request)
        headers = self._deprecation_by_base.get(base)
        if headers is None:
            link = f'<{base}v1/docs/deprecations>; rel="deprecation"; type="text/html"'.encode()
            headers = self._deprecation_by_base[base] = [*self._deprecation, (b"link", link)]
        return headers


async def healthz(request: Request, response: Response) -> None:
    """Liveness: the process answers. No key needed."""
    await response.respond(200, b'{"status":"ok"}')
