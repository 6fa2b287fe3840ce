"""The three operations under ``/v1`` (listPets, createPet, getPet) plus health.

The operations are plain ASGI: :class:`PetsApi` is called by the service middleware
for ``/v1/pets`` and ``/v1/pets/{petId}`` with an :class:`Exchange`, and answers
without Starlette's request, response, routing and exception layers, which cost a
fifth of a request under load (docs/performance.md). Each operation parses,
authenticates and calls one rule; a ``PetstoreError`` raised on the way becomes its
Error body (D10). Health and everything else are ordinary Starlette endpoints.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl

import msgspec
from starlette.datastructures import URL
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from petstore import errors, idempotency, pagination, pets
from petstore.auth import KeyVerifier
from petstore.idempotency import IdempotentCreates
from petstore.metrics import Metrics
from petstore.ratelimit import RateLimiter
from petstore.schemas import NewPet, encode
from petstore.store import Store

JSON = "application/json"
_JSON_CONTENT_TYPE = (b"content-type", JSON.encode())
_new_pet_decoder = msgspec.json.Decoder(NewPet)
_FIELD_RE = re.compile(r"`\$\.(\w+)`|field `(\w+)`")
Header = tuple[bytes, bytes]
Headers = list[Header]
error_log = logging.getLogger("petstore.error")

#: At most this many bytes of encoded listPets pages are held in memory.
PAGE_CACHE_BYTES = 16 * 2**20
#: Seconds between checks of the request bodies being read against their deadline: a
#: stalled body is cut off between ``body_timeout_seconds`` and this much later (D17).
BODY_CHECK_SECONDS = 0.25
#: Route templates, as logged and in the OpenAPI document.
COLLECTION, ITEM = "/v1/pets", "/v1/pets/{pet_id}"
_ITEM_PREFIX = "/v1/pets/"


@dataclass(frozen=True, slots=True)
class Services:
    """What the endpoints use, built once per app by the lifespan."""

    store: Store
    verifier: KeyVerifier
    cursors: pagination.CursorSigner
    clock: Callable[[], datetime]
    #: getPet's sunset check (D14), on ``clock``: :func:`pets.sunset_check`.
    check_sunset: Callable[[], None]
    max_body_bytes: int
    body_timeout_seconds: float
    schema_usable: Callable[[str | None], bool]
    deprecation_headers: dict[str, str]
    rate_limiter: RateLimiter | None
    idempotency: IdempotentCreates
    metrics: Metrics


@dataclass(slots=True)
class Exchange:
    """One request to an operation and what its answer carries.

    ``headers`` are added to whatever response is sent (the middleware's D18
    headers, then the RateLimit fields of D15 once known); ``status`` and
    ``api_key_id`` are what the access log and metrics report.
    """

    scope: Scope
    receive: Receive
    send: Send
    request_id: str
    headers: Headers
    status: int = 0
    api_key_id: int | None = None
    _request_headers: dict[bytes, bytes] | None = field(default=None, repr=False)

    def header(self, name: bytes) -> str | None:
        """The first value of request header ``name`` (lower-case bytes), latin-1."""
        if self._request_headers is None:
            # reversed: the first of repeated headers wins, as in Starlette's Headers
            self._request_headers = dict(reversed(self.scope["headers"]))
        value = self._request_headers.get(name)
        return None if value is None else value.decode("latin-1")

    async def respond(self, status: int, body: bytes, headers: Iterable[Header] = ()) -> None:
        """Send the whole response: JSON ``body`` with ``headers`` and the exchange's."""
        self.status = status
        await self.send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    _JSON_CONTENT_TYPE,
                    (b"content-length", str(len(body)).encode()),
                    *headers,
                    *self.headers,
                ],
            }
        )
        await self.send({"type": "http.response.body", "body": body})

    async def respond_error(self, error: errors.PetstoreError) -> None:
        """Send ``error`` as its Error body (D10) with its headers (see :func:`log_fault`)."""
        log_fault(error, self.request_id)
        await self.respond(
            error.status,
            error.body(),
            [(name.lower().encode(), value.encode()) for name, value in error.headers.items()],
        )


Operation = Callable[[Exchange], Awaitable[None]]


