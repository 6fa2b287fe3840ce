"""The command line of the local deployment (:mod:`testbed.cluster`): ``make cluster``
and ``make cluster-down``.

    python -m testbed.cluster_command up [--hosts] [--instances 3] [--environment production]
                                        [--port 8080]
    python -m testbed.cluster_command down

``up`` leaves everything running and its state in ``.cluster/``; ``down`` stops every
process it started and checks that none is left, no port is taken and no test host
remains.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import time
from pathlib import Path

from testbed import disks
from testbed import hosts as test_hosts
from testbed.cluster import STATE_DIR, STATE_FILE, Cluster
from testbed.processes import ServerUnavailableError, group_alive, kill_group, listening


def down(root: Path) -> list[str]:
    """Stop what a ``python -m testbed.cluster_command up`` started under ``root`` and delete
    it; returns what is still alive or listening afterwards (nothing, normally)."""
    state = json.loads((root / STATE_FILE).read_text())
    for pgid in state["groups"]:
        kill_group(pgid, signal.SIGCONT)
        kill_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(group_alive(g) for g in state["groups"]):
        time.sleep(0.1)
    for pgid in state["groups"]:
        kill_group(pgid, signal.SIGKILL)
    time.sleep(0.2)
    shutil.rmtree(root, ignore_errors=True)
    left = [f"process group {g}" for g in state["groups"] if group_alive(g)]
    if state.get("hosts"):
        left += [f"namespace {name}" for name in test_hosts.remove_all(kill=True)]
    left += [f"disk {point}" for point in disks.remove_all()]
    return left + [f"port {p}" for p in state["ports"] if listening(p)]


def main(argv: list[str] | None = None) -> int:
    """``up`` or ``down``; exit 0 on success, 1 when something failed or was left."""
    parser = argparse.ArgumentParser(prog="python -m testbed.cluster_command", description=__doc__)
    parser.add_argument("command", choices=["up", "down"])
    parser.add_argument(
        "--hosts", action="store_true", help="every part on a test host (network namespace)"
    )
    parser.add_argument("--instances", type=int, default=3)
    parser.add_argument("--environment", choices=["production", "staging"], default="production")
    parser.add_argument("--port", type=int, default=8080, help="HAProxy's port on 127.0.0.1")
    args = parser.parse_args(argv)
    if args.command == "down":
        if not (STATE_DIR / STATE_FILE).exists():
            # Test hosts without a recorded cluster: a chaos-network run's, crashed or
            # still running; cluster-down leaves nothing, so their processes end too.
            if test_hosts.leftovers():
                print(f"Removing test hosts: {', '.join(test_hosts.leftovers())}")
            left = test_hosts.remove_all(kill=True) + disks.remove_all()
            print("No cluster is running (no .cluster/state.json).")
            return 1 if left else 0
        left = down(STATE_DIR)
        print(
            "Cluster stopped; no process, port or test host left." if not left else f"Left: {left}"
        )
        return 1 if left else 0
    if (STATE_DIR / STATE_FILE).exists():
        print("A cluster is already running: make cluster-down first.", file=sys.stderr)
        return 1
    cluster = Cluster(
        STATE_DIR, instances=args.instances, environment=args.environment, port=args.port,
        on_hosts=args.hosts,
    )  # fmt: skip
    try:
        key = cluster.up()
    except ServerUnavailableError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    print(
        f"Petstore ({args.environment}) at {cluster.url}: "
        f"{'two HAProxy hosts (keepalived)' if args.hosts else 'HAProxy'} in front of "
        f"{args.instances} instances, PostgreSQL primary + 2 secondaries, one synchronous "
        f"(pg_auto_failover), Redis. Logs in {STATE_DIR}/."
    )
    print(f"API key (shown once): {key}")
    on = f"ip netns exec {cluster.hosts.namespace('client1')} " if cluster.on_hosts else ""
    ca = cluster.balancers.certificates.ca
    print(f'  {on}curl --cacert {ca} -H "Authorization: Bearer {key}" {cluster.url}/pets')
    print("Stop everything with: make cluster-down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
