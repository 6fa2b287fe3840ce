"""``make chaos-network``: the deployment on test hosts (one network namespace per
part, :mod:`testbed.hosts`), client workers each on a host of its own running
:class:`petstore.client.Client` through HAProxy, while a seeded random schedule of
faults (:mod:`testbed.faults`) cuts links, drops packets, pauses and kills; every
operation is recorded and the history checked (:mod:`testbed.history`).

    python -m testbed.chaos_network [--duration 420] [--seed N] [--workers 8]
                                    [--kinds all] [--overlap] [--capture]

The seed is printed first: the same seed replays the same schedule (which faults,
in which order, their victims and lengths). The final state is read through HAProxy and
from every PostgreSQL data node directly (:mod:`testbed.final_state`), once the
secondaries caught up, and the views compared. It prints an availability table per
fault kind (:mod:`testbed.availability`), under it each kind's longest gaps against
D27's bounds (:data:`testbed.faults.BOUNDS`; the kinds outside them, two hosts by
design or a primary that is not failed over, are named, not judged), the anomalies
found, how far the list walks reached, and, as the last line (one line, wrapped
here)::

    chaos-network: operations N, acknowledged A, faults F of K kinds, lost L,
    duplicated D, stale S, skipped P, phantom H, stored after an error E,
    nodes agree, failed X of N (retry budget B s), D27 missed M of J

(``nodes differ`` when a data node or the service disagrees with the primary; J
single-host kinds judged, M of them over a bound). Exit status 0 when every anomaly
(ids reused or not increasing too) and failed are 0 and the nodes agree; a D27 miss
is a timing on a shared machine, printed, not failed. Everything it started
(processes, namespaces) is removed when it ends, on an error or a signal (SIGINT,
SIGTERM) too.
"""

from __future__ import annotations

import argparse
import random
import secrets
import shutil
import signal
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from types import FrameType
from typing import Any

import psycopg

from testbed import faults as chaos_faults
from testbed import limit_probe, wire, workload
from testbed.availability import availability, judge, table
from testbed.chaos import RETRIES, TIMEOUT, client
from testbed.cluster import Cluster
from testbed.final_state import disagreements, node_states
from testbed.history import Op, Pet, Window, check
from testbed.hosts import Network
from testbed.overlap import JOINED, Joint, partners, run_pair
from testbed.processes import ServerUnavailableError


