"""Petstore: the Pet Store Service Interface v1.0.0 over HTTP/JSON.

The public names: :func:`create_app` builds the ASGI app from :class:`Settings`;
the wire types are :class:`Pet`, :class:`NewPet`, :class:`PetStatus` and
:class:`Error`.
"""

from typing import TYPE_CHECKING, Any

from petstore.schemas import Error, NewPet, Pet, PetStatus

if TYPE_CHECKING:
    from petstore.app import create_app
    from petstore.config import Settings

__version__ = "1.0.0"
#: The version of the Pet Store Service Interface this package implements.
INTERFACE_VERSION = "1.0.0"

__all__ = ["INTERFACE_VERSION", "Error", "NewPet", "Pet", "PetStatus", "Settings", "create_app"]


def __getattr__(name: str) -> Any:
    # The server stack loads only when asked for, so `import petstore.client` stays light.
    if name == "create_app":
        from petstore.app import create_app

        return create_app
    if name == "Settings":
        from petstore.config import Settings

        return Settings
    raise AttributeError(f"module 'petstore' has no attribute {name!r}")
