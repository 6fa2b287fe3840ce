"""The test bed (``testbed/``): the history checker, the process helpers, and the chaos
runs on test hosts."""
