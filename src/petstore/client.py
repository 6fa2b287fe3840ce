"""A typed Python client of the Petstore service, on httpx: :class:`Client` and
:class:`AsyncClient`, the same methods on both.

    with Client("http://127.0.0.1:8000/v1", api_key=key) as petstore:
        rex = petstore.create_pet("Rex", category_id=1)
        for pet in petstore.iter_pets(status=PetStatus.AVAILABLE):
            print(pet.id, pet.name)

Without arguments the base URL and key come from ``PETSTORE_URL`` and
``PETSTORE_API_KEY``. What the client does for its caller:

- pages: ``iter_pets`` follows ``Link: rel="next"`` until it is absent (D9);
- retries safely: every call is retried on connection errors and timeouts, and on
  429, 503 and 409 ``idempotency_conflict``, with exponential backoff and full
  jitter, or exactly ``Retry-After`` when the service sends it (D15); ``create_pet``
  sends one ``Idempotency-Key`` on every attempt so a retry never adds twice (D16);
- warns: ``get_pet`` emits a DeprecationWarning naming the sunset and the
  replacement (D14);
- raises the typed errors of :mod:`petstore.client_errors` (D10).
"""

from __future__ import annotations

import itertools
import os
import random
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, Generic, Self, TypeVar

import anyio
import httpx
import msgspec

from petstore import __version__
from petstore.client_errors import TransportError, raise_for_error, retry_after, unexpected_body
from petstore.schemas import Pet, PetStatus

ENV_URL = "PETSTORE_URL"
ENV_API_KEY = "PETSTORE_API_KEY"
#: D14: what replaces getPet, and its sunset when a response lacks the header.
REPLACEMENT = "GET /v1/pets with the status filter (list_pets/iter_pets with status=...)"
DEFAULT_SUNSET = "2030-12-05"

_RETRY_STATUSES = frozenset({409, 429, 503})
#: Failures after which the request may or may not have arrived: safe to repeat only
#: because GETs are safe and a POST carries its Idempotency-Key.
_TRANSIENT = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
_pets_decoder = msgspec.json.Decoder(list[Pet])
_pet_decoder = msgspec.json.Decoder(Pet)
_T = TypeVar("_T")
_Transport = TypeVar("_Transport", httpx.BaseTransport, httpx.AsyncBaseTransport)
EventHooks = Mapping[str, Sequence[Callable[..., Any]]]


@dataclass(frozen=True, slots=True)
class Page:
    """One page of ``listPets``: the animals in id order (D7) and the absolute URL of
    the next page from ``Link: rel="next"``, None on the last page (D9)."""

    pets: list[Pet]
    next_url: str | None = None

    @property
    def has_next(self) -> bool:
        return self.next_url is not None


