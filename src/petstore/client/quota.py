"""The rate-limit quota a response states (D15): the ``RateLimit`` and
``RateLimit-Policy`` fields of draft-ietf-httpapi-ratelimit-headers, structured
fields (RFC 9651) such as::

    RateLimit-Policy: "default";q=600;w=60
    RateLimit: "default";r=599;t=60

A bulk client paces itself by them (``petstore pets import``): it sends while
``remaining`` is above 0, then waits :meth:`Quota.wait` seconds, when the window
resets, instead of being refused with 429. Nothing here does I/O.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import http_sf
import httpx


@dataclass(frozen=True, slots=True, kw_only=True)
class Quota:
    """One response's quota: ``policy`` (its name, e.g. ``default``), ``remaining``
    requests (``r``) in the window, ``reset`` seconds until the window's quota is
    restored (``t``), the policy's ``limit`` (``q``) and ``window`` in seconds (``w``)
    when ``RateLimit-Policy`` states them, and ``received`` (``time.monotonic()``
    when the response came)."""

    policy: str
    remaining: int
    reset: float
    limit: int | None = None
    window: int | None = None
    received: float = 0.0

    def wait(self, now: float | None = None) -> float:
        """Seconds to wait, from ``now`` (``time.monotonic()`` by default), before the
        next request can be accepted: 0 while requests remain, else what is left of
        ``reset``."""
        if self.remaining > 0:
            return 0.0
        now = time.monotonic() if now is None else now
        return max(0.0, self.reset - (now - self.received))

    def describe(self) -> str:
        """The policy in words, e.g. ``600 a minute`` or ``10 every 1 s``."""
        if self.limit is None or self.window is None:
            return f'policy "{self.policy}"'
        per = {1: "a second", 60: "a minute", 3600: "an hour", 86400: "a day"}
        return f"{self.limit} {per.get(self.window, f'every {self.window} s')}"


def _members(value: str) -> list[tuple[str, dict[str, object]]]:
    """The items of a structured-field list of strings with parameters; [] when the
    field is not one (a proxy's own header, say: pacing is then left to 429)."""
    try:
        items = http_sf.parse(value.encode("ascii"), tltype="list")
    except (ValueError, UnicodeEncodeError):
        return []
    if not isinstance(items, list):
        return []
    return [
        (item[0], dict(item[1]))
        for item in items
        if isinstance(item, tuple) and isinstance(item[0], str) and isinstance(item[1], dict)
    ]


def quota_of(response: httpx.Response) -> Quota | None:
    """The :class:`Quota` that ``response`` states, None without a readable
    ``RateLimit`` field. Of several, the one with the fewest requests remaining."""
    found = []
    policies = dict(_members(response.headers.get("ratelimit-policy", "")))
    for name, params in _members(response.headers.get("ratelimit", "")):
        remaining, reset = params.get("r"), params.get("t")
        if not isinstance(remaining, int) or not isinstance(reset, int | float):
            continue
        policy = policies.get(name, {})
        limit, window = policy.get("q"), policy.get("w")
        found.append(
            Quota(
                policy=name,
                remaining=remaining,
                reset=float(reset),
                limit=limit if isinstance(limit, int) else None,
                window=window if isinstance(window, int) else None,
                received=time.monotonic(),
            )
        )
    return min(found, key=lambda quota: quota.remaining, default=None)
