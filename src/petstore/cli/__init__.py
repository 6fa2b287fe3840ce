"""The ``petstore`` command (:func:`petstore.cli.main.main`).

Two sides that never meet: :mod:`~petstore.cli.pets`, :mod:`~petstore.cli.importer`,
:mod:`~petstore.cli.records`, :mod:`~petstore.cli.connection` and
:mod:`~petstore.cli.tables` call a running service through :mod:`petstore.client` and
load nothing of the server; :mod:`~petstore.cli.main`, :mod:`~petstore.cli.keys` and
:mod:`~petstore.cli.store` are the operator's commands (serve, API keys, migrations,
the OpenAPI document) and work on the server's store directly;
:mod:`~petstore.cli.worker` is the app factory ``serve`` hands its workers. Nothing is
imported here, so ``petstore.cli.pets`` stays a client.
"""
