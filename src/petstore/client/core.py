"""What :class:`~petstore.client.clients.Client` and
:class:`~petstore.client.clients.AsyncClient` share, none of it I/O: the configuration
(:class:`ClientBase`), what it does with each attempt's outcome (``ClientBase._next``,
on the retry decision of :mod:`petstore.client.retries`), :class:`Page`, the building
of requests and the decoding of responses. Nothing here sends, awaits or sleeps; each
client sends the request, waits the seconds this module names, and hands the response
back here to decode. Errors raised are those of :mod:`petstore.client.errors`, and
ValueError for a bad argument."""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, Generic, TypeVar

import httpx
import msgspec

from petstore import __version__
from petstore.client import urls
from petstore.client.errors import (
    SunsetWarning,
    TransportError,
    raise_for_error,
    service_not_found,
    unexpected_body,
)
from petstore.client.quota import Quota, quota_of
from petstore.client.retries import Retries
from petstore.schemas import NewPet, Pet, PetStatus
from petstore.text import printable_url

#: The environment variable a client made without ``base_url`` reads it from: the
#: service's base URL, ending in ``/v1`` (``http://127.0.0.1:8000/v1``).
ENV_URL = "PETSTORE_URL"
#: The environment variable a client made without ``api_key`` reads the key from.
ENV_API_KEY = "PETSTORE_API_KEY"
#: D14: what replaces getPet, named by :class:`~petstore.client.errors.SunsetWarning`.
REPLACEMENT = "GET /v1/pets with the status filter (list_pets/iter_pets with status=...)"
#: D14: getPet's sunset (ISO 8601 date), named in the warning when a response lacks
#: the ``Sunset`` header.
DEFAULT_SUNSET = "2030-12-05"
_pets_decoder = msgspec.json.Decoder(list[Pet])
_pet_decoder = msgspec.json.Decoder(Pet)
#: Each member of NewPet by its Python name -> its name on the wire.
_NEW_PET_WIRE_NAMES = {field.name: field.encode_name for field in msgspec.structs.fields(NewPet)}
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


class ClientBase(Generic[_Transport]):
    """The configuration and the I/O-free parts of a call, shared by both clients.

    ``base_url`` ends in ``/v1``; ``timeout`` is seconds or an ``httpx.Timeout``, for
    each attempt. ``transport`` and ``event_hooks`` are passed to httpx; without a
    transport the client makes its own, whose connections carry TCP keepalives
    (:data:`~petstore.client.transport.KEEPALIVES`: a connection left on a paused or
    vanished load balancer is dropped within seconds) and go through the proxy the
    environment names (:func:`~petstore.client.transport.transport_options`). The key's
    surrounding white space (a pasted key, a file's line end) is dropped.
    ``last_quota`` is the rate-limit :class:`~petstore.client.quota.Quota` of the last
    response that stated one (D15), for a caller that paces itself.

    A failed call is repeated as :class:`~petstore.client.retries.Retries` says, while a
    new attempt can start within ``retry_for`` seconds of the first (by default
    :data:`~petstore.client.retries.ENV_RETRY_FOR` when set, else 20 s, D27's bound for
    a failover) and at most ``max_retries`` times when that is given; ``backoff`` and
    ``max_sleep`` (seconds) shape the waits. Each attempt may take ``timeout`` on top
    of it: a call that keeps failing ends within about ``retry_for`` plus one
    ``timeout``. Raises ValueError when the base URL or the key is neither given nor
    in the environment, the URL is not a base URL (``petstore.client.urls.base_url``),
    the key holds a space or a control character (never shown), or ``retry_for`` (or
    its variable) or ``max_retries`` is not a number of 0 or more.
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float | httpx.Timeout = 10.0,
        retry_for: float | None = None,
        max_retries: int | None = None,
        backoff: float = 0.5,
        max_sleep: float = 5.0,
        transport: _Transport | None = None,
        event_hooks: EventHooks | None = None,
    ) -> None:
        url = (base_url or os.environ.get(ENV_URL) or "").strip()
        key = (api_key or os.environ.get(ENV_API_KEY) or "").strip()
        if not url:
            raise ValueError(f"no base URL: pass base_url= or set {ENV_URL} (it ends in /v1)")
        self.base_url = urls.base_url(url)
        if not key:
            raise ValueError(f"no API key: pass api_key= or set {ENV_API_KEY}")
        if not all("!" <= c <= "~" for c in key):
            raise ValueError(
                "the API key holds a space, a control or a non-ASCII character inside it "
                "(not shown here); copy it again from petstore keys create"
            )
        self._key = key
        self.last_quota: Quota | None = None
        self.retries = Retries.configured(
            retry_for, max_retries=max_retries, backoff=backoff, max_sleep=max_sleep
        )
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
        return f"{type(self).__name__}(base_url={printable_url(self.base_url)!r})"

    def _next(
        self, attempt: int, outcome: httpx.Response | httpx.TransportError, *, elapsed: float
    ) -> httpx.Response | float:
        """After attempt ``attempt`` (from 0), ``elapsed`` seconds after the first began:
        the response to hand back, or the seconds to sleep before repeating the request
        (:meth:`Retries.wait <petstore.client.retries.Retries.wait>`). Raises
        TransportError when the last attempt had no response and is not repeated, and
        ServiceNotFoundError for a 404 showing that the base URL is wrong."""
        if isinstance(outcome, httpx.Response):
            self.last_quota = quota_of(outcome) or self.last_quota
            if (wrong_base := service_not_found(self.base_url, outcome)) is not None:
                raise wrong_base
        if (wait := self.retries.wait(attempt, outcome, elapsed=elapsed)) is not None:
            return wait
        if isinstance(outcome, httpx.Response):
            return outcome
        detail = str(outcome).replace(self._key, "<API key>")  # httpx may quote a header
        raise TransportError(
            f"no response from {printable_url(self.base_url)} after {attempt + 1} attempt(s) in "
            f"{elapsed:.1f} s: {type(outcome).__name__}: {detail}",
            code="transport_error",
        ) from outcome


def _decode(response: httpx.Response, decode: Callable[[bytes], _T]) -> _T:
    """The body of a success; raises the typed error of a failure (D10)."""
    try:
        return decode(raise_for_error(response).content)
    except msgspec.DecodeError as exc:
        raise unexpected_body(response, exc) from None


def decode_pet(response: httpx.Response) -> Pet:
    """The Pet of a success (createPet, getPet); raises the typed error of a failure."""
    return _decode(response, _pet_decoder.decode)


def decode_page(response: httpx.Response) -> Page:
    """The :class:`Page` of a listPets success, its ``next_url`` from ``Link``;
    raises the typed error of a failure."""
    pets = _decode(response, _pets_decoder.decode)
    return Page(pets, response.links.get("next", {}).get("url"))


def list_params(status: PetStatus | str | None, limit: int | None) -> dict[str, str | int]:
    """The query of listPets' first page: only the filters given."""
    params: dict[str, str | int] = {}
    if status is not None:
        params["status"] = str(status)
    if limit is not None:
        params["limit"] = limit
    return params


