"""The Python client of the Petstore service: :class:`~petstore.client.clients.Client`
and :class:`~petstore.client.clients.AsyncClient`::

    from petstore.client import Client, PetStatus

    with Client("http://127.0.0.1:8000/v1", api_key=key) as petstore:
        rex = petstore.create_pet("Rex", category_id=1)

Its connections carry TCP keepalives and a failed call is repeated for up to 20 s,
D27's bound for a failover (``retry_for=``, ``PETSTORE_RETRY_FOR_SECONDS``): a
client rides out the loss of a load balancer, an instance or the primary database.

The package imports nothing of the server (``petstore.server``): a program that
only calls the service loads httpx, msgspec and these modules. Inside it:
:mod:`~petstore.client.clients` does the I/O (send, sleep, close),
:mod:`~petstore.client.core` is what both clients share without I/O (configuration,
requests, pages), :mod:`~petstore.client.retries` the retry decision,
:mod:`~petstore.client.transport` the connections' keepalives,
:mod:`~petstore.client.errors` the error tree (D10's codes).
"""

from petstore.client.clients import (
    DEFAULT_SUNSET,
    ENV_API_KEY,
    ENV_RETRY_FOR,
    ENV_URL,
    KEEPALIVES,
    REPLACEMENT,
    RETRY_FOR,
    AsyncClient,
    Client,
    EventHooks,
    Page,
    Retries,
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
    "ENV_RETRY_FOR",
    "ENV_URL",
    "KEEPALIVES",
    "REPLACEMENT",
    "RETRY_FOR",
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
    "Retries",
    "ServerError",
    "ServiceNotFoundError",
    "SunsetWarning",
    "TransportError",
]