class _Base(Generic[_Transport]):
    """The configuration and the I/O-free parts of a call, shared by both clients.

    ``base_url`` ends in ``/v1``; ``timeout`` is seconds or an ``httpx.Timeout``. A
    failed call is retried up to ``max_retries`` times; the n-th wait is drawn from 0
    to ``backoff * 2**n`` seconds, or is the ``Retry-After``, never above ``max_sleep``.
    ``transport`` and ``event_hooks`` are passed to httpx. Raises ValueError when the
    base URL or the key is neither given nor in the environment.
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float | httpx.Timeout = 10.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_sleep: float = 30.0,
        transport: _Transport | None = None,
        event_hooks: EventHooks | None = None,
    ) -> None:
        url = base_url or os.environ.get(ENV_URL)
        key = api_key or os.environ.get(ENV_API_KEY)
        if not url:
            raise ValueError(f"no base URL: pass base_url or set {ENV_URL} (it ends in /v1)")
        if not key:
            raise ValueError(f"no API key: pass api_key or set {ENV_API_KEY}")
        if max_retries < 0:
            raise ValueError("max_retries must be 0 or more")
        self.base_url = url.rstrip("/")
        self.max_retries, self.backoff, self.max_sleep = max_retries, backoff, max_sleep
        headers = {
            "Authorization": f"Bearer {key}",
            "Accept": "application/json",
            "User-Agent": f"petstore-python/{__version__}",
        }
        self._connect(
            transport,
            base_url=f"{self.base_url}/",
            headers=headers,
            timeout=timeout,
            event_hooks=event_hooks,
        )

    def _connect(self, transport: _Transport | None, **options: Any) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:  # never the key
        return f"{type(self).__name__}(base_url={self.base_url!r})"

    def _next(
        self, attempt: int, outcome: httpx.Response | httpx.TransportError
    ) -> httpx.Response | float:
        """After attempt ``attempt`` (from 0): the response to hand back, or the seconds
        to sleep before repeating the request (D15, D16). Stops at a response that is
        not 409/429/503, when retries are spent, or at a ``Retry-After`` above
        ``max_sleep`` (the caller gets the error with its ``retry_after``).
        Raises TransportError when the last attempt had no response."""
        if isinstance(outcome, httpx.Response):
            wait = retry_after(outcome)
            if (
                outcome.status_code not in _RETRY_STATUSES
                or attempt >= self.max_retries
                or (wait is not None and wait > self.max_sleep)
            ):
                return outcome
        elif isinstance(outcome, _TRANSIENT) and attempt < self.max_retries:
            wait = None
        else:
            raise TransportError(
                f"no response from {self.base_url} after {attempt + 1} attempt(s): "
                f"{type(outcome).__name__}: {outcome}",
                code="transport_error",
            ) from outcome
        if wait is None:  # exponential backoff with full jitter
            wait = random.uniform(0, min(self.max_sleep, self.backoff * 2**attempt))
        return wait


def _decode(response: httpx.Response, decode: Callable[[bytes], _T]) -> _T:
    """The body of a success; raises the typed error of a failure (D10)."""
    try:
        return decode(raise_for_error(response).content)
    except msgspec.DecodeError as exc:
        raise unexpected_body(response, exc) from None


def _page(response: httpx.Response) -> Page:
    pets = _decode(response, _pets_decoder.decode)
    return Page(pets, response.links.get("next", {}).get("url"))


def _list_params(status: PetStatus | str | None, limit: int | None) -> dict[str, str | int]:
    params: dict[str, str | int] = {}
    if status is not None:
        params["status"] = str(status)
    if limit is not None:
        params["limit"] = limit
    return params


def _next_params(next_url: str) -> httpx.QueryParams:
    """The query of a ``rel="next"`` link (limit, status, cursor; D9), sent to our own
    base URL: a Link pointing at another host never receives the API key."""
    return httpx.URL(next_url).params


def _create_request(
    name: str, category_id: int, status: PetStatus | str | None, idempotency_key: str | None
) -> tuple[bytes, dict[str, str]]:
    """The NewPet body and headers of createPet; the key as a structured-field string
    (D16). Validation of the body is left to the service (one source of the rules)."""
    body: dict[str, object] = {"name": name, "categoryId": category_id}
    if status is not None:
        body["status"] = str(status)
    key = str(uuid.uuid4()) if idempotency_key is None else idempotency_key
    if not key or len(key) > 253 or not all(" " <= c <= "~" for c in key):
        raise ValueError("idempotency_key: 1 to 253 printable ASCII characters (D16)")
    quoted = key.replace("\\", "\\\\").replace('"', '\\"')
    headers = {"Content-Type": "application/json", "Idempotency-Key": f'"{quoted}"'}
    return msgspec.json.encode(body), headers


def _deprecated_pet(response: httpx.Response) -> Pet:
    """getPet's answer: a DeprecationWarning naming the Sunset date and the replacement
    (D14, RFC 8594) on every answer but 410, whose GoneError says it instead."""
    if response.status_code != 410:
        sunset = response.headers.get("sunset")
        try:
            date = parsedate_to_datetime(sunset).date().isoformat() if sunset else None
        except (TypeError, ValueError):
            date = None
        warnings.warn(
            f"get_pet (GET /v1/pets/{{petId}}) is deprecated and will be removed on "
            f"{date or DEFAULT_SUNSET}; use {REPLACEMENT}",
            DeprecationWarning,
            stacklevel=3,
        )
    return _decode(response, _pet_decoder.decode)


class Client(_Base[httpx.BaseTransport]):
    """The synchronous client; ``with Client() as petstore:`` closes its connections."""

    _http: httpx.Client

    def _connect(self, transport: httpx.BaseTransport | None, **options: Any) -> None:
        self._http = httpx.Client(transport=transport, **options)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request, repeated as :meth:`_Base._next` says. Raises TransportError."""
        for attempt in itertools.count():
            try:
                outcome: httpx.Response | httpx.TransportError
                outcome = self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                outcome = exc
            if isinstance(step := self._next(attempt, outcome), httpx.Response):
                return step
            time.sleep(step)
        raise AssertionError("unreachable")

    def list_pets(self, status: PetStatus | str | None = None, *, limit: int | None = None) -> Page:
        """One page of animals, ``limit`` 1 to 100 (default 20 by the service).
        Raises BadRequestError for a bad ``status`` or ``limit`` (D8)."""
        return _page(self._send("GET", "pets", params=_list_params(status, limit)))

    def iter_pets(
        self, status: PetStatus | str | None = None, *, limit: int = 100
    ) -> Iterator[Pet]:
        """Every animal (with ``status``), in id order, fetching ``limit`` per page and
        following ``rel="next"`` until it is absent (D9)."""
        page = self.list_pets(status, limit=limit)
        yield from page.pets
        while page.next_url is not None:
            page = _page(self._send("GET", "pets", params=_next_params(page.next_url)))
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
        content, headers = _create_request(name, category_id, status, idempotency_key)
        response = self._send("POST", "pets", content=content, headers=headers)
        return _decode(response, _pet_decoder.decode)

    def get_pet(self, pet_id: int) -> Pet:
        """One animal by id. Deprecated (D14): warns; raises GoneError after the
        sunset and NotFoundError when there is no such animal (D11)."""
        return _deprecated_pet(self._send("GET", f"pets/{int(pet_id)}"))