def run(
    root: Path, *, seed: int, duration: float, workers: int, kinds: list[str], hold: float,
    settle: float, instances: int = 3, overlap: bool = False, out: Any = sys.stdout,
    then: Callable[[Cluster, str], object] | None = None, capture: bool = False,
) -> dict[str, int]:  # fmt: skip
    """Bring the deployment up on test hosts under ``root``, run the schedule for
    about ``duration`` seconds (at least one of each of ``kinds``; with ``overlap``
    half of the kinds drawn run together with a partner, :mod:`testbed.overlap`),
    heal, check, print the tables and the last line; returns the counts. With
    ``then``, calls it with the healed deployment and the workers' key once the final
    state is read (``make test``'s short recovery drill, :mod:`testbed.recovery_drill`).
    With ``capture``, every packet between hosts is captured while the load runs and
    searched for secrets in clear (:func:`look_at_the_wire`; the counts ``in_clear``
    and ``blind``). Removes everything."""
    warnings.simplefilter("ignore", DeprecationWarning)  # getPet's, on every read
    rng = random.Random(seed)
    print(f"chaos-network seed {seed}: replay with --seed {seed}", file=out, flush=True)
    disk_size = "2g" if chaos_faults.DISK_FULL in kinds else None
    cluster = Cluster(
        root, instances=instances, on_hosts=True, clients=workers + 1, disk_size=disk_size
    )  # the last client host is the rate-limit probe's
    windows: list[Window] = []
    notes = chaos_faults.Notes()
    try:
        began = time.monotonic()
        key = cluster.up()
        probe_key = cluster.create_key("probe", f"{limit_probe.LIMIT}/second")
        print(f"Test hosts up in {time.monotonic() - began:.1f} s: {cluster.url}", file=out)
        with cluster.harness():
            wire = wire_capture(cluster, root / "wire.pcap") if capture else nullcontext()
            with (
                wire,
                workload.load(cluster, key, workers, readers=1) as book,
                limit_probe.probing(cluster, probe_key, f"client{workers + 1}") as probe,
            ):
                canary = _canaries(cluster, key) if capture else {}
                joint = Joint() if overlap else None
                table = chaos_faults.faults(cluster, rng, hold=hold, notes=notes, joint=joint)
                broken = _inject(table, rng, kinds, duration, settle, windows, joint, out)
            if not broken:  # every worker has stopped: the final state is final
                stored = _stored(cluster, key)
                hashes = _key_hashes(cluster) if capture else []
                views = {**node_states(cluster.postgres), "service": stored}
                if then is not None:
                    then(cluster, key)
        if broken:
            print(f"The deployment did not recover: {broken}", file=out)
            _keep_logs(root, out)
            return {"broken": 1}
        limits = limit_probe.judge(probe.answers, notes.redis_outages, probe.stalls)
        if limits.late:  # the instances' logs say why a count failed
            _keep_logs(root, out)
    finally:
        cluster.down()
    for line in notes.measured:
        print(f"  measured: {line}", file=out)
    for note in notes.broken:
        print(f"  broken promise: {note}", file=out)
    found = [key, probe_key, *hashes]
    seen = look_at_the_wire(root / "wire.pcap", cluster, found, canary, out=out)
    waited = _redis_waits(root / "wire.pcap", cluster) if limits.late else None
    counts = report(
        book.ops, windows, stored, disagreements(views), limits, redis_waits=waited, out=out
    )
    return {**counts, **seen, "broken": len(notes.broken)}


def wire_capture(cluster: Cluster, path: Path) -> wire.Capture:
    """A capture of every packet between the cluster's test hosts into ``path``."""
    assert isinstance(cluster.hosts, Network)
    return wire.Capture(cluster.hosts, path)


#: What the harness sends in clear to show that the capture sees plain bytes: a
#: request as a client without TLS would send it, to the Redis host's TLS port.
CANARY_KEY = "petstore_canary-sent-in-clear-" + secrets.token_hex(8)


def _canaries(cluster: Cluster, key: str) -> dict[str, str]:
    """Send :data:`CANARY_KEY` in clear, and create one animal of a name found
    nowhere else through the load balancer (read back once): it then travels every
    path an animal takes (client, balancer, instance, primary, secondaries,
    archive). Returns the animal's name."""
    assert isinstance(cluster.hosts, Network)
    wire.send_in_clear(
        cluster.hosts, source="ctl", target="redis", port=cluster.redis_port,
        data=f"GET /v1/pets HTTP/1.1\r\nAuthorization: Bearer {CANARY_KEY}\r\n\r\n".encode(),
    )  # fmt: skip
    name = f"wire-check-{secrets.token_hex(8)}"
    with client(cluster, key) as api:
        pet = api.create_pet(name=name, category_id=1)
        api.get_pet(pet.id)
    return {"animal": name}


def _key_hashes(cluster: Cluster) -> list[str]:
    """Every API key's hash as the database stores it, read on the primary."""
    url = cluster.postgres.node_url(cluster.postgres.primary())
    with psycopg.connect(url, connect_timeout=5) as connection:
        return [row[0] for row in connection.execute("SELECT key_hash FROM api_keys")]


