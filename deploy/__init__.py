"""The deployment: the files an operator uses (``production/``, ``staging/``,
``haproxy.cfg``, ``postgres/``, ``redis/``) and the tools that bring the same topology up on
this machine's loopback (:mod:`deploy.cluster`) and break it under load
(:mod:`deploy.chaos`). docs/operations.md explains each file."""
