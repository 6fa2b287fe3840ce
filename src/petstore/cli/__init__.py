"""The ``petstore`` command (:func:`petstore.cli.main.main`).

Two sides that never meet: :mod:`~petstore.cli.pets` and :mod:`~petstore.cli.records`
call a running service through :mod:`petstore.client` and load nothing of the
server; :mod:`~petstore.cli.main`, :mod:`~petstore.cli.keys` and
:mod:`~petstore.cli.store` are the operator's commands (serve, API keys, migrations,
the OpenAPI document) and work on the server's store directly. Nothing is imported
here, so ``petstore.cli.pets`` stays a client.
"""
