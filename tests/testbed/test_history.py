"""The chaos run's checker (testbed/history.py) on hand-made histories: each anomaly,
alone, is found and named; clean histories (concurrent creates, a replayed key, a
walk that started before a create ended) pass. Also the availability figures
(testbed/availability.py), the comparison of the data nodes' final states
(testbed/final_state.py), and the rate-limit probe's judgement and its watch of Redis
(testbed/limit_probe.py)."""

from __future__ import annotations

import threading
import time
from urllib.parse import urlsplit

import msgspec
import pytest

from testbed.availability import availability, table, unavailability
from testbed.final_state import disagreements
from testbed.history import Op, Page, Pet, Verdict, Window, check
from testbed.limit_probe import BOUND, LIMIT, STALL, Answer, judge, watch
from tests.conftest import redis_url
from tests.members import changed, sample
from tests.tcpproxy import TcpProxy
from tests.testbed.animals import created, pet


def read(pet_id: int, started: float, value: Pet | None) -> Op:
    return Op(
        worker=1,
        kind="read",
        started=started,
        ended=started + 0.1,
        outcome="ok",
        asked=pet_id,
        value=value,
    )


def walk(
    started: float, *pages: tuple[tuple[int, ...], bool], status: str = "sold", after: int = 0
) -> Op:
    answered = tuple(
        Page(started=started + i, ended=started + i + 0.5, ids=ids, more=more)
        for i, (ids, more) in enumerate(pages)
    )
    return Op(
        worker=2,
        kind="list",
        started=started,
        ended=started + len(pages),
        outcome="ok",
        status=status,
        pages=answered,
        after=after,
    )


STORED = [pet(1, "a"), pet(2, "b"), pet(3, "c")]
CREATES = [created("a", 1, 0.0, 1.0), created("b", 2, 1.5, 2.0), created("c", 3, 2.5, 3.0)]


def found(verdict: Verdict) -> dict[str, int]:
    return {name: count for name, count in verdict.counts().items() if count}


def test_a_clean_history_passes() -> None:
    history = [
        *CREATES,
        read(1, 1.1, pet(1, "a")),
        read(3, 4.0, pet(3, "c")),
        walk(4.0, ((1, 2), True), ((3,), False)),
        walk(2.2, ((1, 2), False)),  # started before c's 201: need not show it
        Op(
            worker=3, kind="create", started=5.0, ended=6.0, outcome="unknown", key="d"
        ),  # unknown: stored or not, fine
    ]
    verdict = check(history[:-1], STORED)
    assert verdict.clean
    assert verdict.counts() == dict.fromkeys(verdict.counts(), 0)
    assert found(check(history, [*STORED, pet(4, "d")])) == {
        "failed": 1,
        "stored_after_no_answer": 1,
    }


def test_concurrent_creates_may_commit_out_of_id_order() -> None:
    """Overlapping creates may get ids in either order; only real-time order binds,
    and a replay of the same key answers the same id later."""
    history = [
        created("a", 2, 0.0, 1.0),
        created("b", 1, 0.5, 1.5),
        created("c", 3, 2.0, 2.5),
        Op(
            worker=0,
            kind="create",
            started=3.0,
            ended=3.5,
            outcome="ok",
            key="c",
            value=pet(3, "c"),
        ),
    ]
    stored = [pet(1, "b"), pet(2, "a"), pet(3, "c")]
    assert check(history, stored).clean


def test_an_acknowledged_animal_missing_is_lost() -> None:
    verdict = check(CREATES, STORED[:2])
    assert found(verdict) == {"lost": 1}
    assert verdict.lost == [
        '{"id":3,"name":"c","categoryId":1,"status":"sold"} acknowledged, stored None'
    ]


def test_an_acknowledged_animal_changed_is_lost() -> None:
    assert found(check(CREATES, [*STORED[:2], pet(3, "c", status="pending")])) == {"lost": 1}


@pytest.mark.parametrize(
    "member", [field.name for field in msgspec.structs.fields(Pet) if field.name != "id"]
)
def test_an_acknowledged_animal_changed_in_any_member_is_lost_and_a_node_differs(
    member: str,
) -> None:
    """Every member of Pet is compared, a member added to it too: an animal stored
    with any one of them changed (lost in a failover or a restore) is found."""
    acknowledged = msgspec.structs.replace(sample(Pet), id=1, name="a")
    history = [
        Op(
            worker=0,
            kind="create",
            started=0.0,
            ended=1.0,
            outcome="ok",
            key="a",
            value=acknowledged,
        )
    ]
    stored = changed(acknowledged, member)
    assert found(check(history, [stored])) == {"lost": 1}
    assert len(disagreements({"node1": [acknowledged], "node2": [stored]})) == 1


