"""The store (``server.store``): both backends, the repositories, the speed devices,
migrations, bounded waits."""
