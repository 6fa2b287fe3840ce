"""Every server certificate of a running deployment renewed, without downtime, as
docs/operations/tls.md tells the operator: new certificates of the same CA written
over the old files (deploy/tls/make-certificates replaces each file whole), then each
server made to read them in place (PostgreSQL's reload, Redis' ``CONFIG SET``,
HAProxy's runtime API, pgBackRest's SIGHUP) or, for the instances, which read theirs
at start only, a rolling restart behind the load balancers.

:func:`renew` checks the result the way a client sees it: a new handshake with each
server gets a certificate with a new serial number.
"""

from __future__ import annotations

import re
import signal
import socket
import ssl
import subprocess

import psycopg
import redis

from testbed import DEPLOY
from testbed.balancers import CERTIFICATE
from testbed.cluster import Cluster
from testbed.failover import NODES, SOCKETS
from testbed.processes import ServerUnavailableError, wait_for

#: The operator's script that swaps HAProxy's certificate through its runtime API.
REPLACE_HAPROXY_CERTIFICATE = DEPLOY / "tls" / "replace-haproxy-certificate"


def renew(cluster: Cluster) -> list[str]:
    """Renew every server certificate of ``cluster`` (on test hosts, the calling
    thread in the harness's host) and have each server serve its new one, instances
    one at a time; returns one line per server: its address and port, the serials
    before and after. Raises ServerUnavailableError when a server still serves its
    old certificate."""
    endpoints = _endpoints(cluster)
    before = {endpoint: _serial(cluster, *endpoint) for endpoint in endpoints}
    certificates = cluster.certificates
    names = [cluster.hosts.addresses[name] for name in _hosts(cluster)]
    certificates.make(
        *dict.fromkeys(names),
        cluster.postgres.node_certificate,
        f"{CERTIFICATE},{cluster.balancers.address}",
    )
    certificates.give_to_postgres()
    pg = cluster.postgres
    for port, node in [(pg.monitor_port, pg.monitor), *zip(pg.node_ports, pg.nodes, strict=True)]:
        if node is not None:
            with psycopg.connect(f"host={SOCKETS} port={port} user=postgres dbname=postgres") as db:
                db.execute("SELECT pg_reload_conf()")
    address = cluster.hosts.addresses["redis"]
    with redis.Redis(
        host=address, port=cluster.redis_port, password=cluster.redis_password, ssl=True,
        ssl_ca_certs=str(certificates.ca), socket_timeout=5,
    ) as server:  # fmt: skip
        server.config_set("tls-cert-file", str(certificates.certificate(address)))
    for balancer in cluster.balancers.running():
        replaced = subprocess.run(  # noqa: S603 - the deployment's own script
            [str(REPLACE_HAPROXY_CERTIFICATE), str(cluster.balancers.socket(balancer)),
             str(certificates.pem(CERTIFICATE))],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if replaced.returncode != 0:
            raise ServerUnavailableError(f"HAProxy on {balancer}: {replaced.stderr.strip()}")
    if cluster.repository is not None:
        for daemon in cluster.repository.daemons():
            daemon.signal(signal.SIGHUP)
    for index in range(len(cluster.instances)):
        cluster.stop_instance(index, signal.SIGTERM)
        cluster.start_instance(index)
        cluster.wait_in_rotation([index])
    lines = []
    for endpoint, old in before.items():
        wait_for(
            lambda endpoint=endpoint, old=old: _serial(cluster, *endpoint) != old,  # type: ignore[misc]
            what=f"the new certificate on {endpoint[0]}:{endpoint[1]}",
            seconds=10,
        )
        lines.append(f"{endpoint[0]}:{endpoint[1]} serial {old} -> {_serial(cluster, *endpoint)}")
    return lines


def _hosts(cluster: Cluster) -> list[str]:
    """The test hosts whose servers present a certificate of their address."""
    apps = [f"app{i + 1}" for i in range(len(cluster.instances))]
    archive = [] if cluster.repository is None else ["backup"]
    return [*apps, "monitor", *(f"db{i + 1}" for i in range(NODES)), "redis", *archive]


def _endpoints(cluster: Cluster) -> list[tuple[str, int, bool]]:
    """Each TLS server's address, port and whether it is PostgreSQL (TLS after its
    SSLRequest)."""
    addresses, pg = cluster.hosts.addresses, cluster.postgres
    endpoints = [(cluster.balancers.address, cluster.lb_port, False)]
    endpoints += [
        (addresses[f"app{i + 1}"], port, False) for i, port in enumerate(cluster.instance_ports)
    ]
    endpoints.append((addresses["monitor"], pg.monitor_port, True))
    endpoints += [(pg.address(i), port, True) for i, port in enumerate(pg.node_ports)]
    endpoints.append((addresses["redis"], cluster.redis_port, False))
    if cluster.repository is not None:
        from testbed.backups import TLS_PORT

        endpoints += [(addresses[host], TLS_PORT, False) for host in cluster.repository.servers]
    return list(dict.fromkeys(endpoints))


def _serial(cluster: Cluster, address: str, port: int, postgres: bool) -> str:
    """The serial number (hex) of the certificate the server at ``address``:``port``
    presents to a new connection, verified against the deployment's CA."""
    if postgres:  # openssl speaks PostgreSQL's SSLRequest; Python's ssl does not
        shown = subprocess.run(  # noqa: S603
            cluster.hosts.run_in("ctl", [
                "openssl", "s_client", "-connect", f"{address}:{port}", "-starttls",
                "postgres", "-CAfile", str(cluster.certificates.ca), "-verify_return_error",
            ]),
            input="", capture_output=True, text=True, check=False, timeout=10,
        )  # fmt: skip
        found = re.search(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", shown.stdout,
                          re.S)  # fmt: skip
        if found is None:
            raise ServerUnavailableError(f"no certificate from {address}:{port}: {shown.stderr}")
        serial = subprocess.run(
            ["openssl", "x509", "-noout", "-serial"],  # noqa: S607
            input=found[0], capture_output=True, text=True, check=True,
        )  # fmt: skip
        return serial.stdout.strip().removeprefix("serial=")
    trust = ssl.create_default_context(cafile=cluster.certificates.ca)
    with (
        socket.create_connection((address, port), timeout=5) as raw,
        trust.wrap_socket(raw, server_hostname=address) as tls,
    ):
        certificate = tls.getpeercert()
    assert certificate is not None
    return str(certificate["serialNumber"])