def log_fault(error: errors.PetstoreError, request_id: str) -> None:
    """Log a 5xx ``error`` that has a cause (the database fault behind a 503) with
    that cause's traceback, under ``request_id``; others are not faults of ours."""
    if error.status >= 500 and error.__cause__ is not None:
        error_log.error(
            "%s: %s",
            error.code,
            error.message,
            exc_info=error.__cause__,
            extra={"request_id": request_id},
        )


class BodyDeadlines:
    """Deadlines of the request-body reads in progress, all checked by one timer every
    :data:`BODY_CHECK_SECONDS` instead of a timer each: ``asyncio.timeout`` around each
    body cost a createPet 9% served (docs/performance.md). Use from one event loop.

    A reading task past its deadline is cancelled, as ``asyncio.timeout`` would;
    :meth:`cut_off` tells it that the cancellation was the deadline's.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._reading: dict[asyncio.Task[Any], float] = {}  # task -> deadline, loop time
        self._cut: set[asyncio.Task[Any]] = set()
        self._timer: asyncio.TimerHandle | None = None

    def watch(self, task: asyncio.Task[Any], deadline: float) -> None:
        """Cancel ``task`` if it is still watched at ``deadline`` (``loop.time()``)."""
        self._reading[task] = deadline
        if self._timer is None:
            self._timer = self._loop.call_later(BODY_CHECK_SECONDS, self._check)

    def forget(self, task: asyncio.Task[Any]) -> None:
        """Stop watching ``task`` (done reading, or failed)."""
        self._reading.pop(task, None)
        self._cut.discard(task)

    def cut_off(self, task: asyncio.Task[Any]) -> bool:
        """True when ``task`` was cancelled because its deadline passed."""
        return task in self._cut

    def _check(self) -> None:
        now = self._loop.time()
        for task, deadline in self._reading.items():
            if deadline <= now and task not in self._cut:
                self._cut.add(task)
                task.cancel()
        self._timer = (
            self._loop.call_later(BODY_CHECK_SECONDS, self._check) if self._reading else None
        )


class PetsApi:
    """The ``/v1/pets`` operations, served once the app's lifespan has called
    :meth:`bind` with the services."""

    services: Services
    _deprecation_headers: Headers
    _pages: pagination.PageCache | None
    _bodies: BodyDeadlines

    def bind(self, services: Services) -> None:
        """Serve with ``services`` from now on."""
        self.services = services
        self._pages = (
            pagination.PageCache(PAGE_CACHE_BYTES) if services.store.full_pages_are_final else None
        )
        self._deprecation_headers = [
            (name.lower().encode(), value.encode())
            for name, value in services.deprecation_headers.items()
        ]
        self._deprecation_by_base: dict[str, Headers] = {}
        self._bodies = BodyDeadlines(asyncio.get_running_loop())

    def _deprecation(self, base_url: str) -> Headers:
        """getPet's D14 headers, the Link absolute under ``base_url``; built once for
        each of the first 64 base URLs seen, as ``_base_url`` does."""
        headers = self._deprecation_by_base.get(base_url)
        if headers is None:
            link = f'<{base_url}v1/docs/deprecations>; rel="deprecation"; type="text/html"'
            headers = [*self._deprecation_headers, (b"link", link.encode())]
            if len(self._deprecation_by_base) < 64:
                self._deprecation_by_base[base_url] = headers
        return headers

    def route(self, method: str, path: str) -> tuple[str, Operation] | None:
        """``(route template, handler)`` for a request to one of the operations'
        paths, or None for any other path (Starlette answers those).

        A method the path does not have gets :meth:`method_not_allowed` (405).
        """
        if path == COLLECTION:
            if method in ("GET", "HEAD"):
                return COLLECTION, self.list_pets
            if method == "POST":
                return COLLECTION, self.create_pet
            return COLLECTION, self.method_not_allowed
        if path.startswith(_ITEM_PREFIX) and len(path) > len(_ITEM_PREFIX):
            if "/" in path[len(_ITEM_PREFIX) :]:
                return None
            if method in ("GET", "HEAD"):
                return ITEM, self.get_pet
            return ITEM, self.method_not_allowed
        return None

    async def method_not_allowed(self, exchange: Exchange) -> None:
        """405 with ``Allow`` naming the path's methods; no key needed (D10)."""
        allow = "GET, POST, HEAD" if exchange.scope["path"] == COLLECTION else "GET, HEAD"
        await exchange.respond_error(
            errors.MethodNotAllowed(
                "this path does not support that method; see the Allow header", allow=allow
            )
        )

    async def _authenticate(self, exchange: Exchange) -> int:
        """The caller's API key id (D12), counted against its rate limit (D15); every
        operation starts here. The RateLimit fields go on the response whatever it
        turns out to be."""
        limiter = self.services.rate_limiter
        if limiter is not None:
            exchange.headers.append((b"ratelimit-policy", limiter.policy_header))
        key_id = await self.services.verifier.verify(exchange.header(b"authorization"))
        exchange.api_key_id = key_id  # logged by id, never the key (D13)
        if limiter is not None:
            remaining, retry_after = await limiter.hit(key_id)
            if remaining is not None:
                exchange.headers.append((b"ratelimit", remaining))
            if retry_after is not None:
                raise errors.RateLimited(
                    f"rate limit exceeded for this API key; retry in {retry_after} s",
                    retry_after=retry_after,
                )
        return key_id

    async def list_pets(self, exchange: Exchange) -> None:
        """listPets: a page of animals in id order, ``Link: rel="next"`` when more
        follow (D7-D9)."""
        try:
            await self._authenticate(exchange)
            # Starlette's query_params semantics: the last value of a repeated name wins.
            query = dict(
                parse_qsl(exchange.scope["query_string"].decode("latin-1"), keep_blank_values=True)
            )
            status = pets.parse_status(query.get("status"))
            limit = pets.parse_limit(query.get("limit"))
            cursor = query.get("cursor")
            services = self.services
            after_id = 0 if cursor is None else services.cursors.last_id(cursor, status=status)
            key = (status, after_id, limit)
            cached = None if self._pages is None else self._pages.get(key)
            if cached is None:
                page, more = await pets.list_page(
                    services.store, status=status, limit=limit, after_id=after_id
                )
                body = encode(page)
                next_cursor = (
                    services.cursors.issue(last_id=page[-1].id, status=status) if more else None
                )
                if next_cursor is not None and self._pages is not None:
                    self._pages.put(key, body, next_cursor)
            else:
                body, next_cursor = cached
        except errors.PetstoreError as exc:
            await exchange.respond_error(exc)
            return
        headers: Headers = []
        if next_cursor is not None:
            link = pagination.next_link(
                f"{_base_url(exchange)}v1/pets", cursor=next_cursor, limit=limit, status=status
            )
            headers.append((b"link", link.encode()))
        await exchange.respond(200, body, headers)

    async def create_pet(self, exchange: Exchange) -> None:
        """createPet: validate a NewPet (D1-D4), store it durably, answer 201 with the Pet."""
        services = self.services
        try:
            api_key_id = await self._authenticate(exchange)
            content_type = exchange.header(b"content-type") or ""
            media_type, *params = content_type.lower().split(";")
            charsets = [
                p.split("=", 1)[1].strip(' "') for p in params if p.strip().startswith("charset=")
            ]
            if media_type.strip() != JSON or any(charset != "utf-8" for charset in charsets):
                raise errors.UnsupportedMediaType(
                    "the request body must be application/json (UTF-8)"
                )
            key = idempotency.parse_key(exchange.header(b"idempotency-key"))
            new_pet = _decode_new_pet(
                await _read_body(
                    exchange,
                    limit=services.max_body_bytes,
                    within=services.body_timeout_seconds,
                    deadlines=self._bodies,
                )
            )
            if key is None:
                body, replayed = encode(await pets.create(services.store, new_pet)), False
            else:
                body, replayed = await services.idempotency.create(
                    services.store, new_pet, api_key_id=api_key_id, key=key, now=services.clock()
                )
        except errors.PetstoreError as exc:
            await exchange.respond_error(exc)
            return
        if replayed:
            services.metrics.idempotent_replays.inc()
        await exchange.respond(201, body, [(b"idempotent-replayed", b"true")] if replayed else [])

    async def get_pet(self, exchange: Exchange) -> None:
        """getPet (deprecated, D14): one animal by id; 410 from the sunset on. Every
        answer, errors and 500 included, carries the deprecation headers."""
        services = self.services
        exchange.headers += self._deprecation(_base_url(exchange))
        try:
            await self._authenticate(exchange)
            services.check_sunset()
            pet_id = pets.parse_pet_id(exchange.scope["path"][len(_ITEM_PREFIX) :])
            pet = await pets.get(services.store, pet_id)
        except errors.PetstoreError as exc:
            await exchange.respond_error(exc)
            return
        await exchange.respond(200, encode(pet))


