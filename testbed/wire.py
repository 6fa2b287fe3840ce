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
from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Wait:
    """A client's wait for a server on the wire: when its bytes crossed (wall-clock
    seconds, the capture's), its address, and the seconds until the server's next
    bytes on that connection crossed back."""

    sent: float
    client: str
    seconds: float


def waits(path: Path, server: str, port: int, *, longer_than: float) -> list[Wait]:
    """Each :class:`Wait` longer than ``longer_than`` seconds in the capture at
    ``path`` for the server at ``server``:``port``, in capture order: from a client's
    first bytes not yet answered (a segment sent again counts from the first) to the
    server's next bytes on the same connection. Bytes never answered (a TLS
    close_notify) make no wait."""
    asked: dict[tuple[str, int], float] = {}
    found: list[Wait] = []
    with path.open("rb") as capture:
        for at, frame in dpkt.pcap.Reader(capture):
            packet = dpkt.ethernet.Ethernet(frame).data
            if not isinstance(packet, dpkt.ip.IP) or not isinstance(packet.data, dpkt.tcp.TCP):
                continue
            segment = packet.data
            source, target = socket.inet_ntoa(packet.src), socket.inet_ntoa(packet.dst)
            if not segment.data:
                continue
            if (target, segment.dport) == (server, port):
                asked.setdefault((source, segment.sport), at)
            elif (source, segment.sport) == (server, port):
                sent = asked.pop((target, segment.dport), None)
                if sent is not None and at - sent > longer_than:
                    found.append(Wait(sent=sent, client=target, seconds=at - sent))
    return found
