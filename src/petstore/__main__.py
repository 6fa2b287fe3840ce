"""``python -m petstore``: the same as the ``petstore`` command."""

from petstore.cli import main

main()
