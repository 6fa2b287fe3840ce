"""Test hosts: one Linux network namespace per part of the deployment, joined by veth
links to a bridge that lives in a namespace of its own (the switch).

Every namespace and link is named with :data:`PREFIX`; every address is in one
private /24 (:data:`SUBNET`) that :meth:`Network.up` first checks collides with no
address or route of the namespace it runs in. No namespace has a default route and
nothing is forwarded or translated: a packet sent in a test host can only reach
another test host. ``up`` first removes what a crashed run left; ``down`` removes
every namespace (its links and its processes' sockets go with it).

Faults are iptables rules inside a host (the filter table's INPUT and OUTPUT):
:meth:`Network.cut` drops every packet between two groups of hosts, with
``probability`` below 1 a random share of them (``-m statistic --mode random``);
:meth:`Network.slow` limits a link's rate (``tc``); :meth:`Network.unplug` takes a
host's link down; :meth:`Network.heal` undoes all of them on every host. Needs root
(``ip netns``) and Debian's iproute2 and iptables.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import re
import signal
import subprocess
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from pathlib import Path

from testbed.processes import ServerUnavailableError, postgres_user

#: What every namespace and link this module makes is named with.
PREFIX = "pst-"
#: The test hosts' addresses: .1 is the switch's own, hosts from .10 on.
SUBNET = ipaddress.ip_network("10.213.24.0/24")
#: The load balancers' virtual address (keepalived's, :mod:`testbed.balancers`):
#: never a host's own.
VIRTUAL_ADDRESS = str(SUBNET.network_address + 250)
_SWITCH = f"{PREFIX}switch"
_CLONE_NEWNET = 0x40000000
_NETNS_DIR = Path("/run/netns")


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)  # noqa: S603, S607
    if result.returncode != 0:
        raise ServerUnavailableError(f"ip {' '.join(args)}: {result.stderr.strip()}")


def leftovers() -> list[str]:
    """The namespaces named with :data:`PREFIX` that exist now."""
    if not _NETNS_DIR.is_dir():
        return []
    return sorted(p.name for p in _NETNS_DIR.iterdir() if p.name.startswith(PREFIX))


def remove_all(*, kill: bool = False) -> list[str]:
    """Delete every namespace named with :data:`PREFIX` (their veth ends and the
    bridge go with them) and this namespace's route for :data:`SUBNET`, with ``kill``
    first SIGKILLing every process in them (a crashed harness's orphans); returns the
    namespaces that could not be deleted."""
    for name in leftovers() if kill else []:
        for pid in _pids_in(name):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    for name in leftovers():
        subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)  # noqa: S603, S607
    subprocess.run(["ip", "route", "del", "unreachable", str(SUBNET)],  # noqa: S603, S607
                   capture_output=True, check=False)  # fmt: skip
    return leftovers()


def remove_leftovers() -> list[str]:
    """Delete the namespaces named with :data:`PREFIX` when no process runs in any of
    them (what a crashed run left); when a process runs in one, they are a live run's
    (its switch included) and all are left alone: returns those in use."""
    busy = [name for name in leftovers() if _processes_in(name)]
    if not busy:
        remove_all()
    return busy


def _pids_in(namespace: str) -> list[int]:
    """The processes that run in ``namespace`` (``ip netns pids``)."""
    result = subprocess.run(  # noqa: S603
        ["ip", "netns", "pids", namespace],  # noqa: S607
        capture_output=True,
        text=True,
        check=False,
    )
    return [int(pid) for pid in result.stdout.split()]


def _processes_in(namespace: str) -> bool:
    """Whether a process runs in ``namespace``."""
    return bool(_pids_in(namespace))


def check_subnet_is_free() -> None:
    """Raises ServerUnavailableError when an address or route of this namespace
    overlaps :data:`SUBNET`: the test hosts must collide with nothing."""
    for what in ("addr", "route"):
        out = subprocess.run(  # noqa: S603
            ["ip", "-o", what, "show"],  # noqa: S607
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for word in out.split():
            try:
                network = ipaddress.ip_network(word, strict=False)
            except ValueError:
                continue
            if network.version == 4 and network.overlaps(SUBNET) and network.prefixlen > 0:
                raise ServerUnavailableError(
                    f"{SUBNET} (the test hosts' range) overlaps {network} here ({what})"
                )


def _become(user: str | None) -> list[str]:
    """The argv prefix that runs a program as ``user`` (exec in place)."""
    if user is None:
        return []
    return ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups"]


class Loopback:
    """Every part on this namespace's loopback, 127.0.0.1: ``make cluster``'s
    loopback mode. Has no links to break."""

    cidr = "127.0.0.1/32"

    def __init__(self, names: Iterable[str]) -> None:
        self.names = list(names)
        self.addresses = dict.fromkeys(self.names, "127.0.0.1")
        #: The user PostgreSQL programs run as (None: ourselves).
        self.postgres = postgres_user()

    def run_in(self, name: str, argv: list[str], *, user: str | None = None) -> list[str]:
        """``argv`` as run on host ``name`` (as ``user`` when given, by ``setpriv``,
        which execs in place so the process id is the program's)."""
        return [*_become(user), *argv]

    def namespace(self, name: str) -> str:
        """The namespace of host ``name`` (on loopback: none, this one)."""
        return f"{PREFIX}{name}"

    def entered(self, name: str) -> AbstractContextManager[None]:
        """The calling thread as if on host ``name`` for the block: on loopback it
        is there already."""
        return nullcontext()

    def up(self) -> None:
        """Nothing to make."""

    def down(self) -> list[str]:
        """Nothing to remove; returns []."""
        return []


class Network(Loopback):
    """The test hosts ``names`` (short names: ``lb``, ``db1``...), each a namespace
    ``pst-<name>`` with one address of :data:`SUBNET`; nothing exists until :meth:`up`."""

    cidr = str(SUBNET)
    prefix = SUBNET.prefixlen

    def __init__(self, names: Iterable[str]) -> None:
        super().__init__(names)
        hosts = list(SUBNET.hosts())
        self.addresses = {name: str(hosts[9 + i]) for i, name in enumerate(self.names)}

    def up(self) -> None:
        """Remove a crashed run's leftovers, check the range, then make the switch and every
        host, the range unreachable from this namespace (a route of its own). Raises
        ServerUnavailableError when test hosts with processes in them exist (a live run: one
        at a time), or, after removing what it made, on a failure."""
        if busy := remove_leftovers():
            raise ServerUnavailableError(
                f"test hosts {', '.join(busy)} are in use: stop that run first (make cluster-down)"
            )
        check_subnet_is_free()
        try:
            # From this namespace the range is unreachable: a probe that forgets to
            # enter a host fails at once instead of leaving by the default route.
            _ip("route", "add", "unreachable", str(SUBNET))
            _ip("netns", "add", _SWITCH)
            _ip("-n", _SWITCH, "link", "add", "br0", "type", "bridge")
            _ip("-n", _SWITCH, "link", "set", "br0", "up")
            for name in self.names:
                space, link = self.namespace(name), f"{PREFIX}{name}"[:15]
                _ip("netns", "add", space)
                _ip("-n", _SWITCH, "link", "add", link, "type", "veth",
                    "peer", "name", "eth0", "netns", space)  # fmt: skip
                _ip("-n", _SWITCH, "link", "set", link, "master", "br0", "up")
                _ip("-n", space, "link", "set", "lo", "up")
                _ip("-n", space, "addr", "add", f"{self.addresses[name]}/24", "dev", "eth0")
                _ip("-n", space, "link", "set", "eth0", "up")
        except BaseException:
            remove_all()
            raise

    def down(self) -> list[str]:
        """Kill what still runs in a host (pgBackRest's archive-push detaches from
        the PostgreSQL that started it), then delete every host and the switch;
        returns what is left (nothing, normally)."""
        return remove_all(kill=True)

    def run_in(self, name: str, argv: list[str], *, user: str | None = None) -> list[str]:
        """``argv`` run inside host ``name`` (as ``user`` when given): ``ip netns
        exec`` and ``setpriv`` exec in place, so the process id is the program's."""
        return ["ip", "netns", "exec", self.namespace(name), *_become(user), *argv]

    def on_switch(self, argv: list[str]) -> list[str]:
        """``argv`` run on the switch, where the bridge ``br0`` joins every host's
        link: a packet between any two hosts passes there (a capture's place)."""
        return ["ip", "netns", "exec", _SWITCH, *argv]

    def iptables(self, name: str, *rule: str) -> None:
        """One ``iptables`` command inside host ``name``."""
        subprocess.run(  # noqa: S603
            self.run_in(name, ["iptables", "-w", *rule]), capture_output=True, check=True
        )

    def cut(self, group: Iterable[str], others: Iterable[str], *, probability: float = 1) -> None:
        """Drop packets both ways between every host of ``group`` and every host of
        ``others`` (a share ``probability`` of them, 0 < probability <= 1), by rules
        in ``group``'s hosts."""
        share = f"{probability:.3f}"
        chance = [] if probability >= 1 else ["-m", "statistic", "--mode", "random",
                                              "--probability", share]  # fmt: skip
        for name in group:
            for other in others:
                address = self.addresses[other]
                self.iptables(name, "-A", "INPUT", "-s", address, *chance, "-j", "DROP")
                self.iptables(name, "-A", "OUTPUT", "-d", address, *chance, "-j", "DROP")

    def cut_one_way(self, host: str, others: Iterable[str], *, hears: bool) -> None:
        """Drop one direction only between ``host`` and each of ``others``, by rules in
        ``host``: with ``hears`` it still receives from them but cannot send to them;
        without, it sends to them but cannot hear them."""
        chain, flag = ("OUTPUT", "-d") if hears else ("INPUT", "-s")
        for other in others:
            self.iptables(host, "-A", chain, flag, self.addresses[other], "-j", "DROP")

    def slow(self, host: str, others: Iterable[str], *, rate: str) -> None:
        """Limit what ``host`` sends to each of ``others`` to ``rate`` (``tc``'s
        notation: ``512kbit``) with a queue of at most 50 ms, past which packets are
        dropped: a slow link, one way (netem and prio are not in every kernel; htb and
        a token bucket are)."""
        # htb: everything else through class 1:1 at full speed, what goes to
        # ``others`` through 1:3 at ``rate``, into a token bucket with a short queue.
        self._tc(host, "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "1")
        self._tc(host, "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:1",
                 "htb", "rate", "10gbit")  # fmt: skip
        self._tc(host, "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:3",
                 "htb", "rate", rate, "ceil", rate)  # fmt: skip
        self._tc(host, "qdisc", "add", "dev", "eth0", "parent", "1:3", "handle", "30:",
                 "tbf", "rate", rate, "burst", "16kb", "latency", "50ms")  # fmt: skip
        for other in others:
            self._tc(host, "filter", "add", "dev", "eth0", "protocol", "ip", "parent", "1:0",
                     "prio", "1", "u32", "match", "ip", "dst", f"{self.addresses[other]}/32",
                     "flowid", "1:3")  # fmt: skip

    def slowed(self, host: str) -> int:
        """How many packets went through the slow link of :meth:`slow` at ``host`` so
        far (0 without one)."""
        shown = self._tc(host, "-s", "qdisc", "show", "dev", "eth0")
        _, found, rest = shown.partition("qdisc tbf 30:")
        sent = re.search(r"Sent \d+ bytes (\d+) pkt", rest) if found else None
        return 0 if sent is None else int(sent[1])

    def _tc(self, host: str, *args: str) -> str:
        argv = self.run_in(host, ["tc", *args])
        return subprocess.run(argv, capture_output=True, check=True, text=True).stdout  # noqa: S603

    def unplug(self, name: str) -> None:
        """Take host ``name``'s link down: it sends and receives nothing, ARP
        included (a lost machine, whatever its processes still hold)."""
        _ip("-n", self.namespace(name), "link", "set", "eth0", "down")

    def heal(self, names: Iterable[str] | None = None) -> None:
        """Remove every drop rule and slow link of each of ``names`` (every host by
        default), and plug its link in."""
        for name in self.names if names is None else names:
            self.iptables(name, "-F")
            argv = self.run_in(name, ["tc", "qdisc", "del", "dev", "eth0", "root"])
            subprocess.run(argv, capture_output=True, check=False)  # noqa: S603 - none: fine
            _ip("-n", self.namespace(name), "link", "set", "eth0", "up")

    @contextmanager
    def entered(self, name: str) -> Iterator[None]:
        """Run the calling thread inside host ``name`` for the block: its new sockets
        are that host's (setns(2) acts on one thread only)."""
        libc = ctypes.CDLL(None, use_errno=True)
        with (
            open("/proc/thread-self/ns/net") as home,
            open(_NETNS_DIR / self.namespace(name)) as ns,
        ):
            _setns(libc, ns.fileno())
            try:
                yield
            finally:
                _setns(libc, home.fileno())


def _setns(libc: ctypes.CDLL, fd: int) -> None:
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


#: Where a deployment's parts run: this namespace's loopback, or test hosts.
Hosts = Loopback
