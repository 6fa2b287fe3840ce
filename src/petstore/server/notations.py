"""The notations settings are written in: which store a database URL names, rate
limits (``600/minute``, D15 and D22), host lists, log levels, dates, and the checks of
a secret's value.
Whether a URL can be connected with is :mod:`petstore.server.connection_urls`'.

Apart from :mod:`petstore.server.config` because the store (which backend a URL
names) and the rules (a key's own limit) check the same notations.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Protocol, TypeVar


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
    """``notation`` as one rate limit allowing at least one request in a window of at
    least one unit, as ``PETSTORE_RATE_LIMIT`` and a key's own limit (D22) take it:
    ``600/minute``, ``100 per minute``, ``10/2 minutes``; the units second, minute,
    hour, day, month, year (singular or plural, any case, also ``s``, ``sec``,
    ``min``, ``h``, ``hr``). Returns it written one way, in the ``limits`` library's
    notation: ``100/minute``, ``10/2 minutes``. Raises ValueError naming what is
    wrong: the form, a count or window of 0, or more than one limit
    (``5/minute;6/second``, which the library would read as its first part only)."""
    from limits import parse

    if _SEPARATORS.search(notation):
        raise ValueError(f"one rate limit only, e.g. 600/minute; {notation!r} names several")
    written = _RATE_LIMIT.fullmatch(notation)
    unit = None if written is None else _UNITS.get(written["unit"].lower())
    if written is None or unit is None:
        raise ValueError(
            f"a rate limit looks like 600/minute or 10/second (units: second, minute, "
            f"hour, day, month, year), not {notation!r}"
        )
    amount, window = int(written["amount"]), int(written["window"] or "1")
    if amount < 1:
        raise ValueError(f"a rate limit allows at least 1 request, not {notation!r}")
    if window < 1:
        raise ValueError(f"a rate limit's window is at least 1 {unit}, not {notation!r}")
    canonical = f"{amount}/{unit}" if window == 1 else f"{amount}/{window} {unit}s"
    parse(canonical)  # the library that counts reads it as written here
    return canonical


#: One rate limit: a count, ``/`` or ``per``, an optional window of several units,
#: and the unit; at most 12 digits each (``int()`` of thousands of digits is slow).
_RATE_LIMIT = re.compile(
    r"\s*(?P<amount>[0-9]{1,12})\s*(?:/|\s+per\s+)\s*(?:(?P<window>[0-9]{1,12})\s*)?"
    r"(?P<unit>[A-Za-z]+)\s*",
    re.IGNORECASE,
)
#: What the ``limits`` library takes as the separator of several limits.
_SEPARATORS = re.compile("[,;|]")
#: The units a rate limit may use, and the ``limits`` library's words for them.
_UNITS = {"s": "second", "sec": "second", "secs": "second", "min": "minute", "mins": "minute"}
_UNITS |= {"h": "hour", "hr": "hour", "hrs": "hour"}
_UNITS |= {word: word for word in ("second", "minute", "hour", "day", "month", "year")}
_UNITS |= {f"{word}s": word for word in ("second", "minute", "hour", "day", "month", "year")}


def check_failure_limit(notation: str | None) -> str | None:
    """A failed-authentication limit: a rate limit (``30/minute``), or ``off``
    (None). Raises ValueError otherwise."""
    if notation is None or notation.strip().lower() == "off":
        return None
    return check_rate_limit(notation)


#: A host name, an IPv4 address or an IPv6 address (without brackets).
_HOST_NAME = re.compile(r"[a-z0-9.-]+|[0-9a-f:.]+")


def host_names(value: object) -> object:
    """A comma-separated list of host names and addresses as a tuple of lower-case
    names (IPv6 without brackets); an empty string, no host. Other values pass as
    they are. Raises ValueError naming a name that is not a host name or address."""
    if not isinstance(value, str):
        return value
    if not value.strip():
        return ()  # set but empty: no host is allowed, every link is configured
    names = tuple(name.strip().strip("[]").lower() for name in value.split(","))
    for name in names:
        if not _HOST_NAME.fullmatch(name):
            raise ValueError(
                f"{name!r} is not a host name or address; give names separated by "
                "commas, e.g. localhost,127.0.0.1,petstore.internal"
            )
    return names


def check_log_level(level: str) -> str:
    """``level`` in upper case when it is a level the logs know; raises ValueError."""
    if level.upper() not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
        raise ValueError("must be DEBUG, INFO, WARNING or ERROR")
    return level.upper()


def check_time_zone(moment: datetime) -> datetime:
    """``moment`` when it carries a time zone; raises ValueError."""
    if moment.tzinfo is None:
        raise ValueError("must carry a time zone, e.g. 2026-01-01T00:00:00Z")
    return moment


class _Secret(Protocol):
    def get_secret_value(self) -> str: ...


S = TypeVar("S", bound=_Secret)


def check_not_one_repeated_character(secret: S) -> S:
    """Refuse a secret whose characters are all alike (``xxxx...``, or empty): a
    placeholder, never a private value, in any environment. Raises ValueError."""
    if len(set(secret.get_secret_value())) <= 1:
        raise ValueError(
            "must be a private random value, not one character repeated "
            "(e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    return secret
