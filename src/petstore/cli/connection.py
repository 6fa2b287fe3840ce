"""What the client-side commands (``petstore pets ...``) share: the service URL and
API key from the command line, a file or the environment, the client made of them,
and the exit code of each error family (the table in :mod:`petstore.cli.pets`).

An API key is read with its surrounding white space dropped (a pasted key, a file's
line end, a CR), and no message printed here ever contains it (D13). What the service
answered, a file name and anything else from outside is shown through
:func:`petstore.text.printable`: its escapes can neither colour the terminal, set
its title, nor hide or reorder text.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click

from petstore.client import ENV_API_KEY, ENV_URL, Client
from petstore.client.errors import (
    AuthenticationError,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    GoneError,
    NotFoundError,
    PayloadError,
    PetstoreClientError,
    RateLimitedError,
    ServerError,
    ServiceNotFoundError,
    TransportError,
)
from petstore.text import printable

T = TypeVar("T")

EXIT_CODES: list[tuple[type[PetstoreClientError], int]] = [
    (AuthenticationError, 3),
    (ForbiddenError, 9),
    (ServiceNotFoundError, 8),  # before its base class NotFoundError
    (NotFoundError, 4),
    (GoneError, 4),
    (BadRequestError, 5),
    (ConflictError, 5),
    (PayloadError, 5),
    (RateLimitedError, 6),
    (ServerError, 7),
    (TransportError, 8),
]
_META = "petstore.cli.pets."


def fail(error: PetstoreClientError) -> click.exceptions.Exit:
    """Report ``error`` on stderr, its code and message (the service's words)
    escaped; the Exit to raise, with the code for its family."""
    if isinstance(error, ServiceNotFoundError):
        click.echo(f"Error: {printable(error.message)}", err=True)
    else:
        click.echo(f"Error: {printable(error.code)}: {printable(error.message)}", err=True)
    code = next((code for cls, code in EXIT_CODES if isinstance(error, cls)), 1)
    return click.exceptions.Exit(code)


def call(action: Callable[[], T]) -> T:
    """``action()``; a client error is reported and exits (:func:`fail`)."""
    try:
        return action()
    except PetstoreClientError as exc:
        raise fail(exc) from None


def _remember(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """Keep ``--url``/``--api-key``/``--api-key-file`` in the context tree's shared
    ``meta``: given after the subcommand it is parsed last, so it wins."""
    if value is not None:
        ctx.meta[f"{_META}{param.name}"] = value
        if param.name in ("api_key", "api_key_file"):  # the later of the two wins
            other = "api_key_file" if param.name == "api_key" else "api_key"
            ctx.meta.pop(f"{_META}{other}", None)


def connection(command: Callable[..., None]) -> Callable[..., None]:
    """Add ``--url``, ``--api-key`` and ``--api-key-file`` to ``command``."""
    key = click.option(
        "--api-key",
        metavar="KEY",
        expose_value=False,
        callback=_remember,
        help=f"API key [env: {ENV_API_KEY}]; prefer the variable or --api-key-file.",
    )
    key_file = click.option(
        "--api-key-file",
        metavar="FILE",
        expose_value=False,
        callback=_remember,
        help="Read the API key from FILE (its first line; white space around it dropped).",
    )
    url = click.option(
        "--url",
        metavar="URL",
        expose_value=False,
        callback=_remember,
        help=f"Service base URL, http://HOST:PORT/v1 [env: {ENV_URL}].",
    )
    return url(key(key_file(command)))


def _key(ctx: click.Context) -> str:
    """The API key of ``--api-key-file``, ``--api-key`` or the environment, stripped.
    Raises click.UsageError naming the file (never the key) when it cannot be read."""
    if (name := ctx.meta.get(f"{_META}api_key_file")) is not None:
        try:
            lines = Path(name).read_text(encoding="utf-8").strip().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            shown = printable(name)
            raise click.UsageError(f"cannot read the API key from {shown}: {reason}") from None
        if not lines:
            raise click.UsageError(f"{printable(name)} is empty: it should hold the API key")
        return lines[0].strip()
    return str(ctx.meta.get(f"{_META}api_key") or os.environ.get(ENV_API_KEY) or "").strip()


def client(ctx: click.Context) -> Client:
    """The client for the URL and key of the command line, else of the environment.
    Raises click.UsageError (exit 2) when one is missing, the URL is not an http(s)
    base URL (:func:`petstore.client.urls.base_url`: never shown with its user name
    and password), or the key holds white space inside."""
    url = str(ctx.meta.get(f"{_META}url") or os.environ.get(ENV_URL) or "").strip()
    key = _key(ctx)
    if not url:
        raise click.UsageError(f"no service URL: pass --url or set {ENV_URL} (it ends in /v1)")
    if not key:
        raise click.UsageError(f"no API key: pass --api-key or set {ENV_API_KEY}")
    try:
        return Client(url, api_key=key)
    except ValueError as exc:
        raise click.UsageError(printable(str(exc))) from None
