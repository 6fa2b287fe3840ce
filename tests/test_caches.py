"""The bounded in-process caches of the rules layer (``lru.LRU``): when full,
the entry used least recently makes room, and the rest stay (issue 25: they used to
empty themselves whole)."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Callable

import pytest

from petstore.server import errors
from petstore.server.rules import auth, keys, pagination
from petstore.server.rules.ratelimit import RateLimiter
from petstore.server.store import open_store
from petstore.server.store.counters import Counters
from tests.conftest import NOW, FakeClock


def test_full_key_cache_drops_the_least_recently_used_key(
    database_url: str, make_key: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(auth, "_CACHE_MAX", 2)
    first, second, third = make_key(name="a"), make_key(name="b"), make_key(name="c")

    async def scenario() -> tuple[bool, bool, bool]:
        store = await open_store(database_url)
        try:
            verifier = auth.KeyVerifier(store, clock=FakeClock(), cache_seconds=5)
            for key in (first, second, first, third):  # second is the least recent
                await verifier.verify(f"Bearer {key}")
            for record in await store.list_api_keys():  # revoked: only the cache knows them
                await keys.revoke(store, record.id, now=NOW)
            outcomes = []
            for key in (first, second, third):
                try:
                    await verifier.verify(f"Bearer {key}")
                    outcomes.append(True)
                except errors.Unauthorized:
                    outcomes.append(False)
            return outcomes[0], outcomes[1], outcomes[2]
        finally:
            await store.close()

    # Held: the first (used again) and the third; the second was dropped and is
    # looked up, revoked. A cache that empties itself when full would lose the first.
    assert asyncio.run(scenario()) == (True, False, True)


def test_full_page_cache_drops_the_least_recently_used_page() -> None:
    cache = pagination.PageCache(100)
    first, second, third = (None, 0, 10), (None, 10, 10), (None, 20, 10)
    cache.put(first, b"x" * 60, "c1")
    cache.put(second, b"y" * 30, "c2")
    assert cache.get(first) == (b"x" * 60, "c1")  # first is now the most recent
    cache.put(third, b"z" * 30, "c3")  # 120 bytes: one page must go
    assert cache.get(first) == (b"x" * 60, "c1")
    assert cache.get(second) is None
    assert cache.get(third) == (b"z" * 30, "c3")


def test_a_page_held_again_counts_its_bytes_once() -> None:
    cache = pagination.PageCache(100)
    first, second = (None, 0, 10), (None, 10, 10)
    cache.put(first, b"x" * 60, "c1")
    cache.put(first, b"x" * 60, "c1")  # read again after it went stale, say
    cache.put(second, b"y" * 30, "c2")  # 90 bytes held, not 150
    assert cache.get(first) == (b"x" * 60, "c1")
    assert cache.get(second) == (b"y" * 30, "c2")


def test_the_pages_dropped_to_keep_the_bound_are_let_go() -> None:
    # 20 MB of pages through a 100 kB cache: what it holds stays within its bound
    # (with lru-dict's popitem every dropped page stayed in memory: 9,000 pages walked
    # by rel="next" grew a worker by 78 MiB with 16 MiB held).
    cache = pagination.PageCache(100_000)
    tracemalloc.start()
    try:
        for page in range(2_000):
            cache.put((None, page * 100, 100), bytes(10_000), f"c{page}")
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert cache.get((None, 199_900, 100)) == (bytes(10_000), "c1999")
    assert cache.get((None, 0, 100)) is None
    assert held < 1_000_000


def test_a_page_larger_than_the_cache_is_not_held() -> None:
    cache = pagination.PageCache(100)
    cache.put((None, 0, 10), b"x" * 50, "c1")
    cache.put((None, 10, 10), b"y" * 101, "c2")
    assert cache.get((None, 10, 10)) is None
    assert cache.get((None, 0, 10)) == (b"x" * 50, "c1")


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