_BASE_URLS: dict[tuple[str, str], str] = {}


def _base_url(exchange: Exchange) -> str:
    """``scheme://host/`` as the client called the service, for the absolute links of
    D9 and D14; cached per scheme and Host, as building it parses the whole URL."""
    scope = exchange.scope
    key = (scope["scheme"], exchange.header(b"host") or "")
    base = _BASE_URLS.get(key)
    if base is None:
        base = str(URL(scope={**scope, "path": "/", "query_string": b"", "root_path": ""}))
        if len(_BASE_URLS) < 64:  # a few hosts in practice; never unbounded
            _BASE_URLS[key] = base
    return base


async def _read_body(
    exchange: Exchange, *, limit: int, within: float, deadlines: BodyDeadlines
) -> bytes:
    """The request body, refused with 413 as soon as it passes ``limit`` bytes, and
    with 400 when it has not fully arrived ``within`` seconds (checked by
    ``deadlines``, up to :data:`BODY_CHECK_SECONDS` late; D17).

    Reading stops once the bytes of a ``Content-Length`` are in (RFC 9112 section
    6.2: they are the whole body), without waiting for the server's closing empty
    message: each message is a round trip to the server's I/O thread.
    """
    too_large = errors.PayloadTooLarge(f"the request body is larger than {limit} bytes")
    declared = exchange.header(b"content-length") or ""
    expected = int(declared) if declared.isdigit() else None
    if expected is not None and expected > limit:
        raise too_large
    task = asyncio.current_task()
    assert task is not None  # ASGI apps are called in a task
    deadlines.watch(task, asyncio.get_running_loop().time() + within)
    chunks, size = [], 0
    message: Message = {"more_body": True}
    try:
        while size != expected and message.get("more_body", False):
            message = await exchange.receive()
            if message["type"] != "http.request":  # http.disconnect, or broken framing
                raise errors.InvalidRequest("body: the request body ended early or is malformed")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise too_large
            chunks.append(chunk)
    except asyncio.CancelledError:
        if deadlines.cut_off(task):
            task.uncancel()
            raise errors.InvalidRequest(
                f"body: the request body did not arrive within {within:g} s"
            ) from None
        raise
    finally:
        deadlines.forget(task)
    return b"".join(chunks)