def test_one_key_stored_twice_is_duplicated() -> None:
    verdict = check(CREATES, [*STORED, pet(4, "c")])
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
        Op(worker=0, kind="create", started=0.0, ended=1.0, outcome="unknown", key="a"),
        read(1, 2.0, pet(1, "a")),
        read(1, 3.0, None),
    ]
    assert found(check(history, STORED[:1])) == {
        "stale": 1,
        "failed": 1,
        "stored_after_no_answer": 1,
    }


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
    history = [created("a", 1, 0.0, 1.0), created("b", 1, 1.5, 2.0)]
    verdict = check(history, [pet(1, "a")])
    assert verdict.reused == ["id 1 acknowledged for keys ['a', 'b']"]
    assert {"reused", "lost", "not_increasing"} <= found(verdict).keys()


def test_a_smaller_id_after_a_completed_create_is_not_increasing() -> None:
    history = [created("a", 5, 0.0, 1.0), created("b", 4, 1.5, 2.0)]
    verdict = check(history, [pet(5, "a"), pet(4, "b")])
    assert found(verdict) == {"not_increasing": 1}


def test_failures_are_counted_apart() -> None:
    history = [
        *CREATES,
        Op(worker=1, kind="read", started=3.0, ended=4.0, outcome="failed", code=503, asked=1),
    ]
    verdict = check(history, STORED)
    assert found(verdict) == {"failed": 1}
    assert verdict.failed == ["read by worker 1 at 3.00 s: failed 503"]


def test_unavailability_is_the_longest_gap_per_fault_kind() -> None:
    windows = [
        Window(kind="cut", started=0.0, ended=10.0),
        Window(kind="cut", started=20.0, ended=22.0),
        Window(kind="none", started=10.0, ended=20.0),
    ]
    history = [
        created("a", 1, 0.0, 1.0),
        created("b", 2, 1.0, 7.0),
        read(1, 2.0, pet(1, "a")),  # ends at 2.1
        created("c", 3, 12.0, 13.0),
    ]
    gaps = unavailability(history, windows)
    assert gaps["cut"] == (6.0, 7.9)
    assert gaps["none"] == (7.0, 10.0)


def test_a_walk_from_a_cursor_that_misses_a_newer_animal_skipped_it() -> None:
    """A walk begun from a cursor after id 1 must meet 2 and 3; ids at or below its
    cursor are not its to show."""
    assert check([*CREATES, walk(4.0, ((2, 3), False), after=1)], STORED).clean
    assert check([*CREATES, walk(4.0, ((3,), False), after=2)], STORED).clean
    verdict = check([*CREATES, walk(4.0, ((2,), False), after=1)], STORED)
    assert found(verdict) == {"stale": 1, "skipped": 1}
    assert verdict.skipped == ["walk at 4.00 s never met ids [3]"]


def test_a_read_of_an_animal_absent_from_the_final_state_is_a_phantom() -> None:
    verdict = check([*CREATES, read(9, 4.0, pet(9, "z"))], STORED)
    assert found(verdict) == {"phantom": 1}
    assert verdict.phantom == [
        'getPet 9 at 4.00 s answered {"id":9,"name":"z","categoryId":1,"status":"sold"}, '
        "stored None"
    ]


def test_a_read_that_differs_from_the_final_state_is_a_phantom() -> None:
    """The read started before c's 201 (so it is not stale), and answered another
    value than the one stored."""
    assert found(check([*CREATES, read(3, 2.6, pet(3, "c", category_id=2))], STORED)) == {
        "phantom": 1
    }


def test_a_list_page_showing_an_animal_absent_or_different_is_a_phantom() -> None:
    ids_only = walk(4.0, ((1, 2, 3, 7), False))
    assert found(check([*CREATES, ids_only], STORED)) == {"phantom": 1}
    other_status = walk(4.0, ((), True), ((1,), False), status="pending")
    assert found(check([*CREATES, other_status], STORED)) == {"phantom": 1}
    shown = (
        Page(
            started=4.0,
            ended=4.5,
            ids=(1, 2, 3),
            more=False,
            pets=(pet(1, "a"), pet(2, "b", category_id=5), STORED[2]),
        ),
    )
    history = [
        *CREATES,
        Op(worker=2, kind="list", started=4.0, ended=4.5, outcome="ok", status="sold", pages=shown),
    ]
    verdict = check(history, STORED)
    assert found(verdict) == {"phantom": 1}
    assert verdict.phantom == [
        'list page at 4.00 s showed {"id":2,"name":"b","categoryId":5,"status":"sold"}, '
        'stored {"id":2,"name":"b","categoryId":1,"status":"sold"}'
    ]


