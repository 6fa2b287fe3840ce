"""``python -m bench``: the load benchmark (see bench/README.md)."""

from bench.run import main

raise SystemExit(main())
