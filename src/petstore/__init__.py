"""Petstore: the Pet Store Service Interface v1.0.0 over HTTP/JSON.

The wire types are :class:`Pet`, :class:`NewPet`, :class:`PetStatus` and
:class:`Error`. The client is :mod:`petstore.client`; the server is built by
``petstore.server.app.create_app`` from ``petstore.server.config.Settings``. Nothing of the
server is imported here, so a client loads none of it.
"""

from petstore.schemas import Error, NewPet, Pet, PetStatus

__version__ = "1.0.0"
#: The version of the Pet Store Service Interface this package implements.
INTERFACE_VERSION = "1.0.0"

__all__ = ["INTERFACE_VERSION", "Error", "NewPet", "Pet", "PetStatus"]