def look_at_the_wire(
    path: Path, cluster: Cluster, keys: list[str], canary: dict[str, str], *, out: Any
) -> dict[str, int]:
    """Search the capture at ``path`` (none: nothing to say) for ``keys`` (the API
    keys and their hashes as stored), the animal of ``canary`` and every password of
    the deployment; print what was found where, and whether the canary key sent in
    clear was seen. Returns ``in_clear`` (secrets found) and ``blind`` (1 when the
    canary was not found: the capture saw nothing)."""
    if not path.exists():
        return {}
    secrets_ = {f"API key or hash {k[:12]}...": k.encode() for k in keys}
    secrets_[f"animal name {canary['animal']}"] = canary["animal"].encode()
    secrets_.update(
        {f"password of {role}": p.encode() for role, p in cluster.postgres.passwords.items()}
    )
    secrets_["password of Redis"] = cluster.redis_password.encode()
    found = wire.in_clear(path, {**secrets_, "canary": CANARY_KEY.encode()})
    count, size = wire.packets(path)
    leaks = {what: flows for what, flows in found.items() if flows and what != "canary"}
    print(
        f"  wire: {count} packets ({size / 2**20:.1f} MiB) between hosts, searched for "
        f"{len(secrets_)} secrets; in clear: {', '.join(leaks) or 'none'}; the canary sent "
        f"in clear {'found' if found['canary'] else 'NOT found: the capture is blind'}",
        file=out,
    )
    for what, flows in leaks.items():
        print(f"  in clear: {what} in {', '.join(flows[:3])}", file=out)
    return {"in_clear": len(leaks), "blind": int(not found["canary"])}


#: Seconds on the wire past which an answer of Redis is named beside a late fail-open.
WIRE_WAIT = 0.1


def _redis_waits(path: Path, cluster: Cluster) -> list[tuple[float, str, float]] | None:
    """The waits for Redis longer than :data:`WIRE_WAIT` in the capture at ``path``
    (None without one): when the client's bytes crossed (monotonic seconds), the
    client's host and the seconds waited."""
    if not path.exists():
        return None
    names = {address: name for name, address in cluster.hosts.addresses.items()}
    since = time.time() - time.monotonic()  # the capture's clock is the wall clock
    found = wire.waits(path, cluster.hosts.addresses["redis"], cluster.redis_port,
                       longer_than=WIRE_WAIT)  # fmt: skip
    return [(w.sent - since, names.get(w.client, w.client), w.seconds) for w in found]


def _keep_logs(root: Path, out: Any) -> None:
    """Copy the parts' logs out of ``root`` (removed at the end) for a post-mortem."""
    kept = Path(tempfile.mkdtemp(prefix="petstore-chaos-network-logs-"))
    for log in root.glob("*.log"):
        shutil.copy(log, kept / log.name)
    print(f"  logs kept in {kept}", file=out)


def _inject(
    table: dict[str, chaos_faults.Fault], rng: random.Random, kinds: list[str],
    duration: float, settle: float, windows: list[Window], joint: Joint | None, out: Any,
) -> str:  # fmt: skip
    """Run the schedule of ``table``'s faults (with ``joint``, half of them together
    with a partner); returns "" or what did not recover."""
    deadline = time.monotonic() + duration
    began = time.monotonic()
    time.sleep(settle)
    windows.append(Window(kind="no fault (baseline)", started=began, ended=time.monotonic()))
    for n, kind in enumerate(chaos_faults.schedule(rng, kinds)):
        if n >= len(kinds) and time.monotonic() > deadline:
            return ""
        began = time.monotonic()
        others = partners(kind, kinds) if joint is not None and rng.random() < 0.5 else []
        if others:
            kind = JOINED.join((kind, rng.choice(others)))
        print(f"  {began:.0f} fault {n + 1}: {kind}", file=out, flush=True)
        try:
            if joint is not None and others:
                first, second = kind.split(JOINED)
                run_pair(table, (first, second), joint, rng, delay=5.0)
            else:
                table[kind]()
        except (ServerUnavailableError, OSError) as exc:
            return f"{kind}: {exc}"
        time.sleep(settle)
        windows.append(Window(kind=kind, started=began, ended=time.monotonic()))
    return ""


def _stored(cluster: Cluster, key: str) -> list[Pet]:
    """Every animal of the final state, read through HAProxy after healing."""
    with client(cluster, key) as api:
        return list(api.iter_pets(limit=100))


