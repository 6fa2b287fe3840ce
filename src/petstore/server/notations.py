"""The notations settings are written in: database URLs (which store serves one) and
rate limits (``600/minute``, D15 and D22).

Apart from :mod:`petstore.server.config` because the store (which backend a URL
names) and the rules (a key's own limit) check the same notations.
"""

from __future__ import annotations

import re
from pathlib import Path


class UnsupportedDatabaseError(ValueError):
    """Raised for a database URL whose scheme no store implements."""


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL, or None when ``url`` names another backend.

    Raises UnsupportedDatabaseError for an in-memory or empty SQLite URL: every
    process of the service must see the same durable file.
    """
    if not url.startswith("sqlite:"):
        return None
    if not url.startswith("sqlite:///"):
        raise UnsupportedDatabaseError("a SQLite URL looks like sqlite:///path/to/file.db")
    path = url.removeprefix("sqlite:///").split("?", 1)[0]
    if not path or path == ":memory:":
        raise UnsupportedDatabaseError("SQLite needs a file path, not an in-memory database")
    return Path(path)


def is_postgres(url: str) -> bool:
    """Whether ``url`` names a PostgreSQL database (``postgresql://`` or ``postgres://``)."""
    return url.startswith(("postgresql://", "postgres://"))


def check_rate_limit(notation: str) -> str:
    """``notation`` as a rate limit in the ``limits`` library's notation (``600/minute``,
    ``100 per minute``, ``10/second``; the units also as ``sec``, ``s``, ``min``, ``hr``,
    ``h``) allowing at least one request, as ``PETSTORE_RATE_LIMIT`` and a key's own
    limit (D22) take it; returns it with the unit spelled out. Raises ValueError
    otherwise."""
    from limits import parse

    notation = re.sub(
        r"[A-Za-z]+$", lambda unit: _UNITS.get(unit[0].lower(), unit[0]), notation.strip()
    )
    try:
        item = parse(notation)
    except ValueError:
        raise ValueError("a rate limit looks like 600/minute or 10/second") from None
    if item.amount < 1:
        raise ValueError("a rate limit allows at least 1 request")
    return notation


#: Short units a rate limit may use, and the ``limits`` library's words for them.
_UNITS = {"s": "second", "sec": "second", "secs": "second", "min": "minute", "mins": "minute"}
_UNITS |= {"h": "hour", "hr": "hour", "hrs": "hour"}


def check_database_url(url: str) -> str:
    """``url`` when a store serves it (``sqlite:///file`` or PostgreSQL); raises
    UnsupportedDatabaseError otherwise."""
    if sqlite_path(url) is None and not is_postgres(url):  # sqlite_path raises its own
        raise UnsupportedDatabaseError(f"unsupported database URL scheme: {url.split(':', 1)[0]!r}")
    return url


def check_redis_url(url: str | None) -> str | None:
    """A ``redis://`` or ``rediss://`` URL as it is, None for none or an empty one;
    raises ValueError for another scheme."""
    if url and not url.startswith(("redis://", "rediss://")):
        raise ValueError("must be a redis:// or rediss:// URL")
    return url or None