def next_params(next_url: str) -> httpx.QueryParams:
    """The query of a ``rel="next"`` link (limit, status, cursor; D9), sent to our own
    base URL: a Link pointing at another host never receives the API key."""
    return httpx.URL(next_url).params


def create_request(
    members: Mapping[str, object], idempotency_key: str | None
) -> tuple[bytes, dict[str, str]]:
    """The NewPet body and headers of createPet: each member of NewPet whose value in
    ``members`` (by its Python name, ``category_id``) is not None, named as NewPet
    names it on the wire (``categoryId``), so a member added to NewPet is sent as it
    is given. Validation of the values is left to the service (one source of the
    rules). Raises ValueError for a name NewPet lacks and for a bad key (see
    :func:`json_request`)."""
    if unknown := sorted(members.keys() - _NEW_PET_WIRE_NAMES.keys()):
        raise ValueError(f"NewPet has no member {', '.join(unknown)}")
    body = {_NEW_PET_WIRE_NAMES[name]: v for name, v in members.items() if v is not None}
    return json_request(msgspec.json.encode(body), idempotency_key)


def json_request(document: bytes, idempotency_key: str | None) -> tuple[bytes, dict[str, str]]:
    """The body and headers of createPet for a NewPet ``document`` sent byte for byte:
    unknown or repeated members, wrong types and all, for the service to judge
    (D2-D4). The key (a new uuid4 when None) as a structured-field string (D16).
    Raises ValueError for a key that is not 1 to 253 printable ASCII characters."""
    key = str(uuid.uuid4()) if idempotency_key is None else idempotency_key
    if not key or len(key) > 253 or not all(" " <= c <= "~" for c in key):
        raise ValueError("idempotency_key: 1 to 253 printable ASCII characters (D16)")
    quoted = key.replace("\\", "\\\\").replace('"', '\\"')
    headers = {"Content-Type": "application/json", "Idempotency-Key": f'"{quoted}"'}
    return document, headers


def deprecated_pet(response: httpx.Response) -> Pet:
    """getPet's answer: a DeprecationWarning naming the Sunset date and the replacement
    (D14, RFC 8594) on every answer but 410, whose GoneError says it instead.
    ``stacklevel`` points the warning at the line that called ``get_pet``."""
    if response.status_code != 410:
        sunset = response.headers.get("sunset")
        try:
            date = parsedate_to_datetime(sunset).date().isoformat() if sunset else None
        except (TypeError, ValueError):
            date = None
        warnings.warn(
            SunsetWarning(
                f"get_pet (GET /v1/pets/{{petId}}) is deprecated and will be removed on "
                f"{date or DEFAULT_SUNSET}; use {REPLACEMENT}",
                sunset=date or DEFAULT_SUNSET,
            ),
            stacklevel=3,
        )
    return decode_pet(response)
