"""The operations of the interface (listPets, createPet, getPet) and the health checks.

Each operation reads like its interface section: authenticate, parse the request
(:mod:`.parsing`), apply the rule (``rules.pets``, ``rules.pagination``,
``rules.idempotency``), respond. An error raised on the way is answered with its
Error body by the pipeline (D10); the request and its answer: :class:`.exchange.Exchange`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from email.utils import format_datetime

import msgspec
from lru import LRU

from petstore.schemas import encode
from petstore.server import errors
from petstore.server.http import links, newpet, parsing
from petstore.server.http.exchange import BodyReader, Exchange, Header
from petstore.server.http.links import LinkBase
from petstore.server.rules import keys, pets, ratelimit
from petstore.server.rules.auth import Caller, KeyVerifier
from petstore.server.rules.auth_failures import FailedAuthentications
from petstore.server.rules.idempotency import IdempotentCreates
from petstore.server.rules.pagination import PageSource
from petstore.server.rules.ratelimit import RateLimiter
from petstore.server.store import Store, migrate
from petstore.server.telemetry.metrics import Metrics

#: The RateLimit-Policy names (draft-ietf-httpapi-ratelimit-headers): the service's
#: limit for every key (D15), and a key's own limit (D22).
SERVICE_POLICY = ratelimit.POLICY
KEY_POLICY = "key"


@dataclass(frozen=True, slots=True)
class Admission:
    """Who may call, and how often: the API key ``verifier`` (D12, D13, D21), the
    ``rate_limiter`` (D15, D22; None: no limits) and the limit on ``failures`` to
    authenticate per client address (None: no limit)."""

    verifier: KeyVerifier
    rate_limiter: RateLimiter | None
    failures: FailedAuthentications | None = None


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
    the ``store``, its ``pages`` (D9), the ``admission`` of callers, what ``creates``
    need, getPet's ``deprecation`` and where absolute ``links`` point.
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
        self.verifier = admission.verifier
        self.rate_limiter = admission.rate_limiter
        self.failures = admission.failures
        self.creates = creates
        self.drain_marker = drain_marker
        self.clock = deprecation.clock
        # The RateLimit-Policy field of a key's own limit (None: the service's), built
        # once per limit.
        self._policies: LRU[str | None, tuple[bytes, Header]] = LRU(256)
        self._service_policy = (
            self._policy(None) if self.rate_limiter is not None else (b"", (b"", b""))
        )
        self._deprecation: list[Header] = [
            (b"deprecation", f"@{int(deprecation.date.timestamp())}".encode()),  # RFC 9745
            (b"sunset", format_datetime(pets.SUNSET, usegmt=True).encode()),  # RFC 8594
        ]
        self._deprecation_by_base: LRU[str, list[Header]] = LRU(64)
        self._gone = (
            f"GET /v1/pets/{{petId}} was removed on {format_datetime(pets.SUNSET, usegmt=True)}; "
            f"use {pets.REPLACEMENT}"
        )

    async def list_pets(self, exchange: Exchange) -> None:
        """listPets (interface: List animals): a page of animals in id order, and
        ``Link: rel="next"`` when more follow (D7-D9)."""
        await self._authenticate(exchange, keys.READ)
        status, limit, cursor = parsing.list_query(exchange.scope["query_string"])
        body, next_cursor = await self.pages.page(status=status, limit=limit, cursor=cursor)
        headers = (
            []
            if next_cursor is None
            else [links.next_link(self.links.base(exchange), next_cursor, limit, status)]
        )
        await exchange.respond(200, body, headers)

    async def create_pet(self, exchange: Exchange) -> None:
        """createPet (interface: Add an animal): a NewPet (D1-D4) stored durably, 201
        with the Pet; with an Idempotency-Key, a retry gets the first answer (D16)."""
        api_key_id = await self._authenticate(exchange, keys.WRITE)
        parsing.check_json_content_type(exchange.header(b"content-type"))
        key = parsing.parse_idempotency_key(exchange.header(b"idempotency-key"))
        creates = self.creates
        new_pet = newpet.parse_new_pet(await creates.bodies.read(exchange))
        if key is None:
            await exchange.respond(201, encode(await pets.create(self.store, new_pet)))
            return
        body, replayed = await creates.idempotency.create(
            self.store, new_pet, api_key_id=api_key_id, key=key, now=creates.clock()
        )
        if replayed:
            creates.metrics.idempotent_replays.inc()
        await exchange.respond(201, body, [(b"idempotent-replayed", b"true")] if replayed else [])

    async def get_pet(self, exchange: Exchange) -> None:
        """getPet (interface: Get one animal; deprecated, D14): one animal by id, 410
        from the sunset on. Every answer, errors included, carries the deprecation
        headers."""
        exchange.headers += self._deprecation_headers(exchange)
        await self._authenticate(exchange, keys.READ)
        if self.clock() >= pets.SUNSET:  # interface: Versioning
            raise errors.Gone(self._gone)
        pet = await pets.get(self.store, parsing.parse_pet_id(exchange.path_param))
        await exchange.respond(200, encode(pet))

    async def readyz(self, exchange: Exchange) -> None:
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
        await exchange.respond(
            200, msgspec.json.encode({"status": "ready", "rateLimits": rate_limits})
        )

    async def _authenticate(self, exchange: Exchange, scope: str) -> int:
        """The caller's API key id (D12), once its key holds ``scope`` (D21) and the
        request is counted against the key's rate limit (D15, D22); the RateLimit
        fields go on the answer whatever it turns out to be.

        A key without the scope is refused (403) before the request is counted, as a
        request without a valid key (401) is: neither does any work, and a key's
        budget is for what it may do. The body is read only after this.
        """
        limiter = self.rate_limiter
        if limiter is None:
            caller = await self._verify(exchange)
        else:
            try:
                caller = await self._verify(exchange)
            except errors.PetstoreError:  # no key known: the service's policy
                exchange.headers.append(self._service_policy[1])
                raise
            own_limit = caller.rate_limit
            name, policy = self._service_policy if own_limit is None else self._policy(own_limit)
            exchange.headers.append(policy)
        exchange.api_key_id = caller.api_key_id  # logged by id, never the key (D13)
        if scope not in caller.scopes:
            raise errors.Forbidden(f"this API key lacks the {scope} scope", scope=scope)
        if limiter is not None:
            quota = await limiter.hit(caller.api_key_id, caller.rate_limit)
            if quota is not None:
                field = b'"%s";r=%d;t=%d' % (name, quota.remaining, quota.reset)
                exchange.headers.append((b"ratelimit", field))
                if quota.retry_after is not None:
                    raise errors.RateLimited(
                        f"rate limit exceeded for this API key; retry in {quota.retry_after} s",
                        retry_after=quota.retry_after,
                    )
        return caller.api_key_id

    async def _verify(self, exchange: Exchange) -> Caller:
        """The caller of ``exchange``'s key (:meth:`KeyVerifier.verify`), its failure
        counted against the client's address; an address over the failure limit is
        answered 429 before its key is looked at (:mod:`.rules.auth_failures`)."""
        failures = self.failures
        if failures is None:
            return await self.verifier.verify(exchange.header(b"authorization"))
        client = exchange.scope.get("client")
        address = client[0] if client else "-"
        failures.check(address)
        try:
            return await self.verifier.verify(exchange.header(b"authorization"))
        except errors.Unauthorized:
            failures.failed(address)
            raise

    def _policy(self, own_limit: str | None) -> tuple[bytes, Header]:
        """The policy name and ``RateLimit-Policy`` field of a key with ``own_limit``
        (None: the service's limit, :data:`SERVICE_POLICY`; else :data:`KEY_POLICY`)."""
        found = self._policies.get(own_limit)
        if found is None:
            assert self.rate_limiter is not None
            quota, window = self.rate_limiter.policy(own_limit)
            name = (SERVICE_POLICY if own_limit is None else KEY_POLICY).encode()
            field = b'"%s";q=%d;w=%d' % (name, quota, window)
            found = self._policies[own_limit] = (name, (b"ratelimit-policy", field))
        return found

    def _deprecation_headers(self, exchange: Exchange) -> list[Header]:
        """getPet's D14 headers, the Link absolute under the base of :attr:`links`;
        built once for each base, the 64 last used kept."""
        base = self.links.base(exchange)
        headers = self._deprecation_by_base.get(base)
        if headers is None:
            link = f'<{base}v1/docs/deprecations>; rel="deprecation"; type="text/html"'.encode()
            headers = self._deprecation_by_base[base] = [*self._deprecation, (b"link", link)]
        return headers


async def healthz(exchange: Exchange) -> None:
    """Liveness: the process answers. No key needed."""
    await exchange.respond(200, b'{"status":"ok"}')
