"""Batches (petstore.server.batches): what the devices and the rate limiter rely on, with a
commit that records its batches and is held open until a test lets it finish."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from petstore.server import errors
from petstore.server.batches import MAX_BATCH, Batcher, TurnBatcher


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """The test as a plain function that runs it in a new event loop."""

    def in_a_loop() -> None:
        asyncio.run(test())

    in_a_loop.__name__ = in_a_loop.__qualname__ = test.__name__
    return in_a_loop


class Recorder:
    """A commit that records each batch and waits for ``release`` before answering
    ``item * 10`` for each item (or raising ``fail`` when set)."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.release = asyncio.Event()
        self.fail: Exception | None = None

    async def commit(self, items: list[int]) -> list[int]:
        self.batches.append(items)
        await self.release.wait()
        if self.fail is not None:
            raise self.fail
        return [item * 10 for item in items]


async def held_then_queued(
    committer: Batcher[int, int], queued: tuple[int, ...]
) -> tuple[asyncio.Task[int], list[asyncio.Task[int]]]:
    """Submit 1, whose commit starts (and is held), then ``queued``, which wait."""
    first = asyncio.ensure_future(committer.submit(1))
    await asyncio.sleep(0)
    rest = [asyncio.ensure_future(committer.submit(n)) for n in queued]
    await asyncio.sleep(0)
    return first, rest


@run
async def test_writes_that_arrive_during_a_commit_share_the_next_one() -> None:
    recorder = Recorder()
    committer = Batcher(recorder.commit)
    first, rest = await held_then_queued(committer, (2, 3, 4))
    assert recorder.batches == [[1]]
    assert committer.waiting == 3
    recorder.release.set()
    assert await asyncio.gather(first, *rest) == [10, 20, 30, 40]
    assert recorder.batches == [[1], [2, 3, 4]]
    assert committer.waiting == 0


@run
async def test_a_batch_holds_at_most_max_batch_writes() -> None:
    recorder = Recorder()
    recorder.release.set()
    committer = Batcher(recorder.commit)
    results = await asyncio.gather(*(committer.submit(n) for n in range(MAX_BATCH + 2)))
    assert results == [n * 10 for n in range(MAX_BATCH + 2)]
    assert [len(batch) for batch in recorder.batches] == [MAX_BATCH, 2]


@run
async def test_a_failed_commit_fails_every_write_of_its_batch_and_only_those() -> None:
    recorder = Recorder()
    committer = Batcher(recorder.commit)
    first, second = await held_then_queued(committer, (2, 3))
    recorder.fail = errors.Unavailable("disk gone")
    recorder.release.set()
    with pytest.raises(errors.Unavailable, match="disk gone"):
        await first
    for write in second:
        with pytest.raises(errors.Unavailable, match="disk gone"):
            await write
    recorder.fail = None
    assert await committer.submit(4) == 40


@run
async def test_a_caller_that_stops_waiting_does_not_stop_its_batch() -> None:
    recorder = Recorder()
    committer = Batcher(recorder.commit)
    first, (gone, kept) = await held_then_queued(committer, (2, 3))
    gone.cancel()
    recorder.release.set()
    assert await first == 10
    assert await kept == 30
    assert recorder.batches == [[1], [2, 3]]  # the write of the caller that left is done


@run
async def test_close_commits_what_is_queued_then_refuses_writes() -> None:
    recorder = Recorder()
    committer = Batcher(recorder.commit)
    writes = [asyncio.ensure_future(committer.submit(n)) for n in (1, 2)]
    await asyncio.sleep(0)
    closing = asyncio.ensure_future(committer.close())
    await asyncio.sleep(0)
    assert not closing.done()
    recorder.release.set()
    await closing
    assert [write.result() for write in writes] == [10, 20]
    with pytest.raises(errors.Unavailable):
        await committer.submit(3)


# Batcher(wait_turns=N): a batch that finds none running waits N turns of the loop ----


@run
async def test_a_batch_that_waits_turns_takes_the_writes_submitted_meanwhile() -> None:
    recorder = Recorder()
    recorder.release.set()
    committer = Batcher(recorder.commit, wait_turns=3)
    writes = [asyncio.ensure_future(committer.submit(1))]
    for n in (2, 3):
        await asyncio.sleep(0)  # one turn: the write submitted before it still waits
        assert recorder.batches == []
        writes.append(asyncio.ensure_future(committer.submit(n)))
    assert await asyncio.gather(*writes) == [10, 20, 30]
    assert recorder.batches == [[1, 2, 3]]


@run
async def test_a_lone_write_that_waits_turns_is_committed_on_an_idle_loop() -> None:
    recorder = Recorder()
    recorder.release.set()
    committer = Batcher(recorder.commit, wait_turns=8)
    assert await asyncio.wait_for(committer.submit(1), timeout=1) == 10
    assert recorder.batches == [[1]]


