"""``python -m bench.request_cost``: the CPU time the costliest createPet bodies a
client can send cost a worker, each grown to the body limit (D10: 64 KiB) and parsed
as the service parses it (``server.http.newpet.parse_new_pet``, the one step whose cost
grows with the body; every other step of a request reads a bounded input).

:data:`BODIES` are the shapes of the outside probes, by the path each takes through
the parser; ``tests/server/http/test_linear_cost.py`` checks that each costs time
linear in its size, and docs/operations/run.md ("What one request can cost") states
the figures this prints. Takes a few seconds.
"""

from __future__ import annotations

import contextlib
import itertools
import string
import time
from collections.abc import Callable

from petstore.server import errors
from petstore.server.http.newpet import parse_new_pet

#: D10's default body limit, in bytes.
BODY_LIMIT = 64 * 1024


def names(count: int) -> list[str]:
    """``count`` distinct member names of three ASCII letters (at most 140,608)."""
    triples = itertools.product(string.ascii_letters, repeat=3)
    return ["".join(triple) for triple in itertools.islice(triples, count)]


def _object(members: list[str]) -> bytes:
    return ("{" + ",".join(members) + "}").encode()


#: NewPet bodies of about ``n`` parts (members, values, brackets), by the path each
#: takes through the parser.
BODIES: dict[str, Callable[[int], bytes]] = {
    # Issue 60, P1: an escape sends the body to the repeated-member check.
    "repeated member, an escape": lambda n: _object(
        [f'"{name}":1' for name in names(n)] + ['"aaa":2', '"\\u0061":1']
    ),
    "unknown members, an escape": lambda n: _object(
        ['"\\u006eame":"x"'] + [f'"{name}":1' for name in names(n)]
    ),
    "repeated members in a nested object": lambda n: _object(
        ['"name":' + _object([f'"{name}":1' for name in names(n)] * 2).decode()]
    ),
    "empty objects, an escape": lambda n: b'{"\\u0061":[' + b"{}," * n + b"{}]}",
    "unknown members in plain": lambda n: _object(
        ['"name":"x"', '"categoryId":1'] + [f'"name{name}":1' for name in names(n)]
    ),
    "malformed at the end": lambda n: _object([f'"{name}":1' for name in names(n)])[:-1] + b",",
    "lone surrogate at the end": lambda n: _object(
        [f'"{name}":"\\u0061"' for name in names(n)] + ['"z":"\\ud800"']
    ),
    "empty objects, a lone surrogate": lambda n: b'{"a":[' + b"{}," * n + b'"\\ud800"]}',
    "not UTF-8 at the end": lambda n: _object([f'"{name}":1' for name in names(n)]) + b"\xff",
    "nested arrays": lambda n: b'{"name":' + b"[" * n + b"]" * n + b"}",
    "long name": lambda n: b'{"name":"' + b"a" * (8 * n) + b'","categoryId":1}',
}


def largest(shape: Callable[[int], bytes], *, limit: int = BODY_LIMIT) -> bytes:
    """The largest body of ``shape`` at most ``limit`` bytes long."""
    low, high = 1, 2
    while len(shape(high)) <= limit:
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if len(shape(middle)) <= limit else (low, middle)
    return shape(low)


def parse(body: bytes) -> None:
    """Parse ``body`` as createPet does; a refusal is the expected end."""
    with contextlib.suppress(errors.PetstoreError):
        parse_new_pet(body)


def cpu_seconds(body: bytes, *, runs: int = 20) -> float:
    """The least CPU time, in seconds, of ``runs`` parses of ``body``."""
    best = float("inf")
    for _ in range(runs):
        start = time.process_time()
        parse(body)
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    """Print each shape's body size and CPU time, the costliest first."""
    rows = []
    for shape, make in BODIES.items():
        body = largest(make)
        rows.append((cpu_seconds(body), shape, len(body)))
    valid = b'{"name":"Rex","categoryId":1,"status":"available"}'
    print(f"{'body':36} {'bytes':>6} {'CPU ms':>7}")
    for seconds, shape, size in sorted(rows, reverse=True):
        print(f"{shape:36} {size:6d} {seconds * 1e3:7.2f}")
    print(f"{'a valid NewPet':36} {len(valid):6d} {cpu_seconds(valid, runs=1000) * 1e3:7.3f}")


if __name__ == "__main__":
    main()
