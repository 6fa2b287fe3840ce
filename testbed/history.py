"""A chaos run's history and its checker, in Jepsen's terms. No I/O: the runner
(:mod:`testbed.chaos_network`) records, this module judges.

Every operation of every worker is an :class:`Op` (:mod:`testbed.ops`): its kind
(``create``, ``read``, ``list``), start and end (monotonic seconds, one clock for all
workers), and its outcome: ``ok`` with the value, ``failed`` with the code (an HTTP
status, or 0 for a connection that got no answer), or ``unknown`` (the client gave up
waiting).

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
  past its id (above the cursor it began from), and never met it;
- **phantom**: a getPet or a list page that showed an animal absent from the final
  state, or different there;
- **stored after an error**: a create answered a definite error (a status other than
  :data:`~testbed.ops.NO_ANSWER`'s) whose animal is in the final state all the same.
  One stored after no answer (a timeout, a lost connection) is no broken promise: it
  is counted apart, as ``stored_after_no_answer``;
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

from testbed.ops import NO_ANSWER, Op, Page, Pet, Window, shown
from testbed.reads import check_reads, phantoms

__all__ = ["NO_ANSWER", "Op", "Page", "Pet", "Verdict", "Window", "check"]


@dataclass(slots=True, kw_only=True)
class Verdict:
    """What :func:`check` found: for each anomaly kind, one line per instance."""

    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    phantom: list[str] = field(default_factory=list)
    stored_after_error: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    not_increasing: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    #: Not a defect: creates that got no answer and whose animal was stored.
    stored_after_no_answer: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Each kind's number of instances."""
        return {f.name: len(getattr(self, f.name)) for f in fields(self)}

    @property
    def clean(self) -> bool:
        """Whether nothing at all was found (failures included; animals stored after
        no answer are no finding)."""
        counts = self.counts()
        counts.pop("stored_after_no_answer")
        return not any(counts.values())


def check(history: Iterable[Op], stored: Iterable[Pet]) -> Verdict:
    """Judge ``history`` against ``stored`` (every animal of the final state)."""
    ops = list(history)
    verdict = Verdict()
    by_key: dict[str, list[Pet]] = defaultdict(list)
    by_id: dict[int, Pet] = {}
    for pet in stored:
        by_key[pet.name].append(pet)
        by_id[pet.id] = pet
    acked = [op for op in ops if op.kind == "create" and op.outcome == "ok" and op.value]
    _check_creates(acked, by_key, by_id, verdict)
    for key, pets in sorted(by_key.items()):
        if len(pets) > 1:
            verdict.duplicated.append(f"key {key} stored as ids {sorted(p.id for p in pets)}")
    _check_stored_after_failure(ops, acked, by_key, verdict)
    check_reads(ops, acked, verdict.stale, verdict.skipped)
    verdict.phantom = phantoms(ops, by_id)
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
        keys_of_id[op.value.id].add(op.key)
        if by_id.get(op.value.id) != op.value:
            verdict.lost.append(
                f"{shown(op.value)} acknowledged, stored {shown(by_id.get(op.value.id))}"
            )
    verdict.reused = [
        f"id {pet_id} acknowledged for keys {sorted(keys)}"
        for pet_id, keys in sorted(keys_of_id.items())
        if len(keys) > 1
    ]
    # Ids follow real time: a create that started after another ended gets a larger id.
    done = sorted(acked, key=lambda op: op.ended)
    ends = [op.ended for op in done]
    best = list(itertools.accumulate((op.value.id for op in done if op.value), max))
    for op in acked:
        before = bisect.bisect_left(ends, op.started)
        assert op.value is not None
        if before and best[before - 1] >= op.value.id and op.value.id not in _same_key(done, op):
            verdict.not_increasing.append(
                f"id {op.value.id} (key {op.key}) after id {best[before - 1]} was acknowledged"
            )


def _check_stored_after_failure(
    ops: list[Op], acked: list[Op], by_key: dict[str, list[Pet]], verdict: Verdict
) -> None:
    """Creates that failed, never acknowledged under their key, whose animal (found
    by its name, which is the key) is stored: after a definite error, or after none."""
    acked_keys = {op.key for op in acked}
    for op in ops:
        if op.kind != "create" or op.outcome == "ok" or op.key in acked_keys:
            continue
        if pets := by_key.get(op.key):
            line = (
                f"key {op.key} ({op.outcome} {op.code} at {op.started:.2f} s) "
                f"stored as ids {sorted(p.id for p in pets)}"
            )
            after_none = op.outcome == "unknown" or op.code in NO_ANSWER
            (verdict.stored_after_no_answer if after_none else verdict.stored_after_error).append(
                line
            )


def _same_key(done: list[Op], op: Op) -> set[int]:
    """The ids acknowledged for ``op``'s key earlier (a replay answers the same id)."""
    return {o.value.id for o in done if o.key == op.key and o.value and o is not op}