def test_an_animal_stored_after_a_definite_error_is_counted() -> None:
    history = [
        *CREATES,
        Op(worker=3, kind="create", started=5.0, ended=6.0, outcome="failed", code=500, key="d"),
    ]
    verdict = check(history, [*STORED, pet(4, "d")])
    assert found(verdict) == {"stored_after_error": 1, "failed": 1}
    assert verdict.stored_after_error == ["key d (failed 500 at 5.00 s) stored as ids [4]"]
    assert not verdict.clean
    # Not stored: the error told the truth.
    assert found(check(history, STORED)) == {"failed": 1}


@pytest.mark.parametrize(("outcome", "code"), [("unknown", 0), ("failed", 504), ("failed", 502)])
def test_an_animal_stored_after_no_answer_is_counted_apart(outcome: str, code: int) -> None:
    history = [
        *CREATES,
        Op(worker=3, kind="create", started=5.0, ended=6.0, outcome=outcome, code=code, key="d"),
    ]
    verdict = check(history, [*STORED, pet(4, "d")])
    assert found(verdict) == {"stored_after_no_answer": 1, "failed": 1}


def test_a_create_retried_to_success_is_not_stored_after_an_error() -> None:
    """An earlier call with the same key failed, a later one was acknowledged: the
    animal is stored once and acknowledged, no defect."""
    history = [
        *CREATES,
        Op(worker=3, kind="create", started=5.0, ended=6.0, outcome="failed", code=503, key="d"),
        created("d", 4, 6.5, 7.0),
    ]
    assert found(check(history, [*STORED, pet(4, "d")])) == {"failed": 1}


def test_availability_gives_shares_of_first_attempts_and_quick_answers() -> None:
    windows = [Window(kind="cut", started=0.0, ended=10.0)]
    history = [
        Op(
            worker=0,
            kind="create",
            started=0.0,
            ended=0.5,
            outcome="ok",
            key="a",
            value=pet(1, "a"),
            attempts=1,
        ),
        Op(
            worker=0,
            kind="create",
            started=1.0,
            ended=3.0,
            outcome="ok",
            key="b",
            value=pet(2, "b"),
            attempts=2,
        ),
        Op(
            worker=0,
            kind="read",
            started=3.0,
            ended=8.5,
            outcome="ok",
            asked=1,
            value=pet(1, "a"),
            attempts=4,
        ),
        Op(
            worker=0,
            kind="list",
            started=2.0,
            ended=2.5,
            outcome="ok",
            status="sold",
            attempts=2,
            pages=(
                Page(started=2.0, ended=2.2, ids=(1,), more=True),
                Page(started=2.2, ended=2.5, ids=(2,), more=False),
            ),
        ),
        Op(
            worker=0,
            kind="create",
            started=8.0,
            ended=9.0,
            outcome="failed",
            code=503,
            key="c",
            attempts=31,
        ),
    ]
    (row,) = availability(history, windows)
    assert (row.kind, row.times, row.operations, row.failed) == ("cut", 1, 5, 1)
    assert row.first_try == 2 / 5  # the first create and the two-page walk
    assert (row.within_1s, row.within_5s) == (2 / 5, 3 / 5)
    assert (row.create_gap, row.read_gap) == (7.0, 6.0)
    lines = table([row])
    assert lines[0].startswith("| fault | times | operations | failed | first attempt ok (%)")
    assert lines[2] == "| cut | 1 | 5 | 1 | 40.0 | 40.0 | 60.0 | 7.0 | 6.0 | 2000 |"


def test_nodes_that_hold_the_same_rows_agree() -> None:
    assert disagreements({"node1": STORED, "node2": list(STORED), "service": STORED}) == []


