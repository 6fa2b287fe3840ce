"""The operations of the interface (listPets, createPet, getPet) and the readiness
check.

Each operation holds only its rule: what it is (its scope, body, success status,
idempotency and deprecation) is declared once, on its route (:meth:`PetsApi.routes`,
:class:`.routes.Operation`), and the pipeline (:mod:`.pipeline`) admits the caller
and reads and decodes the body from that declaration before the operation runs. An
operation is then called with the request (:class:`.exchange.Request`), the answer
being built (:class:`.exchange.Response`), its decoded body and its
Idempotency-Key; it parses the rest of its input (:mod:`.parsing`), applies the
rule (``rules.pets``, ``rules.pagination``, ``rules.idempotency``) and responds. An
error raised on the way is answered with its Error body by the pipeline (D10).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import msgspec

from petstore.schemas import NewPet, encode
from petstore.server import errors
from petstore.server.http import links, parsing
from petstore.server.http.deprecation import Deprecation
from petstore.server.http.exchange import Request, Response
from petstore.server.http.links import LinkBase
from petstore.server.http.routes import Operation, Route
from petstore.server.rules import keys, pets
from petstore.server.rules.idempotency import IdempotentCreates
from petstore.server.rules.pagination import PageSource
from petstore.server.rules.ratelimit import RateLimiter
from petstore.server.store import Store, migrate
from petstore.server.telemetry.metrics import Metrics


@dataclass(frozen=True, slots=True, kw_only=True)
class Creates:
    """What createPet needs beyond the store: the ``idempotency`` records (D16) dated
    by ``clock``, and the ``metrics`` that count replays."""

    idempotency: IdempotentCreates
    clock: Callable[[], datetime]
    metrics: Metrics


class PetsApi:
    """The ``/v1/pets`` operations and ``/readyz`` over what :func:`create_app` built:
    the ``store``, its ``pages`` (D9), what ``creates`` need, getPet's ``deprecation``
    (D14), where absolute ``links`` point and the ``rate_limiter`` (None: no limits),
    whose store ``/readyz`` reports. ``drain_marker`` is the file whose existence
    means this instance is shutting down (:mod:`petstore.server.shutdown`); None: it
    never drains.
    """

    def __init__(
        self,
        store: Store,
        *,
        pages: PageSource,
        creates: Creates,
        deprecation: Deprecation,
        links: LinkBase,
        rate_limiter: RateLimiter | None,
        drain_marker: str | None = None,
    ) -> None:
        self.store = store
        self.links = links
        self.pages = pages
        self.creates = creates
        self.deprecation = deprecation
        self.rate_limiter = rate_limiter
        self.drain_marker = drain_marker

    def routes(self) -> list[Route]:
        """The routes of the operations, each operation declared once: the OpenAPI
        document (``openapi.yaml``) states the same, and
        ``tests/server/http/test_operations.py`` holds the two together."""
        return [
            Route(
                "/v1/pets",
                GET=Operation(
                    operation_id="listPets", handler=self.list_pets, scope=keys.READ, status=200
                ),
                POST=Operation(
                    operation_id="createPet",
                    handler=self.create_pet,
                    scope=keys.WRITE,
                    status=201,
                    body=NewPet,
                    idempotent=True,
                ),
            ),
            Route(
                "/v1/pets/{petId}",
                GET=Operation(
                    operation_id="getPet",
                    handler=self.get_pet,
                    scope=keys.READ,
                    status=200,
                    deprecated=self.deprecation,
                ),
            ),
        ]

    async def list_pets(
        self, request: Request, response: Response, _body: None, _key: str | None
    ) -> None:
        """listPets (interface: List animals): a page of animals in id order, and
        ``Link: rel="next"`` when more follow (D7-D9)."""
        status, limit, cursor = parsing.list_query(request.query)
        body, next_cursor = await self.pages.page(status=status, limit=limit, cursor=cursor)
        headers = (
            []
            if next_cursor is None
            else [
                links.next_link(
                    self.links.base(request), cursor=next_cursor, limit=limit, status=status
                )
            ]
        )
        await response.respond(200, body, headers)

    async def create_pet(
        self, request: Request, response: Response, new_pet: NewPet, key: str | None
    ) -> None:
        """createPet (interface: Add an animal): a NewPet (D1-D4) stored durably, 201
        with the Pet; with an Idempotency-Key ``key``, a retry gets the first answer
        (D16), recorded under the caller's key."""
        if key is None:
            await response.respond(201, encode(await pets.create(self.store.pets, new_pet)))
            return
        creates = self.creates
        api_key_id = response.api_key_id
        assert api_key_id is not None  # the pipeline admitted the caller
        pet, replayed = await creates.idempotency.create(
            self.store, new_pet, api_key_id=api_key_id, key=key, now=creates.clock()
        )
        if replayed:
            creates.metrics.idempotent_replays.inc()
        headers = [(b"idempotent-replayed", b"true")] if replayed else []
        await response.respond(201, encode(pet), headers)

    async def get_pet(
        self, request: Request, response: Response, _body: None, _key: str | None
    ) -> None:
        """getPet (interface: Get one animal; deprecated, D14): one animal by id. The
        pipeline puts the deprecation headers on every answer and answers 410 from
        the sunset (:mod:`.deprecation`)."""
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
        limiter = self.rate_limiter
        rate_limits = "off" if limiter is None else await limiter.check()
        await response.respond(
            200, msgspec.json.encode({"status": "ready", "rateLimits": rate_limits})
        )


async def healthz(request: Request, response: Response) -> None:
    """Liveness: the process answers. No key needed."""
    await response.respond(200, b'{"status":"ok"}')
