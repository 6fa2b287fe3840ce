"""The HTTP layer (``server.http``): the operations over ASGI against the real app,
parsing, errors, the served OpenAPI document and docs page."""
