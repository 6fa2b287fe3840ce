"""The URLs the service connects with (``PETSTORE_DATABASE_URL``, ``PETSTORE_REDIS_URL``):
which shapes it accepts, and how one is shown without its password.

A URL is read here as the code that later connects reads it: a PostgreSQL URL by
libpq (``psycopg.conninfo.conninfo_to_dict``) and psycopg, a Redis URL by redis-py and
the ``limits`` library, so that a URL accepted at start never fails there. A message
never holds a password, nor a library's text about the URL as given (libpq echoes the
URL it could not read, redis-py a port that may be a piece of a password): a problem
is named in our words, and the URL is shown by :func:`without_password`.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse

from petstore.server.notations import UnsupportedDatabaseError, is_postgres, sqlite_path


def without_password(url: str) -> str:
    """``url`` with its password replaced by ``***``: everything between the user
    name's ``:`` and the last ``@`` (so a password with an ``@`` or ``/`` that was
    not percent-encoded is hidden whole), and the value of every query parameter
    whose name ends in ``password`` (libpq's ``password``, ``sslpassword``). A text
    without ``://`` is no URL, and is shown as ``(not a URL)``: a libpq
    ``key=value`` string would show its password."""
    scheme, found, rest = url.partition("://")
    if not found:
        return "(not a URL)"
    userinfo, at, host = rest.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        rest = f"{user}:***@{host}" if colon else f"{user}@{host}"
    return _QUERY_PASSWORD.sub(r"\1***", f"{scheme}://{rest}")


#: A query parameter holding a password, up to its end (``&``, ``#`` or the end).
_QUERY_PASSWORD = re.compile(r"([?&][A-Za-z_]*password=)[^&#]*", re.IGNORECASE)
#: A DNS name (RFC 1123 labels of at most 63 characters; ``_`` too, as container
#: networks name services) of at most 253 characters, or an IP address (checked apart).
_HOST_NAME = re.compile(
    r"(?=.{1,253}\.?$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62})(?:\.[A-Za-z0-9_-]{1,63})*\.?"
)
#: What an unescaped character of a password does to a URL, said once.
_ESCAPE_HINT = (
    "percent-encode a '%', '@', '/' or ':' in a user name or password (%25, %40, %2F, %3A)"
)


def check_database_url(url: str) -> str:
    """``url`` when a store serves it: ``sqlite:///file``, or a PostgreSQL URL
    :func:`check_postgres_url` accepts. Raises UnsupportedDatabaseError (a
    ValueError) saying what is wrong, the URL shown without its password."""
    if sqlite_path(url) is not None:  # sqlite_path raises its own for a pathless one
        return url
    if is_postgres(url):
        return check_postgres_url(url)
    scheme = url.partition(":")[0]
    if not url.partition(":")[1] or not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme):
        raise UnsupportedDatabaseError(
            "not a URL: give sqlite:///path/to/file.db or "
            "postgresql://user:password@host:port/database"
        )
    raise UnsupportedDatabaseError(f"unsupported database URL scheme: {scheme!r}")


def check_postgres_url(url: str) -> str:
    """``url`` when libpq reads it and psycopg can connect with what it says: each
    host a DNS name, an IP address or a socket folder (``/...``); each port 1-65535,
    one port or one per host; each ``hostaddr`` an IP address, one per host; the
    integer and enumerated options written as libpq takes them. Raises
    UnsupportedDatabaseError naming the problem, never the password."""
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    shown = without_password(url)
    try:
        params = {k: str(v) for k, v in conninfo_to_dict(url).items() if v is not None}
    except ProgrammingError:
        try:
            conninfo_to_dict(shown)
        except ProgrammingError as exc:
            message = str(exc).strip()  # libpq quotes ``shown`` at most
            raise UnsupportedDatabaseError(f"libpq cannot read it: {message} ({shown})") from None
        raise UnsupportedDatabaseError(
            f"libpq cannot read its user name or password ({shown}): {_ESCAPE_HINT}"
        ) from None
    problem = _postgres_problem(params)
    if problem is not None:
        raise UnsupportedDatabaseError(f"{problem} ({shown})")
    return url


def _postgres_problem(params: dict[str, str]) -> str | None:
    """What psycopg or libpq would refuse in the parsed ``params`` only when
    connecting, or None. Never quotes a host or port: with a password not
    percent-encoded, libpq reads a piece of it as one."""
    hosts = params["host"].split(",") if "host" in params else []
    if not all(h == "" or h.startswith("/") or _is_host(h) for h in hosts):
        return f"a host is not a host name, an IP address or a socket folder; {_ESCAPE_HINT}"
    ports = params["port"].split(",") if "port" in params else []
    if not all(p == "" or (p.isdigit() and 1 <= int(p) <= 65535) for p in ports):
        return f"a port is not a number from 1 to 65535; {_ESCAPE_HINT}"
    if len(ports) > 1 and len(ports) != max(len(hosts), 1):
        return f"{len(ports)} ports for {len(hosts)} hosts: give one port, or one per host"
    if "hostaddr" in params:
        addresses = params["hostaddr"].split(",")
        if not all(_is_address(a) for a in addresses):
            return "hostaddr must be IP addresses, separated by commas"
        if hosts and len(addresses) != len(hosts):
            return f"{len(addresses)} hostaddr values for {len(hosts)} hosts: give one per host"
    for name in _INTEGER_OPTIONS.intersection(params):
        if not re.fullmatch(r"[0-9]{1,9}", params[name].strip()):
            return f"{name} must be a whole number of 0 or more, not {params[name]!r}"
    for name, allowed in _ENUMERATED_OPTIONS.items():
        if name in params and params[name] not in allowed:
            return f"{name} must be one of {', '.join(sorted(allowed))}, not {params[name]!r}"
    return None


#: libpq's options that take a whole number (psycopg reads ``connect_timeout`` itself).
_INTEGER_OPTIONS = frozenset(
    {
        "connect_timeout",
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
    }
)
#: libpq's options that take one of a few words, and the words (the libpq
#: documentation's "Parameter Key Words").
_ENUMERATED_OPTIONS = {
    "sslmode": frozenset({"disable", "allow", "prefer", "require", "verify-ca", "verify-full"}),
    "gssencmode": frozenset({"disable", "prefer", "require"}),
    "channel_binding": frozenset({"disable", "prefer", "require"}),
    "target_session_attrs": frozenset(
        {"any", "read-write", "read-only", "primary", "standby", "prefer-standby"}
    ),
    "load_balance_hosts": frozenset({"disable", "random"}),
    "sslnegotiation": frozenset({"postgres", "direct"}),
}


def check_redis_url(url: str | None) -> str | None:
    """A ``redis://`` or ``rediss://`` URL as it is, None for none or an empty one.

    Accepted when redis-py and ``limits`` (which counts) read a host name or IP
    address, a port 1-65535 (``limits`` needs it written), an optional database
    number (``/0``; redis-py would take another path as database 0) and query
    parameters its connection takes. Raises ValueError naming the problem, never
    the password."""
    if not url:
        return None
    if not url.startswith(("redis://", "rediss://")):
        raise ValueError("must be a redis:// or rediss:// URL")
    shown = without_password(url)
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        raise ValueError(f"cannot be read as a URL ({shown}); {_ESCAPE_HINT}") from None
    if not parts.hostname or not port or not _is_host(parts.hostname):
        raise ValueError(
            f"must name a host and a port from 1 to 65535, e.g. "
            f"redis://:PASSWORD@redis.internal:6379/0 ({shown}); {_ESCAPE_HINT}"
        )
    if not re.fullmatch(r"/?|/[0-9]{1,9}", parts.path):
        raise ValueError(f"the path after the port must be a database number, e.g. /0 ({shown})")
    from redis.asyncio import ConnectionPool

    try:  # builds what the service's pool builds, without connecting
        ConnectionPool.from_url(url).make_connection()  # type: ignore[no-untyped-call]
    except (TypeError, ValueError):
        raise ValueError(
            f"redis-py refuses one of its query parameters, or its value ({shown})"
        ) from None
    return url


def _is_host(name: str) -> bool:
    """Whether ``name`` is a DNS name or an IP address (an IPv6 one without brackets)."""
    return _is_address(name) or _HOST_NAME.fullmatch(name) is not None


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
