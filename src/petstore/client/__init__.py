"""The Python client of the Petstore service: :class:`~petstore.client.clients.Client`
and :class:`~petstore.client.clients.AsyncClient`::

    from petstore.client import Client, PetStatus

    with Client("http://127.0.0.1:8000/v1", api_key=key) as petstore:
        rex = petstore.create_pet("Rex", category_id=1)

The package imports nothing of the server (``petstore.server``): a program that
only calls the service loads httpx, msgspec and these modules. Inside it:
:mod:`~petstore.client.clients` does the I/O (send, sleep, close),
:mod:`~petstore.client.core` is what both clients share without I/O (retry decision,
requests, pages), :mod:`~petstore.client.errors` is the error tree (D10's codes).
"""

from petstore.client.clients import (
    DEFAULT_SUNSET,
    ENV_API_KEY,
    ENV_URL,
    REPLACEMENT,
    AsyncClient,
    Client,
    EventHooks,
    Page,
    SunsetWarning,
)
from petstore.client.errors import (
    AuthenticationError,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    GoneError,
    NotFoundError,
    PayloadError,
    PetstoreClientError,
    RateLimitedError,
    ServerError,
    ServiceNotFoundError,
    TransportError,
)
from petstore.client.quota import Quota
from petstore.schemas import Pet, PetStatus

__all__ = [
    "DEFAULT_SUNSET",
    "ENV_API_KEY",
    "ENV_URL",
    "REPLACEMENT",
    "AsyncClient",
    "AuthenticationError",
    "BadRequestError",
    "Client",
    "ConflictError",
    "EventHooks",
    "ForbiddenError",
    "GoneError",
    "NotFoundError",
    "Page",
    "PayloadError",
    "Pet",
    "PetStatus",
    "PetstoreClientError",
    "Quota",
    "RateLimitedError",
    "ServerError",
    "ServiceNotFoundError",
    "SunsetWarning",
    "TransportError",
]
