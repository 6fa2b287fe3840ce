"""The three operations under ``/v1`` plus health: parse, authenticate, call one rule.

``listPets`` and ``createPet`` share the path ``/v1/pets`` and so one route, so a
405 there names both methods in ``Allow``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import parse_qsl

import msgspec
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from petstore import errors, idempotency, pagination, pets
from petstore.auth import KeyVerifier
from petstore.idempotency import IdempotentCreates
from petstore.metrics import Metrics
from petstore.ratelimit import RateLimiter
from petstore.schemas import NewPet, encode
from petstore.store import Store

JSON = "application/json"
_new_pet_decoder = msgspec.json.Decoder(NewPet)
_FIELD_RE = re.compile(r"`\$\.(\w+)`|field `(\w+)`")


@dataclass(frozen=True, slots=True)
class Services:
    """What the endpoints use, built once per app by the lifespan."""

    store: Store
    verifier: KeyVerifier
    cursors: pagination.CursorSigner
    clock: Callable[[], datetime]
    max_body_bytes: int
    body_timeout_seconds: float
    schema_usable: Callable[[str | None], bool]
    deprecation_headers: dict[str, str]
    rate_limiter: RateLimiter | None
    idempotency: IdempotentCreates
    metrics: Metrics


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


async def _authenticate(request: Request, services: Services) -> int:
    """The caller's API key id (D12), counted against its rate limit (D15); every
    ``/v1/pets`` operation starts here. The RateLimit fields go on the response
    whatever it turns out to be (the middleware adds ``response_headers``)."""
    limiter = services.rate_limiter
    if limiter is not None:
        request.state.response_headers = {"RateLimit-Policy": limiter.policy_header}
    key_id = await services.verifier.verify(request.headers.get("authorization"))
    request.state.api_key_id = key_id  # logged by id, never the key (D13)
    if limiter is not None:
        request.state.response_headers, retry_after = await limiter.hit(key_id)
        if retry_after is not None:
            raise errors.RateLimited(
                f"rate limit exceeded for this API key; retry in {retry_after} s",
                retry_after=retry_after,
            )
    return key_id


def _json(body: bytes, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(body, status_code=status, headers=headers, media_type=JSON)


async def pets_collection(request: Request) -> Response:
    """``GET /v1/pets`` (listPets) and ``POST /v1/pets`` (createPet)."""
    if request.method == "POST":
        return await create_pet(request)
    return await list_pets(request)


async def list_pets(request: Request) -> Response:
    """listPets: a page of animals in id order, ``Link: rel="next"`` when more follow (D7-D9)."""
    services = _services(request)
    await _authenticate(request, services)
    # What Starlette's query_params does (last value of a repeated name wins), as a
    # plain dict: the MultiDict it builds is not needed here.
    query = dict(parse_qsl(request.scope["query_string"].decode("latin-1"), keep_blank_values=True))
    status = pets.parse_status(query.get("status"))
    limit = pets.parse_limit(query.get("limit"))
    cursor = query.get("cursor")
    after_id = 0 if cursor is None else services.cursors.last_id(cursor, status=status)
    page, more = await pets.list_page(services.store, status=status, limit=limit, after_id=after_id)
    headers = None
    if more:
        next_cursor = services.cursors.issue(last_id=page[-1].id, status=status)
        headers = {
            "Link": pagination.next_link(
                f"{_base_url(request)}v1/pets",
                cursor=next_cursor,
                limit=limit,
                status=status,
            )
        }
    return _json(encode(page), headers=headers)


async def create_pet(request: Request) -> Response:
    """createPet: validate a NewPet (D1-D4), store it durably, answer 201 with the Pet."""
    services = _services(request)
    api_key_id = await _authenticate(request, services)
    media_type, *params = request.headers.get("content-type", "").lower().split(";")
    charsets = [p.split("=", 1)[1].strip(' "') for p in params if p.strip().startswith("charset=")]
    if media_type.strip() != JSON or any(charset != "utf-8" for charset in charsets):
        raise errors.UnsupportedMediaType("the request body must be application/json (UTF-8)")
    key = idempotency.parse_key(request.headers.get("idempotency-key"))
    new_pet = _decode_new_pet(
        await _read_body(
            request, limit=services.max_body_bytes, within=services.body_timeout_seconds
        )
    )
    if key is None:
        return _json(encode(await pets.create(services.store, new_pet)), status=201)
    body, replayed = await services.idempotency.create(
        services.store, new_pet, api_key_id=api_key_id, key=key, now=services.clock()
    )
    if replayed:
        services.metrics.idempotent_replays.inc()
    return _json(body, status=201, headers={"Idempotent-Replayed": "true"} if replayed else None)


async def get_pet(request: Request) -> Response:
    """getPet (deprecated, D14): one animal by id; 410 from the sunset on."""
    services = _services(request)
    headers = _deprecation_headers(request, services)
    try:
        await _authenticate(request, services)
        pets.check_sunset(services.clock())
        pet = await pets.get(services.store, pets.parse_pet_id(request.path_params["pet_id"]))
    except errors.PetstoreError as exc:
        exc.headers.update(headers)
        raise
    except Exception as exc:  # a 500 is a response of getPet too
        fault = errors.InternalError("an unexpected error occurred; it has been logged")
        fault.headers.update(headers)
        raise fault from exc
    return _json(encode(pet), headers=headers)


_BASE_URLS: dict[tuple[str, str], str] = {}


def _base_url(request: Request) -> str:
    """``scheme://host/`` as the client called the service, for the absolute links of
    D9 and D14; cached per scheme and Host, as Starlette builds and parses the whole
    URL to give it."""
    key = (request.scope["scheme"], request.headers.get("host", ""))
    base = _BASE_URLS.get(key)
    if base is None:
        base = str(request.base_url)
        if len(_BASE_URLS) < 64:  # a few hosts in practice; never unbounded
            _BASE_URLS[key] = base
    return base


def _deprecation_headers(request: Request, services: Services) -> dict[str, str]:
    """D14's headers, the Link absolute for the host the client called."""
    link = f'<{_base_url(request)}v1/docs/deprecations>; rel="deprecation"; type="text/html"'
    return {**services.deprecation_headers, "Link": link}


