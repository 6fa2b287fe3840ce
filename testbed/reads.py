"""The checks of a chaos run's reads (:func:`testbed.history.check` calls them): what
getPet and list pages answered against what had been acknowledged before (stale,
skipped) and against the final state (phantom). No I/O."""

from __future__ import annotations

import bisect

from testbed.ops import Op, Pet, shown


def check_reads(ops: list[Op], acked: list[Op], stale: list[str], skipped: list[str]) -> None:
    """Append to ``stale`` and ``skipped`` one line per stale read and per walk that
    skipped acknowledged ids; ``acked`` is the creates of ``ops`` answered 201."""
    known: dict[int, tuple[float, Pet]] = {}  # id -> (when first acknowledged, value)
    for op in acked:
        assert op.value is not None
        when = known.get(op.value.id, (float("inf"), op.value))[0]
        known[op.value.id] = (min(when, op.ended), op.value)
    seen: dict[int, float] = {}  # id -> when an operation that showed it first ended
    for op in ops:
        if op.kind == "read" and op.outcome == "ok" and op.value is not None:
            seen[op.value.id] = min(seen.get(op.value.id, op.ended), op.ended)
        for page in op.pages:
            for pet_id in page.ids:
                seen[pet_id] = min(seen.get(pet_id, page.ended), page.ended)
    by_status: dict[str, list[int]] = {}  # the acknowledged ids of each status, sorted
    for pet_id, (_, value) in sorted(known.items()):
        by_status.setdefault(str(value.status), []).append(pet_id)
    for op in ops:
        if op.kind == "read" and op.outcome == "ok":
            _check_read(op, known, seen, stale)
        elif op.kind == "list" and op.outcome == "ok":
            _check_walk(op, known, by_status.get(op.status, []), stale, skipped)


def _check_read(
    op: Op, known: dict[int, tuple[float, Pet]], seen: dict[int, float], stale: list[str]
) -> None:
    when, value = known.get(op.asked, (float("inf"), None))
    if when < op.started and op.value != value:
        stale.append(f"getPet {op.asked} at {op.started:.2f} s answered {shown(op.value)}")
    elif op.value is None and seen.get(op.asked, float("inf")) < op.started:
        stale.append(f"getPet {op.asked} at {op.started:.2f} s: 404 after it was seen")


def _check_walk(
    op: Op,
    known: dict[int, tuple[float, Pet]],
    of_status: list[int],
    stale: list[str],
    skipped: list[str],
) -> None:
    """Stale pages and skipped ids of one walk; ``of_status`` is the sorted ids of the
    acknowledged animals of the walk's status. A walk begun from a cursor covers only
    the ids above ``op.after``."""
    met: set[int] = set()
    low: float = op.after  # the next page covers the ids above this
    first = bisect.bisect_right(of_status, low)
    for page in op.pages:
        met.update(page.ids)
        on_page = set(page.ids)
        high = max(page.ids, default=low) if page.more else float("inf")
        for pet_id in of_status[bisect.bisect_right(of_status, low) :]:
            if pet_id > high:
                break
            if pet_id not in on_page and known[pet_id][0] < page.started:
                stale.append(f"list page at {page.started:.2f} s covers {pet_id}, lacks it")
        low = high
    within = of_status[first : bisect.bisect_right(of_status, low)]
    missed = [i for i in within if known[i][0] < op.started and i not in met]
    if missed:
        skipped.append(f"walk at {op.started:.2f} s never met ids {missed[:5]}")


def phantoms(ops: list[Op], by_id: dict[int, Pet]) -> list[str]:
    """One line per answer that showed an animal absent from the final state
    (``by_id``) or different there: a getPet's 200, or an animal on a list page (one
    that holds another status than the walk's filter, when only ids were recorded)."""
    found = []
    for op in ops:
        value = op.value if op.kind == "read" and op.outcome == "ok" else None
        if value is not None and by_id.get(value.id) != value:
            found.append(
                f"getPet {op.asked} at {op.started:.2f} s answered {shown(value)}, "
                f"stored {shown(by_id.get(value.id))}"
            )
        for page in op.pages:
            for pet in page.pets:
                if by_id.get(pet.id) != pet:
                    found.append(
                        f"list page at {page.started:.2f} s showed {shown(pet)}, "
                        f"stored {shown(by_id.get(pet.id))}"
                    )
            for pet_id in page.ids if not page.pets else ():
                stored = by_id.get(pet_id)
                if stored is None or (op.status and stored.status != op.status):
                    found.append(
                        f"list page of {op.status or 'all'} at {page.started:.2f} s showed "
                        f"id {pet_id}, stored {shown(stored)}"
                    )
    return found
