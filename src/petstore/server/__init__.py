"""The Petstore service: :func:`petstore.server.app.create_app` builds it from
:class:`petstore.server.config.Settings`.

Layers, each a package, importing one way only (the contracts in ``pyproject.toml``,
checked by ``make lint``)::

    app, shutdown          wiring: everything built once; SIGTERM's drain
    http                   the ASGI pipeline, routes, request parsing, the operations
    rules                  pets, keys, auth, idempotency, pagination, rate limits
    store                  the only SQL: SQLite and PostgreSQL, migrations
    telemetry, errors, config

Nothing is imported here, so importing a subpackage builds nothing.
"""
