"""A chaos run's history and its checker, in Jepsen's terms. No I/O: the runner
(:mod:`testbed.chaos_network`) records, this module judges.

Every operation of every worker is an :class:`Op`: its kind (``create``, ``read``,
``list``), start and end (monotonic seconds, one clock for all workers), and its
outcome: ``ok`` with the value, ``failed`` with the code (an HTTP status, or 0 for a
connection that got no answer), or ``unknown`` (the client gave up waiting).

:func:`check` compares the history with the store's final state (read after the
faults healed) and names each anomaly:

- **lost**: an acknowledged (201) animal missing from the final state, or changed;
- **duplicated**: one Idempotency-Key (the animal's name here) stored as more than one
  animal, or acknowledged with an id that is not the one stored;
- **stale**: a read that started after a create completed, answered 200, and does not
  show it: getPet 404 (or another value) for that id; a list page whose id range covers
  it (same status) without it. Also a getPet 404 for an id that an earlier completed
  operation had already seen (monotonic reads);
- **skipped**: a ``rel="next"`` walk that started after a create completed, reached
  past its id, and never met it;
- **reused**: one id acknowledged for two keys; **not increasing**: a create that
  started after another completed and got a smaller id (ids follow real time);
- **failed**: operations that failed or timed out after the client's own retries,
  counted apart: they are answers a caller sees, not broken promises.

Reads go to the PostgreSQL primary only (``target_session_attrs=read-write``), and
a 201 is sent after the commit is on two nodes (D26), so every read that starts after
a 201 must see it, whichever instance serves it, across a failover included: that is
what "stale" tests.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, fields

#: An animal as stored and as answered: (id, name, category id, status).
Pet = tuple[int, str, int, str]


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a list walk: when it was asked and answered, the ids it held (in
    the order served, ascending), and whether it linked a next page."""

    started: float
    ended: float
    ids: tuple[int, ...]
    more: bool


@dataclass(frozen=True, slots=True)
class Op:
    """One operation. ``create``: ``key`` and, when ok, ``value``. ``read``: ``asked``
    (the id) and, when ok, ``value`` (None for a 404). ``list``: ``status`` (the filter)
    and the ``pages`` answered (when ok, the walk ended by itself or by its cap)."""

    worker: int
    kind: str
    started: float
    ended: float
    outcome: str
    code: int = 0
    key: str = ""
    asked: int = 0
    status: str = ""
    value: Pet | None = None
    pages: tuple[Page, ...] = ()


@dataclass(frozen=True, slots=True)
class Window:
    """A fault's window: its kind, from its start to the end of its settling time."""

    kind: str
    started: float
    ended: float


@dataclass(slots=True)
class Verdict:
    """What :func:`check` found: for each anomaly kind, one line per instance."""

    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    not_increasing: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Each kind's number of instances."""
        return {f.name: len(getattr(self, f.name)) for f in fields(self)}

    @property
    def clean(self) -> bool:
        """Whether nothing at all was found (failures included)."""
        return not any(self.counts().values())


def check(history: Iterable[Op], stored: Iterable[Pet]) -> Verdict:
    """Judge ``history`` against ``stored`` (every animal of the final state)."""
    ops = list(history)
    verdict = Verdict()
    by_key: dict[str, list[Pet]] = defaultdict(list)
    by_id: dict[int, Pet] = {}
    for pet in stored:
        by_key[pet[1]].append(pet)
        by_id[pet[0]] = pet
    acked = [op for op in ops if op.kind == "create" and op.outcome == "ok" and op.value]
    _check_creates(acked, by_key, by_id, verdict)
    for key, pets in sorted(by_key.items()):
        if len(pets) > 1:
            verdict.duplicated.append(f"key {key} stored as ids {sorted(p[0] for p in pets)}")
    _check_reads(ops, acked, verdict)
    verdict.failed = [
        f"{op.kind} by worker {op.worker} at {op.started:.2f} s: {op.outcome} {op.code}"
        for op in ops
        if op.outcome != "ok"
    ]
    return verdict