class AsyncClient(_Base[httpx.AsyncBaseTransport]):
    """The asynchronous twin of :class:`Client`: ``async with``, an
    ``httpx.AsyncBaseTransport``, coroutine event hooks, ``async for`` in ``iter_pets``."""

    _http: httpx.AsyncClient

    def _connect(self, transport: httpx.AsyncBaseTransport | None, **options: Any) -> None:
        self._http = httpx.AsyncClient(transport=transport, **options)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        for attempt in itertools.count():
            try:
                outcome: httpx.Response | httpx.TransportError
                outcome = await self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                outcome = exc
            if isinstance(step := self._next(attempt, outcome), httpx.Response):
                return step
            await anyio.sleep(step)
        raise AssertionError("unreachable")

    async def list_pets(
        self, status: PetStatus | str | None = None, *, limit: int | None = None
    ) -> Page:
        """See :meth:`Client.list_pets`."""
        return _page(await self._send("GET", "pets", params=_list_params(status, limit)))

    async def iter_pets(
        self, status: PetStatus | str | None = None, *, limit: int = 100
    ) -> AsyncIterator[Pet]:
        """See :meth:`Client.iter_pets`; use with ``async for``."""
        page = await self.list_pets(status, limit=limit)
        for pet in page.pets:
            yield pet
        while page.next_url is not None:
            page = _page(await self._send("GET", "pets", params=_next_params(page.next_url)))
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
        content, headers = _create_request(name, category_id, status, idempotency_key)
        response = await self._send("POST", "pets", content=content, headers=headers)
        return _decode(response, _pet_decoder.decode)

    async def get_pet(self, pet_id: int) -> Pet:
        """See :meth:`Client.get_pet`."""
        return _deprecated_pet(await self._send("GET", f"pets/{int(pet_id)}"))