def test_a_node_lacking_holding_or_changing_rows_differs() -> None:
    views = {
        "node1": STORED,
        "node2": STORED[:2],
        "node3": [STORED[0], pet(2, "b", status="pending"), STORED[2], pet(4, "d")],
        "service": None,
    }
    assert disagreements(views) == [
        "node2 against node1: lacks 1 (ids [3])",
        "node3 against node1: holds besides 1 (ids [4]), differs in 1 (ids [2])",
        "service could not be read",
    ]


def paced(start: float, seconds: float, status: int, *, counted: bool) -> list[Answer]:
    """Answers 16 a second (exact in binary) from ``start`` for ``seconds``."""
    return [Answer(start + i / 16, status, counted) for i in range(int(seconds * 16))]


def test_a_limit_kept_while_counted_passes() -> None:
    answers = [
        Answer(start + i * 0.05, 200 if i < LIMIT else 429, True)
        for start in range(10)
        for i in range(20)
    ]
    judged = judge(answers, [])
    assert (judged.calls, judged.over_limit, judged.failing_open, judged.late) == (200, 0, 0, 0)


def test_successes_beyond_the_limit_while_counted_are_over_the_limit() -> None:
    judged = judge(paced(0.0, 3.0, 200, counted=True), [])
    assert judged.over_limit == 16 - 2 * LIMIT


def test_failing_open_while_redis_is_out_is_counted_with_its_length() -> None:
    answers = (
        paced(0.0, 2.0, 429, counted=True)
        + paced(2.0, 4.0, 200, counted=False)
        + paced(6.0, 1.0, 200, counted=False)  # the first second after the return
        + paced(7.0, 2.0, 429, counted=True)
    )
    judged = judge(answers, [(2.0, 6.0)])
    assert judged.over_limit == 0
    assert judged.failing_open == 80
    assert judged.open_seconds == pytest.approx(5 - 1 / 16)
    assert judged.longest_return == pytest.approx(1 - 1 / 16)
    assert judged.late == 0


def test_failing_open_long_after_redis_returned_or_with_redis_never_lost_is_late() -> None:
    late = paced(0.0, 3.0, 200, counted=False) + paced(3.0 + BOUND + 1, 1.0, 200, counted=False)
    judged = judge(late, [(0.0, 3.0)])
    assert judged.longest_return == pytest.approx(BOUND + 2 - 1 / 16)
    assert judged.late == 16
    assert judged.late_at[0] == pytest.approx(3.0 + BOUND + 1)  # when: named in the report
    assert judge(paced(0.0, 1.0, 200, counted=False), []).late == 16


def test_failing_open_within_bound_of_redis_standing_still_is_d15_not_late() -> None:
    stall = (2.0, 2.4)  # a PING of the watch unanswered for 0.4 s, no fault
    answers = (
        paced(0.0, 2.0, 429, counted=True)
        + paced(2.0, 1.0, 200, counted=False)
        + paced(3.0, 1.0, 429, counted=True)
    )
    judged = judge(answers, [], [stall])
    assert (judged.late, judged.after_stall) == (0, 16)
    assert (judged.stalls, judged.longest_stall) == (1, pytest.approx(0.4))
    # Long after the stall it explains nothing: late, as with Redis never lost.
    later = judge(paced(2.4 + BOUND + 1, 1.0, 200, counted=False), [], [stall])
    assert (later.late, later.after_stall) == (16, 0)


def test_a_stall_within_an_outage_is_the_outages_own() -> None:
    answers = paced(2.0, 4.0, 200, counted=False) + paced(6.0 + BOUND + 1, 1.0, 200, counted=False)
    judged = judge(answers, [(2.0, 6.0)], [(3.0, 6.5)])  # PINGs failing while cut off
    assert (judged.stalls, judged.after_stall, judged.late) == (0, 0, 16)


def test_the_watch_marks_redis_standing_still_and_nothing_while_it_answers() -> None:
    port = urlsplit(redis_url()).port
    assert port is not None
    stalls: list[tuple[float, float]] = []
    stop = threading.Event()
    with TcpProxy(port) as proxy:
        watching = threading.Thread(target=watch, args=(f"redis://127.0.0.1:{proxy.port}/0",
                                                        stop, stalls))  # fmt: skip
        watching.start()
        time.sleep(0.5)  # about 10 PINGs, each answered at once
        assert stalls == []
        proxy.pause()  # Redis stands still for 0.6 s
        time.sleep(0.6)
        proxy.resume()
        time.sleep(0.3)
        stop.set()
        watching.join(5)
    assert len(stalls) == 1
    assert 0.6 - STALL < stalls[0][1] - stalls[0][0] < 1.0
