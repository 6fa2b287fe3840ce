"""The test bed: the Python harness that brings the deployment of ``deploy/`` up on
this machine (:mod:`testbed.cluster`, ``make cluster``), breaks it under load
(:mod:`testbed.chaos`, :mod:`testbed.chaos_network`) and checks what the clients saw
(:mod:`testbed.history`); :mod:`testbed.processes` is how tests and bench start and
stop servers. It drives the service from outside, through :mod:`petstore.client` and
real processes. Operators do not install it: the wheel holds ``petstore`` only, and
what an operator ships stays in ``deploy/`` (docs/operations/)."""

from pathlib import Path

#: The operator's files that the test bed runs as they are (haproxy.cfg,
#: keepalived/, postgres/, pgbackrest/, redis/, the environments' settings).
DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