def _check_creates(
    acked: list[Op], by_key: dict[str, list[Pet]], by_id: dict[int, Pet], verdict: Verdict
) -> None:
    keys_of_id: dict[int, set[str]] = defaultdict(set)
    for op in acked:
        assert op.value is not None
        keys_of_id[op.value[0]].add(op.key)
        if by_id.get(op.value[0]) != op.value:
            verdict.lost.append(f"{op.value} acknowledged, stored {by_id.get(op.value[0])}")
    verdict.reused = [
        f"id {pet_id} acknowledged for keys {sorted(keys)}"
        for pet_id, keys in sorted(keys_of_id.items())
        if len(keys) > 1
    ]
    # Ids follow real time: a create that started after another ended gets a larger id.
    done = sorted(acked, key=lambda op: op.ended)
    ends = [op.ended for op in done]
    best = list(itertools.accumulate((op.value[0] for op in done if op.value), max))
    for op in acked:
        before = bisect.bisect_left(ends, op.started)
        assert op.value is not None
        if before and best[before - 1] >= op.value[0] and op.value[0] not in _same_key(done, op):
            verdict.not_increasing.append(
                f"id {op.value[0]} (key {op.key}) after id {best[before - 1]} was acknowledged"
            )


def _same_key(done: list[Op], op: Op) -> set[int]:
    """The ids acknowledged for ``op``'s key earlier (a replay answers the same id)."""
    return {o.value[0] for o in done if o.key == op.key and o.value and o is not op}


def _check_reads(ops: list[Op], acked: list[Op], verdict: Verdict) -> None:
    known: dict[int, tuple[float, Pet]] = {}  # id -> (when first acknowledged, value)
    for op in acked:
        assert op.value is not None
        when = known.get(op.value[0], (float("inf"), op.value))[0]
        known[op.value[0]] = (min(when, op.ended), op.value)
    seen: dict[int, float] = {}  # id -> when an operation that showed it first ended
    for op in ops:
        if op.kind == "read" and op.outcome == "ok" and op.value is not None:
            seen[op.value[0]] = min(seen.get(op.value[0], op.ended), op.ended)
        for page in op.pages:
            for pet_id in page.ids:
                seen[pet_id] = min(seen.get(pet_id, page.ended), page.ended)
    by_status: dict[str, list[int]] = {}  # the acknowledged ids of each status, sorted
    for pet_id, (_, value) in sorted(known.items()):
        by_status.setdefault(value[3], []).append(pet_id)
    for op in ops:
        if op.kind == "read" and op.outcome == "ok":
            _check_read(op, known, seen, verdict)
        elif op.kind == "list" and op.outcome == "ok":
            _check_walk(op, known, by_status.get(op.status, []), verdict)


def _check_read(
    op: Op, known: dict[int, tuple[float, Pet]], seen: dict[int, float], verdict: Verdict
) -> None:
    when, value = known.get(op.asked, (float("inf"), None))
    if when < op.started and op.value != value:
        verdict.stale.append(f"getPet {op.asked} at {op.started:.2f} s answered {op.value}")
    elif op.value is None and seen.get(op.asked, float("inf")) < op.started:
        verdict.stale.append(f"getPet {op.asked} at {op.started:.2f} s: 404 after it was seen")


def _check_walk(
    op: Op, known: dict[int, tuple[float, Pet]], of_status: list[int], verdict: Verdict
) -> None:
    """Stale pages and skipped ids of one walk; ``of_status`` is the sorted ids of the
    acknowledged animals of the walk's status."""
    met: set[int] = set()
    low: float = 0  # the next page covers the ids above this
    for page in op.pages:
        met.update(page.ids)
        on_page = set(page.ids)
        high = max(page.ids, default=low) if page.more else float("inf")
        for pet_id in of_status[bisect.bisect_right(of_status, low) :]:
            if pet_id > high:
                break
            if pet_id not in on_page and known[pet_id][0] < page.started:
                verdict.stale.append(f"list page at {page.started:.2f} s covers {pet_id}, lacks it")
        low = high
    within = of_status[: bisect.bisect_right(of_status, low)]
    missed = [i for i in within if known[i][0] < op.started and i not in met]
    if missed:
        verdict.skipped.append(f"walk at {op.started:.2f} s never met ids {missed[:5]}")


def unavailability(ops: Iterable[Op], windows: Iterable[Window]) -> dict[str, tuple[float, float]]:
    """Per fault kind, the longest time (seconds) in any of its windows without a
    successful create, and without a successful read (getPet or list); an edge of
    the window counts as a success."""
    done = sorted(ops, key=lambda op: op.ended)
    worst: dict[str, tuple[float, float]] = {}
    for window in windows:
        gaps = []
        for kinds in (("create",), ("read", "list")):
            edges = [window.started] + [
                op.ended for op in done
                if op.kind in kinds and op.outcome == "ok"
                and window.started <= op.ended < window.ended
            ] + [window.ended]  # fmt: skip
            gaps.append(max(b - a for a, b in itertools.pairwise(edges)))
        old = worst.get(window.kind, (0.0, 0.0))
        worst[window.kind] = (max(old[0], gaps[0]), max(old[1], gaps[1]))
    return worst