async def _read_body(request: Request, *, limit: int, within: float) -> bytes:
    """The request body, refused with 413 as soon as it passes ``limit`` bytes, and
    with 400 when it has not fully arrived ``within`` seconds (D17)."""
    too_large = errors.PayloadTooLarge(f"the request body is larger than {limit} bytes")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks, size = [], 0
    try:
        async with asyncio.timeout(within):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise too_large
                chunks.append(chunk)
    except TimeoutError:
        raise errors.InvalidRequest(
            f"body: the request body did not arrive within {within:g} s"
        ) from None
    except ClientDisconnect:  # also how the server reports broken chunked framing
        raise errors.InvalidRequest("body: the request body ended early or is malformed") from None
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
        field = next((g for g in match.groups() if g), "body") if match else "body"
        detail = text.split(" - at ", 1)[0]
        raise errors.InvalidRequest(f"{field}: {detail[0].lower()}{detail[1:]}") from None
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        raise errors.MalformedJson("the request body is not valid UTF-8 JSON") from None


async def healthz(request: Request) -> Response:
    """Liveness: the process answers. No key needed."""
    return _json(b'{"status":"ok"}')


async def readyz(request: Request) -> Response:
    """Readiness: the database answers and its schema is current. No key needed."""
    services = _services(request)
    if not services.schema_usable(await services.store.schema_revision()):
        raise errors.Unavailable("the database schema is older than this code needs")
    limiter = services.rate_limiter
    rate_limits = "off" if limiter is None else await limiter.check()
    return _json(msgspec.json.encode({"status": "ready", "rateLimits": rate_limits}))
