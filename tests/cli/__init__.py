"""The ``petstore`` command: its subcommands through click's runner and as a process."""
