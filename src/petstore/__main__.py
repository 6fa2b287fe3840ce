"""``python -m petstore``: the same as the ``petstore`` command."""

from petstore.cli.main import main

main()