def _decode_new_pet(body: bytes) -> NewPet:
    """A NewPet from JSON bytes; the error message names the offending field (D8, D10)."""
    if not body.strip():
        raise errors.MalformedJson("the request body is empty; send a NewPet JSON object")
    try:
        return _new_pet_decoder.decode(body)
    except msgspec.ValidationError as exc:
        # Decoding validates as it parses, so a type error can be met before a syntax
        # error further on; a body that is not JSON at all is malformed_json (D10).
        try:
            msgspec.json.decode(body)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            raise errors.MalformedJson("the request body is not valid UTF-8 JSON") from None
        text = str(exc)
        match = _FIELD_RE.search(text)
        field_name = next((g for g in match.groups() if g), "body") if match else "body"
        detail = text.split(" - at ", 1)[0]
        raise errors.InvalidRequest(f"{field_name}: {detail[0].lower()}{detail[1:]}") from None
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        raise errors.MalformedJson("the request body is not valid UTF-8 JSON") from None


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


async def healthz(request: Request) -> Response:
    """Liveness: the process answers. No key needed."""
    return Response(b'{"status":"ok"}', media_type=JSON)


async def readyz(request: Request) -> Response:
    """Readiness: the database answers and its schema is current. No key needed."""
    services = _services(request)
    if not services.schema_usable(await services.store.schema_revision()):
        raise errors.Unavailable("the database schema is older than this code needs")
    limiter = services.rate_limiter
    rate_limits = "off" if limiter is None else await limiter.check()
    return Response(
        msgspec.json.encode({"status": "ready", "rateLimits": rate_limits}), media_type=JSON
    )