@run
async def test_writes_queued_behind_a_running_batch_wait_no_turns() -> None:
    recorder = Recorder()
    committer = Batcher(recorder.commit, wait_turns=3)
    first = asyncio.ensure_future(committer.submit(1))
    for _ in range(10):
        await asyncio.sleep(0)
    assert recorder.batches == [[1]]  # started after its turns, held
    rest = [asyncio.ensure_future(committer.submit(n)) for n in (2, 3)]
    await asyncio.sleep(0)
    recorder.release.set()
    assert await first == 10
    await asyncio.sleep(0)  # the done-callback of the first started the second at once
    assert recorder.batches == [[1], [2, 3]]
    assert await asyncio.gather(*rest) == [20, 30]


@run
async def test_close_while_a_batch_waits_turns_commits_it_then_refuses() -> None:
    recorder = Recorder()
    recorder.release.set()
    committer = Batcher(recorder.commit, wait_turns=5)
    write = asyncio.ensure_future(committer.submit(1))
    await asyncio.sleep(0)  # submitted: its batch waits
    await asyncio.wait_for(committer.close(), timeout=1)
    assert write.result() == 10
    with pytest.raises(errors.Unavailable):
        await committer.submit(2)


# TurnBatcher: what is submitted during one turn of the loop goes together ------------


async def one_turn(
    batcher: TurnBatcher[int, int], items: tuple[int, ...]
) -> list[asyncio.Task[int]]:
    """Submit ``items`` during one turn of the loop (each caller is a task, as a
    request is)."""

    async def caller(item: int) -> int:
        return await batcher.submit(item)

    callers = [asyncio.ensure_future(caller(n)) for n in items]
    await asyncio.sleep(0)  # the callers' first steps: one turn, the submits
    return callers


@run
async def test_what_one_turn_submits_is_one_batch_started_at_the_next_turn() -> None:
    recorder = Recorder()
    recorder.release.set()
    batcher = TurnBatcher(recorder.commit)
    first = await one_turn(batcher, (1, 2, 3))
    assert recorder.batches == []  # nothing runs in the turn that submits
    second = await one_turn(batcher, (4, 5))
    assert recorder.batches == [[1, 2, 3]]
    assert await asyncio.gather(*first, *second) == [10, 20, 30, 40, 50]
    assert recorder.batches == [[1, 2, 3], [4, 5]]


@run
async def test_a_batch_that_waits_does_not_hold_up_the_next_turns_batch() -> None:
    recorder = Recorder()
    batcher = TurnBatcher(recorder.commit)
    first = await one_turn(batcher, (1, 2))
    second = await one_turn(batcher, (3,))
    await asyncio.sleep(0)
    assert recorder.batches == [[1, 2], [3]]  # both started, the first still held
    recorder.release.set()
    assert await asyncio.gather(*first, *second) == [10, 20, 30]


@run
async def test_a_failed_turn_batch_fails_its_callers_and_only_those() -> None:
    recorder = Recorder()
    recorder.fail = ValueError("store down")
    batcher = TurnBatcher(recorder.commit)
    failing = await one_turn(batcher, (1, 2))
    await asyncio.sleep(0)
    recorder.release.set()
    for caller in failing:
        with pytest.raises(ValueError, match="store down"):
            await caller
    recorder.fail = None
    assert await batcher.submit(3) == 30


@run
async def test_a_caller_that_stops_waiting_leaves_its_turn_batch_to_the_others() -> None:
    recorder = Recorder()
    batcher = TurnBatcher(recorder.commit)
    gone, kept = await one_turn(batcher, (1, 2))
    gone.cancel()
    recorder.release.set()
    assert await kept == 20
    assert recorder.batches == [[1, 2]]


@run
async def test_a_turn_batch_cancelled_at_shutdown_cancels_its_callers() -> None:
    recorder = Recorder()
    batcher = TurnBatcher(recorder.commit)
    callers = await one_turn(batcher, (1, 2))
    await asyncio.sleep(0)  # the batch is running, held
    for task in asyncio.all_tasks():
        if task is not asyncio.current_task() and task not in callers:
            task.cancel()  # as asyncio.run does with what is left at its end
    done, _ = await asyncio.wait(callers, timeout=1)
    assert len(done) == 2
    assert all(caller.cancelled() for caller in callers)


@run
async def test_turn_batcher_close_lets_running_batches_finish_then_refuses() -> None:
    recorder = Recorder()
    batcher = TurnBatcher(recorder.commit)
    callers = await one_turn(batcher, (1, 2))
    closing = asyncio.ensure_future(batcher.close())
    await asyncio.sleep(0)
    assert not closing.done()
    recorder.release.set()
    await closing
    assert [caller.result() for caller in callers] == [10, 20]
    with pytest.raises(errors.Unavailable):
        await batcher.submit(3)
