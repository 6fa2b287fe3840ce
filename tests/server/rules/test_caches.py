"""The bounded in-process caches of the rules layer (``lru.LRU``): when full,
the entry used least recently makes room, and the rest stay (issue 25: they used to
empty themselves whole)."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Callable

import pytest

from petstore.schemas import PetStatus
from petstore.server import errors
from petstore.server.rules import auth, kept_pages, keys, pagination
from petstore.server.rules.kept_pages import KeptPages
from petstore.server.rules.ratelimit import RateLimiter
from petstore.server.store import open_store
from petstore.server.store.changes import PetChanges
from petstore.server.store.counters import Counters
from tests.conftest import NOW, FakeClock


def test_full_key_cache_drops_the_least_recently_used_key(
    database_url: str, make_key: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(auth, "CACHE_MAX", 2)
    first, second, third = make_key(name="a"), make_key(name="b"), make_key(name="c")

    async def scenario() -> tuple[bool, bool, bool]:
        store = await open_store(database_url)
        try:
            verifier = auth.KeyVerifier(
                store.api_keys, clock=FakeClock(), monotonic=lambda: 0.0, cache_seconds=5
            )
            for key in (first, second, first, third):  # second is the least recent
                await verifier.lookup(key.encode())
            for record in await store.api_keys.list_all():  # revoked: only the cache knows them
                await keys.revoke(store.api_keys, record.id, now=NOW)
            outcomes = []
            for key in (first, second, third):
                try:
                    verifier.cached(key.encode()) or await verifier.lookup(key.encode())
                    outcomes.append(True)
                except errors.Unauthorized:
                    outcomes.append(False)
            return outcomes[0], outcomes[1], outcomes[2]
        finally:
            await store.close()

    # Held: the first (used again) and the third; the second was dropped and is
    # looked up, revoked. A cache that empties itself when full would lose the first.
    assert asyncio.run(scenario()) == (True, False, True)


class ServedPages:
    """A page source that answers each page with the body it was given, and the
    cursor "next": what the cache holds is then plain to see."""

    def __init__(self, bodies: dict[str | None, bytes]) -> None:
        self.bodies = bodies
        self.asked = 0

    async def page(
        self, *, status: PetStatus | None, limit: int, cursor: str | None
    ) -> tuple[bytes, str | None]:
        self.asked += 1
        return self.bodies[cursor], "next"


def kept(max_bytes: int, bodies: dict[str | None, bytes]) -> tuple[KeptPages, ServedPages]:
    served = ServedPages(bodies)
    return KeptPages(served, changes=unchanging(), max_bytes=max_bytes), served


def unchanging() -> PetChanges:
    """A change signal whose clock stands still and whose database keeps no version."""

    async def no_version() -> None:
        return None

    return PetChanges(no_version, monotonic=lambda: 0.0)


def asked_for(pages: KeptPages, served: ServedPages, *cursors: str | None) -> int:
    """How many of ``cursors``, asked in turn, the source had to answer."""
    before = served.asked

    async def ask() -> None:
        for cursor in cursors:
            body, _ = await pages.page(status=None, limit=10, cursor=cursor)
            assert body == served.bodies[cursor]

    asyncio.run(ask())
    return served.asked - before


#: What a kept page counts besides its body: its cursor ("next") and its bookkeeping.
ENTRY = kept_pages.ENTRY_BYTES + len("next")


def test_full_page_cache_drops_the_least_recently_used_page() -> None:
    pages, served = kept(100 + 2 * ENTRY, {"a": b"x" * 60, "b": b"y" * 30, "c": b"z" * 30})
    assert asked_for(pages, served, "a", "b", "a") == 2  # a is now the most recent
    assert asked_for(pages, served, "c") == 1  # 120 bytes: one page must go
    assert asked_for(pages, served, "a", "c") == 0
    assert asked_for(pages, served, "b") == 1


def test_a_page_held_again_counts_its_bytes_once() -> None:
    pages, served = kept(100 + 2 * ENTRY, {"a": b"x" * 60, "b": b"y" * 30})
    assert asked_for(pages, served, "a", "b") == 2  # 90 bytes of bodies held, not 150
    assert asked_for(pages, served, "a", "b") == 0


def test_the_pages_dropped_to_keep_the_bound_are_let_go() -> None:
    # 20 MB of pages through a 100 kB cache: what it holds stays within its bound
    # (with lru-dict's popitem every dropped page stayed in memory).
    bodies: dict[str | None, bytes] = {f"c{n}": bytes(10_000) for n in range(2_000)}
    pages, served = kept(100_000, bodies)
    tracemalloc.start()
    try:
        assert asked_for(pages, served, *bodies) == 2_000
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert asked_for(pages, served, "c1999") == 0
    assert asked_for(pages, served, "c0") == 1
    assert held < 1_000_000


def test_a_page_larger_than_the_cache_is_not_held() -> None:
    pages, served = kept(100 + ENTRY, {"a": b"x" * 50, "b": b"y" * 101})
    assert asked_for(pages, served, "a", "b", "b", "a") == 3


def test_many_small_pages_stay_within_the_bound_with_their_bookkeeping() -> None:
    """A client walking one-animal pages makes the cache hold many small entries,
    each with a key, a cursor and a stamp beside its body: they count too."""
    bodies: dict[str | None, bytes] = {f"{n:035d}": b"[{}]" for n in range(20_000)}
    pages, served = kept(1_000_000, bodies)
    tracemalloc.start()
    try:
        assert asked_for(pages, served, *bodies) == 20_000
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 1_100_000


def test_cursor_cache_is_bounded_and_verifies_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pagination, "_VERIFIED_MAX", 2)
    signer = pagination.CursorSigner(b"s" * 32)
    cursors = [signer.issue(last_id=n, status=None) for n in range(5)]
    assert [signer.last_id(cursor, status=None) for cursor in cursors] == list(range(5))
    assert [signer.last_id(cursor, status=None) for cursor in cursors] == list(range(5))
    assert len(signer._verified) == 2


def test_rate_limit_windows_are_bounded_and_counts_survive_eviction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from petstore.server.rules import ratelimit

    monkeypatch.setattr(ratelimit, "_KEYS_MAX", 2)

    async def scenario() -> list[int]:
        limiter = RateLimiter("10/minute", counters=Counters())
        try:
            remaining = []
            for api_key_id in (1, 2, 3, 1, 1):  # key 1's window is dropped, then back
                quota = await limiter.hit(api_key_id)
                assert quota is not None
                remaining.append(quota.remaining)
            own = await limiter.hit(1, "3/minute")  # its own limit: a window of its own
            assert own is not None
            remaining.append(own.remaining)
            assert len(limiter._windows) == 2
            return remaining
        finally:
            await limiter.close()

    # The counts live in the counter storage, so a window dropped from the cache
    # goes on counting where it was.
    assert asyncio.run(scenario()) == [9, 9, 9, 8, 7, 2]
