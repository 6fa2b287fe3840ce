"""What crosses the network between the test hosts, captured and searched for what
must never cross it in clear (issue 59): API keys, their hashes, animals' names and
passwords.

:class:`Capture` runs tcpdump on the test hosts' switch (the bridge every host's link
is joined to, :mod:`testbed.hosts`), so it holds every packet between any two hosts:
client to load balancer, load balancer to instance, instance to PostgreSQL and Redis,
monitor to data nodes, streaming replication, pgBackRest. :func:`in_clear` then
reassembles each TCP connection's bytes in each direction (dpkt reads the capture) and
looks for each secret in them, so a secret split over two segments is found too.

A capture proves nothing if it cannot see: :func:`send_in_clear` sends a canary key
over plain TCP between two hosts, which :func:`in_clear` must then find.
"""

from __future__ import annotations

import socket
import time
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import dpkt

from testbed.hosts import Network
from testbed.processes import Daemon, program, wait_for

#: A pcap file's global header: a capture that has started has written it.
_PCAP_HEADER_BYTES = 24


class Capture:
    """tcpdump on ``hosts``' switch, writing every whole packet to ``path`` while the
    block runs. Raises ServerUnavailableError when it does not start."""

    def __init__(self, hosts: Network, path: Path) -> None:
        self.hosts, self.path = hosts, path
        self._daemon: Daemon | None = None

    def __enter__(self) -> Capture:
        tcpdump = program("tcpdump", package="tcpdump")
        # -U: each packet written as it comes; -s 0: whole packets; -Z root: tcpdump
        # keeps the rights to write where we asked.
        argv = [tcpdump, "-i", "br0", "-s", "0", "-U", "-n", "-Z", "root", "-w", str(self.path)]
        self._daemon = Daemon(self.hosts.on_switch(argv), log=self.path.with_suffix(".log"))
        wait_for(
            lambda: self.path.exists() and self.path.stat().st_size >= _PCAP_HEADER_BYTES,
            what="tcpdump on the test hosts' switch",
            seconds=10,
        )
        time.sleep(0.5)  # the header is written before the socket is bound
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._daemon is not None:
            self._daemon.signal(2)  # SIGINT: tcpdump writes what it holds and ends
            self._daemon.reap(grace=10)
            self._daemon = None


def send_in_clear(hosts: Network, *, source: str, target: str, port: int, data: bytes) -> None:
    """Send ``data`` over plain TCP from host ``source`` to ``target``:``port`` (what a
    client without TLS would send), whatever the server makes of it."""
    with (
        hosts.entered(source),
        socket.create_connection((hosts.addresses[target], port), timeout=5) as connection,
    ):
        connection.sendall(data)
        time.sleep(0.2)  # on the wire before the connection closes


def in_clear(path: Path, secrets: Mapping[str, bytes]) -> dict[str, list[str]]:
    """For each of ``secrets`` (by what it is), the TCP flows of the capture at
    ``path`` whose bytes hold it in clear (``10.213.24.12:54012 > 10.213.24.20:5432``);
    an empty list for a secret found nowhere. UDP datagrams (VRRP) are searched whole."""
    flows: dict[str, bytearray] = defaultdict(bytearray)
    with path.open("rb") as capture:
        for _, frame in dpkt.pcap.Reader(capture):
            packet = dpkt.ethernet.Ethernet(frame).data
            if not isinstance(packet, dpkt.ip.IP):
                continue
            segment = packet.data
            if isinstance(segment, dpkt.tcp.TCP | dpkt.udp.UDP) and segment.data:
                source = f"{socket.inet_ntoa(packet.src)}:{segment.sport}"
                target = f"{socket.inet_ntoa(packet.dst)}:{segment.dport}"
                flows[f"{source} > {target}"] += segment.data
    return {
        what: [flow for flow, data in flows.items() if secret in data]
        for what, secret in secrets.items()
    }


def packets(path: Path) -> tuple[int, int]:
    """How many packets, and bytes of them, the capture at ``path`` holds."""
    count = size = 0
    with path.open("rb") as capture:
        for _, frame in dpkt.pcap.Reader(capture):
            count, size = count + 1, size + len(frame)
    return count, size
