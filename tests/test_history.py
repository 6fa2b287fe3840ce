"""The chaos run's checker (testbed/history.py) on hand-made histories: each anomaly,
alone, is found and named; clean histories (concurrent creates, a replayed key, a
walk that started before a create ended) pass."""

from __future__ import annotations

from testbed.history import Op, Page, Verdict, Window, check, unavailability


def create(key: str, pet_id: int, started: float, ended: float, status: str = "sold") -> Op:
    return Op(0, "create", started, ended, "ok", key=key, value=(pet_id, key, 1, status))


def read(pet_id: int, started: float, value: tuple[int, str, int, str] | None) -> Op:
    return Op(1, "read", started, started + 0.1, "ok", asked=pet_id, value=value)


def walk(started: float, *pages: tuple[tuple[int, ...], bool], status: str = "sold") -> Op:
    answered = tuple(
        Page(started + i, started + i + 0.5, ids, more) for i, (ids, more) in enumerate(pages)
    )
    return Op(2, "list", started, started + len(pages), "ok", status=status, pages=answered)


STORED = [(1, "a", 1, "sold"), (2, "b", 1, "sold"), (3, "c", 1, "sold")]
CREATES = [create("a", 1, 0.0, 1.0), create("b", 2, 1.5, 2.0), create("c", 3, 2.5, 3.0)]


def found(verdict: Verdict) -> dict[str, int]:
    return {name: count for name, count in verdict.counts().items() if count}


def test_a_clean_history_passes() -> None:
    history = [
        *CREATES,
        read(1, 1.1, (1, "a", 1, "sold")),
        read(3, 4.0, (3, "c", 1, "sold")),
        walk(4.0, ((1, 2), True), ((3,), False)),
        walk(2.2, ((1, 2), False)),  # started before c's 201: need not show it
        Op(3, "create", 5.0, 6.0, "unknown", key="d"),  # unknown: stored or not, fine
    ]
    verdict = check(history[:-1], STORED)
    assert verdict.clean
    assert verdict.counts() == dict.fromkeys(verdict.counts(), 0)
    assert found(check(history, [*STORED, (4, "d", 1, "sold")])) == {"failed": 1}


def test_concurrent_creates_may_commit_out_of_id_order() -> None:
    """Overlapping creates may get ids in either order; only real-time order binds,
    and a replay of the same key answers the same id later."""
    history = [
        create("a", 2, 0.0, 1.0),
        create("b", 1, 0.5, 1.5),
        create("c", 3, 2.0, 2.5),
        Op(0, "create", 3.0, 3.5, "ok", key="c", value=(3, "c", 1, "sold")),
    ]
    stored = [(1, "b", 1, "sold"), (2, "a", 1, "sold"), (3, "c", 1, "sold")]
    assert check(history, stored).clean


def test_an_acknowledged_animal_missing_is_lost() -> None:
    verdict = check(CREATES, STORED[:2])
    assert found(verdict) == {"lost": 1}
    assert verdict.lost == ["(3, 'c', 1, 'sold') acknowledged, stored None"]


def test_an_acknowledged_animal_changed_is_lost() -> None:
    assert found(check(CREATES, [*STORED[:2], (3, "c", 1, "pending")])) == {"lost": 1}


def test_one_key_stored_twice_is_duplicated() -> None:
    verdict = check(CREATES, [*STORED, (4, "c", 1, "sold")])
    assert found(verdict) == {"duplicated": 1}
    assert verdict.duplicated == ["key c stored as ids [3, 4]"]


def test_a_404_after_the_201_is_stale() -> None:
    verdict = check([*CREATES, read(3, 3.2, None)], STORED)
    assert found(verdict) == {"stale": 1}


def test_a_404_during_the_create_is_not_stale() -> None:
    assert check([*CREATES, read(3, 2.9, None)], STORED).clean


def test_a_404_after_another_read_saw_it_is_stale() -> None:
    """Monotonic reads: the create's outcome was unknown, a read saw the animal, a
    later read does not."""
    history = [
        Op(0, "create", 0.0, 1.0, "unknown", key="a"),
        read(1, 2.0, (1, "a", 1, "sold")),
        read(1, 3.0, None),
    ]
    assert found(check(history, STORED[:1])) == {"stale": 1, "failed": 1}


def test_a_list_page_lacking_an_acknowledged_animal_is_stale_and_the_walk_skipped() -> None:
    verdict = check([*CREATES, walk(4.0, ((1, 3), True), ((), False))], STORED)
    assert found(verdict) == {"stale": 1, "skipped": 1}
    assert verdict.skipped == ["walk at 4.00 s never met ids [2]"]


def test_a_walk_of_another_status_need_not_show_it() -> None:
    assert check([*CREATES, walk(4.0, ((), False), status="pending")], STORED).clean


def test_a_walk_stopped_early_skips_only_what_it_passed() -> None:
    history = [*CREATES, walk(4.0, ((1,), True))]  # capped after one page
    assert check(history, STORED).clean
    assert found(check([*CREATES, walk(4.0, ((2,), True))], STORED)) == {
        "stale": 1,
        "skipped": 1,
    }


def test_one_id_for_two_keys_is_reused() -> None:
    history = [create("a", 1, 0.0, 1.0), create("b", 1, 1.5, 2.0)]
    verdict = check(history, [(1, "a", 1, "sold")])
    assert verdict.reused == ["id 1 acknowledged for keys ['a', 'b']"]
    assert {"reused", "lost", "not_increasing"} <= found(verdict).keys()


def test_a_smaller_id_after_a_completed_create_is_not_increasing() -> None:
    history = [create("a", 5, 0.0, 1.0), create("b", 4, 1.5, 2.0)]
    verdict = check(history, [(5, "a", 1, "sold"), (4, "b", 1, "sold")])
    assert found(verdict) == {"not_increasing": 1}


def test_failures_are_counted_apart() -> None:
    history = [*CREATES, Op(1, "read", 3.0, 4.0, "failed", code=503, asked=1)]
    verdict = check(history, STORED)
    assert found(verdict) == {"failed": 1}
    assert verdict.failed == ["read by worker 1 at 3.00 s: failed 503"]


def test_unavailability_is_the_longest_gap_per_fault_kind() -> None:
    windows = [Window("cut", 0.0, 10.0), Window("cut", 20.0, 22.0), Window("none", 10.0, 20.0)]
    history = [
        create("a", 1, 0.0, 1.0),
        create("b", 2, 1.0, 7.0),
        read(1, 2.0, (1, "a", 1, "sold")),  # ends at 2.1
        create("c", 3, 12.0, 13.0),
    ]
    gaps = unavailability(history, windows)
    assert gaps["cut"] == (6.0, 7.9)
    assert gaps["none"] == (7.0, 10.0)
