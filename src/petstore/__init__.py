"""Petstore: the Pet Store Service Interface v1.0.0 over HTTP/JSON.

The public names: :func:`create_app` builds the ASGI app from :class:`Settings`;
the wire types are :class:`Pet`, :class:`NewPet`, :class:`PetStatus` and
:class:`Error`.
"""

from petstore.app import create_app
from petstore.config import Settings
from petstore.schemas import Error, NewPet, Pet, PetStatus

__version__ = "1.0.0"
#: The version of the Pet Store Service Interface this package implements.
INTERFACE_VERSION = "1.0.0"

__all__ = ["INTERFACE_VERSION", "Error", "NewPet", "Pet", "PetStatus", "Settings", "create_app"]