def report(
    ops: list[Op], windows: list[Window], stored: list[Pet], differ: list[str],
    limits: limit_probe.Judgement, *,
    redis_waits: list[tuple[float, str, float]] | None = None, out: Any = sys.stdout,
) -> dict[str, int]:  # fmt: skip
    """Print the availability table and D27's verdict on it, the anomalies found
    (``differ``: how the data nodes' and the service's views of the final state
    differ), what the rate-limit probe saw (``limits``; beside each late fail-open,
    the ``redis_waits`` on the wire in the second before it, when captured:
    :func:`_redis_waits`) and the last line; returns the counts (``operations``,
    ``acknowledged``, ``faults``, ``kinds``, ``nodes_differ``, ``over_limit``,
    ``late_limit``, ``failing_open``, ``redis_stalls``, ``after_stall``,
    ``d27_missed``, ``d27_judged``, then the checker's,
    :meth:`testbed.history.Verdict.counts`)."""
    verdict = check(ops, stored)
    budget = (RETRIES + 1) * TIMEOUT
    rows = availability(ops, windows)
    print("", *table(rows), sep="\n", file=out)
    d27 = judge(rows, chaos_faults.BOUNDS, chaos_faults.OUTSIDE)
    for line in d27.lines:
        print(line, file=out)
    print(
        f"  retry budget: {RETRIES + 1} attempts x {TIMEOUT:.0f} s = {budget:.0f} s "
        "(the sleeps between them aside)",
        file=out,
    )
    counts = verdict.counts()
    for name in counts:
        for line in getattr(verdict, name)[:5]:
            print(f"  {name}: {line}", file=out)
    print(f"  stored after no answer: {counts['stored_after_no_answer']}", file=out)
    walks = [op for op in ops if op.kind == "list" and op.outcome == "ok" and op.pages]
    ends = sum(not op.pages[-1].more for op in walks)
    newest = max((op.value.id for op in ops if op.kind == "create" and op.value), default=0)
    seen = max((max(p.ids) for op in walks for p in op.pages if p.ids), default=0)
    print(
        f"  walks: {len(walks)}, {ends} to the end, {sum(op.after > 0 for op in walks)} from "
        f"a recent cursor; newest id acknowledged {newest}, newest met by a walk {seen}",
        file=out,
    )
    for line in differ:
        print(f"  nodes differ: {line}", file=out)
    print(
        f"  rate limit ({limit_probe.LIMIT}/second, one key): {limits.calls} calls, "
        f"{limits.over_limit} over twice the limit in a second, {limits.failing_open} "
        f"answered failing open over {limits.open_seconds:.1f} s, the last "
        f"{limits.longest_return:.1f} s after Redis returned ({limits.late} later than "
        f"{limit_probe.BOUND:.0f} s or with Redis answering)",
        file=out,
    )
    if limits.stalls:
        print(
            f"  Redis stood still outside its faults {limits.stalls} times (a PING of the "
            f"probe's host unanswered after {limit_probe.STALL:.2f} s), the longest "
            f"{limits.longest_stall:.2f} s; {limits.after_stall} answers failed open "
            f"within {limit_probe.BOUND:.0f} s of one and of no fault (D15)",
            file=out,
        )
    for at in limits.late_at:  # what was going on when a late one was answered
        during = [w.kind for w in windows if w.started <= at <= w.ended] or ["between faults"]
        print(f"  rate limit failing open late: {at - windows[0].started:.1f} s into the run, "
              f"during {', '.join(during)}", file=out)  # fmt: skip
        if redis_waits is not None:  # did Redis answer late on the wire, or the instance?
            near = [f"{host} waited {seconds:.2f} s from {sent - windows[0].started:.1f} s"
                    for sent, host, seconds in redis_waits if at - 1.0 <= sent <= at]  # fmt: skip
            said = "; ".join(near) or f"no Redis answer took over {WIRE_WAIT} s in the second"
            print(f"    on the wire: {said}", file=out)
    acknowledged = sum(op.kind == "create" and op.outcome == "ok" for op in ops)
    # Two kinds drawn together count as two faults, each of its kind.
    faults = [k for w in windows if w.kind != "no fault (baseline)" for k in w.kind.split(JOINED)]
    print(
        f"chaos-network: operations {len(ops)}, acknowledged {acknowledged}, "
        f"faults {len(faults)} of {len(set(faults))} kinds, "
        f"lost {counts['lost']}, duplicated {counts['duplicated']}, stale {counts['stale']}, "
        f"skipped {counts['skipped']}, phantom {counts['phantom']}, "
        f"stored after an error {counts['stored_after_error']}, "
        f"nodes {'differ' if differ else 'agree'}, "
        f"failed {counts['failed']} of {len(ops)} (retry budget {budget:.0f} s), "
        f"D27 missed {d27.missed} of {d27.judged}",
        file=out,
    )
    return {
        "operations": len(ops), "acknowledged": acknowledged, "faults": len(faults),
        "kinds": len(set(faults)), "nodes_differ": len(differ),
        "over_limit": limits.over_limit, "late_limit": limits.late,
        "failing_open": limits.failing_open, "redis_stalls": limits.stalls,
        "after_stall": limits.after_stall, "d27_missed": d27.missed,
        "d27_judged": d27.judged, **counts,
    }  # fmt: skip


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    """The command line of ``make chaos-network``; exit 0 when the checker found
    nothing, 1 otherwise, 2 when the deployment did not come up or recover."""
    parser = argparse.ArgumentParser(prog="python -m testbed.chaos_network", description=__doc__)
    parser.add_argument("--duration", type=float, default=420, help="seconds of faults")
    parser.add_argument("--seed", type=int, default=None, help="the schedule's seed")
    parser.add_argument("--workers", type=int, default=8, help="client hosts, one worker each")
    parser.add_argument("--instances", type=int, default=3)
    parser.add_argument("--hold", type=float, default=8.0, help="seconds a partition lasts")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds after each fault")
    parser.add_argument(
        "--overlap", action="store_true",
        help="run half of the faults together with one that breaks another part",
    )  # fmt: skip
    parser.add_argument(
        "--kinds", default="all",
        help="all, partitions (those that cut links), short (make test's: the partitions "
        "and the monitor lost with the primary), or fault kinds separated by commas",
    )  # fmt: skip
    parser.add_argument(
        "--capture", action="store_true",
        help="capture every packet between the hosts and search it for secrets in clear",
    )  # fmt: skip
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    named = {
        "all": chaos_faults.KINDS,
        "partitions": chaos_faults.PARTITIONS,
        "short": chaos_faults.SHORT_RUN,
    }
    kinds = list(named.get(args.kinds) or args.kinds.split(","))
    if unknown := set(kinds) - set(chaos_faults.KINDS):
        parser.error(f"unknown fault kinds {sorted(unknown)}; the kinds: {chaos_faults.KINDS}")
    signal.signal(signal.SIGTERM, _interrupt)
    with tempfile.TemporaryDirectory(prefix="petstore-chaos-network-") as folder:
        try:
            counts = run(
                Path(folder), seed=seed, duration=args.duration, workers=args.workers,
                kinds=kinds, hold=args.hold, settle=args.settle, instances=args.instances,
                overlap=args.overlap, capture=args.capture,
            )  # fmt: skip
        except ServerUnavailableError as exc:
            print(f"Error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("Interrupted: every process and test host it started is gone.", file=sys.stderr)
            return 130
    if counts["broken"] and "operations" not in counts:
        return 2
    bad = (
        "lost", "duplicated", "stale", "skipped", "phantom", "stored_after_error", "reused",
        "not_increasing", "failed", "nodes_differ", "broken", "over_limit", "late_limit",
        "in_clear", "blind",
    )  # fmt: skip
    return 1 if any(counts.get(name) for name in bad) else 0


if __name__ == "__main__":
    sys.exit(main())
