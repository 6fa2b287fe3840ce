"""``python -m bench.memory``: the worst-case memory of every cache a worker keeps per
request, measured by filling each to its bound with the largest entries a client can
make it hold (tracemalloc, bytes the Python allocator handed out).

Each cache is the service's own class, filled through its own methods where they
take input, so the figure is the class's as shipped; docs/operations/run.md ("What a
worker keeps in memory") states them. Takes about a minute.
"""

from __future__ import annotations

import asyncio
import gc
import ipaddress
import sys
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from petstore.schemas import LIMIT_MAX, NAME_MAX_LENGTH, Pet, PetStatus
from petstore.server.http import links, parsing
from petstore.server.rules import auth, auth_failures, kept_pages, pagination, ratelimit
from petstore.server.rules.auth import Caller
from petstore.server.store import kept_pets
from petstore.server.store.changes import PetChanges, Stamp
from petstore.server.store.counters import Counters

MiB = 2**20


def measured(fill: Callable[[], Any]) -> int:
    """Bytes still allocated by what ``fill`` returns (kept alive while measured)."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = fill()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del kept
    return after - before


def verified_keys() -> Any:
    """10,000 keys verified, each with both scopes and a rate limit of its own."""
    verifier = auth.KeyVerifier(
        None,  # type: ignore[arg-type]  # never looked up: filled as a lookup fills it
        clock=lambda: datetime.now(UTC),
        monotonic=lambda: 0.0,
        cache_seconds=5,
    )
    scopes = frozenset(("pets:read", "pets:write"))
    for n in range(auth.CACHE_MAX):
        token = f"petstore_{n:043d}".encode()
        verifier._cache[token] = (Caller(n, scopes, "999999999999/minute"), None, 5.0)
    return verifier


def failure_counts() -> Any:
    """100,000 IPv6 /64 networks, each with failures counted."""
    failures = auth_failures.FailedAuthentications(limit=30, window=60.0, clock=lambda: 0.0)
    for n in range(auth_failures.MAX_ADDRESSES):
        network = ipaddress.IPv6Address((0x2001_0DB8_FFFF_FFFF << 64) + (n << 64) + 1)
        failures.failed(str(network))
    return failures


def verified_cursors() -> Any:
    """10,000 cursors verified, with a status filter."""
    signer = pagination.CursorSigner(b"memory-measure-cursor-secret-0123456789ab")
    for n in range(pagination._VERIFIED_MAX):
        cursor = signer.issue(last_id=2**62 + n, status=PetStatus.AVAILABLE)
        signer.last_id(cursor, status=PetStatus.AVAILABLE)
    return signer


def parsed_queries() -> Any:
    """256 listPets query strings of the longest length remembered."""
    parsing._remembered_list_query.cache_clear()
    for n in range(256):
        query = f"limit=100&status=available&cursor={n:0{parsing.REMEMBERED_QUERY_BYTES - 34}d}"
        parsing.list_query(query.encode())
    return parsing._remembered_list_query


def link_bases() -> Any:
    """64 Host values of the longest length remembered."""
    base = links.LinkBase(fallback="https://petstore.example.com/", allowed_hosts=frozenset())
    for n in range(100):
        host = f"{n:03d}" + "h" * (links.MAX_HOST_CHARS - 9) + ":65535"

        class Request:
            scheme = "https"

            @staticmethod
            def header(name: bytes, host: str = host) -> str:
                return host

        base.base(Request)  # type: ignore[arg-type]
    return base


def rate_limit_windows() -> Any:
    """100,000 API keys' windows, each key with a rate limit of its own."""

    async def fill() -> ratelimit.RateLimiter:
        limiter = ratelimit.RateLimiter("600/minute", counters=Counters())
        for n in range(ratelimit._KEYS_MAX):
            limiter._window_for((n, "999999999999/minute"))
        await limiter.close()
        return limiter

    return asyncio.run(fill())


def kept_animals() -> Any:
    """Columns of every slot, and as many names of 100 characters outside the BMP (4
    bytes each) as the names' area holds, in the last slots (each animal of the
    largest category kept)."""
    inner: Any = SimpleNamespace(changes=None)  # never read: filled as a read fills it
    kept = kept_pets.KeptPets(inner)
    name = "\U0001f415" * NAME_MAX_LENGTH
    names = kept_pets.KEPT_NAME_BYTES // len(name.encode())
    for n in range(kept_pets.KEPT_SLOTS - names, kept_pets.KEPT_SLOTS):
        pet = Pet(n, name[:-1] + chr(0x1F400 + n % 64), 2**31 - 1, PetStatus.AVAILABLE)
        kept._keep(n, pet, Stamp(0, 0.0))
    return kept


def kept_page_bodies() -> Any:
    """16 MiB of kept pages, as the pages of one animal (the smallest a client can
    make the cache hold most of)."""

    class Pages:
        async def page(self, *, status: Any, limit: int, cursor: str | None) -> Any:
            return b'[{"id":1,"name":"x","categoryId":1,"status":"sold"}]', "c" * 35

    async def no_version() -> None:
        return None

    async def fill() -> kept_pages.KeptPages:
        pages = kept_pages.KeptPages(Pages(), changes=PetChanges(no_version, monotonic=lambda: 0.0))
        for n in range(kept_pages.KEPT_PAGES_BYTES // 50):
            await pages.page(status=PetStatus.SOLD, limit=1, cursor=f"{n:035d}")
        return pages

    return asyncio.run(fill())


CACHES: list[tuple[str, Callable[[], Any]]] = [
    ("verified API keys (rules/auth.py)", verified_keys),
    ("failed authentications by address (rules/auth_failures.py)", failure_counts),
    ("verified cursors (rules/pagination.py)", verified_cursors),
    ("parsed listPets queries (http/parsing.py)", parsed_queries),
    ("link bases by Host (http/links.py)", link_bases),
    ("rate-limit windows by key (rules/ratelimit.py)", rate_limit_windows),
    ("kept animals (store/kept_pets.py)", kept_animals),
    ("kept pages (rules/kept_pages.py)", kept_page_bodies),
]


def main() -> None:
    """Print each cache's worst-case memory as a Markdown table."""
    print("| cache | worst case |")
    print("|---|---:|")
    total = 0
    for name, fill in CACHES:
        size = measured(fill)
        total += size
        print(f"| {name} | {size / MiB:.1f} MiB |")
        sys.stdout.flush()
    print(f"| all of them | {total / MiB:.1f} MiB |")
    print(f"\n(the longest page, {LIMIT_MAX} animals, is one entry among the kept pages)")


if __name__ == "__main__":
    main()
