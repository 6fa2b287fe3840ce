"""The capture's reading of waits for a server (testbed/wire.py's ``waits``), on a
hand-made capture: what a late fail-open of the chaos run is set beside."""

from __future__ import annotations

import socket
from pathlib import Path

import dpkt

from testbed.wire import waits

CLIENT, REDIS, OTHER = "10.213.24.12", "10.213.24.19", "10.213.24.20"


def frame(source: str, sport: int, target: str, dport: int, data: bytes) -> bytes:
    segment = dpkt.tcp.TCP(sport=sport, dport=dport, data=data)
    packet = dpkt.ip.IP(src=socket.inet_aton(source), dst=socket.inet_aton(target),
                        p=dpkt.ip.IP_PROTO_TCP, data=segment)  # fmt: skip
    return bytes(dpkt.ethernet.Ethernet(type=dpkt.ethernet.ETH_TYPE_IP, data=packet))


def test_a_slow_answer_counts_from_the_first_bytes_asked_and_nothing_else_is_a_wait(
    tmp_path: Path,
) -> None:
    path = tmp_path / "wire.pcap"
    with path.open("wb") as capture:
        writer = dpkt.pcap.Writer(capture)
        for at, packet in [
            (1.0, frame(CLIENT, 5000, REDIS, 6379, b"*1\r\n$4\r\nPING\r\n")),
            (1.2, frame(CLIENT, 5000, REDIS, 6379, b"*1\r\n$4\r\nPING\r\n")),  # sent again
            (1.3, frame(REDIS, 6379, CLIENT, 5000, b"+PONG\r\n")),
            (2.0, frame(CLIENT, 5000, REDIS, 6379, b"*1\r\n$4\r\nPING\r\n")),
            (2.01, frame(REDIS, 6379, CLIENT, 5000, b"+PONG\r\n")),  # at once
            (2.5, frame(CLIENT, 5001, OTHER, 5432, b"Q")),  # another server's
            (3.5, frame(OTHER, 5432, CLIENT, 5001, b"Z")),
            (4.0, frame(CLIENT, 5000, REDIS, 6379, b"close")),  # never answered
        ]:
            writer.writepkt(packet, ts=at)
    found = waits(path, REDIS, 6379, longer_than=0.1)
    assert [(w.sent, w.client, round(w.seconds, 6)) for w in found] == [(1.0, CLIENT, 0.3)]
