"""The checks of ``Settings`` that read several settings at once, or files: each
problem one sentence naming its variables, for ``Settings``' validation
(:mod:`.config`)."""

from __future__ import annotations

import importlib.util
import re
import ssl
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError


def contradictions(
    *, drain_seconds: float, timeout_seconds: float, metrics_port: int | None, workers: int,
    port: int, tls_certificate: Path | None, tls_key: Path | None,
) -> list[str]:  # fmt: skip
    """What these settings ask that cannot be done together: a drain not shorter than
    the shutdown timeout, a metrics port with several workers or on the API's port,
    and a TLS certificate without its key or the reverse. The files themselves are
    ``serve``'s to read (:func:`tls_problem`): another command needs none."""
    problems = []
    if drain_seconds >= timeout_seconds:
        problems.append(
            "PETSTORE_SHUTDOWN_DRAIN_SECONDS must be less than "
            "PETSTORE_SHUTDOWN_TIMEOUT_SECONDS (the drain is part of the timeout)"
        )
    if metrics_port is not None:
        if workers != 1:
            problems.append("PETSTORE_METRICS_PORT needs PETSTORE_WORKERS=1")
        if metrics_port == port:
            problems.append("PETSTORE_METRICS_PORT must differ from PETSTORE_PORT")
    if (tls_certificate is None) != (tls_key is None):
        problems.append(_NOT_ALONE)
    return problems


_NOT_ALONE = "PETSTORE_TLS_CERTIFICATE and PETSTORE_TLS_KEY go together: set both or neither"


def tls_problem(certificate: Path | None, key: Path | None) -> str | None:
    """Why ``serve`` could not listen with TLS on the ``certificate`` (PEM, its chain
    after it) and its private ``key`` (PEM, not encrypted), or None: one without the
    other, a file that cannot be read, or files that are not a certificate and its
    key. The key's content is never shown."""
    if certificate is None and key is None:
        return None
    if certificate is None or key is None:
        return _NOT_ALONE
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(certificate, key)
    except ssl.SSLError:
        return (
            "PETSTORE_TLS_CERTIFICATE and PETSTORE_TLS_KEY must be a PEM certificate and "
            "its own private key, not encrypted"
        )
    except OSError as exc:
        return f"PETSTORE_TLS_CERTIFICATE or PETSTORE_TLS_KEY cannot be read: {exc.strerror}"
    return None


def event_loop_problem(event_loop: str) -> str | None:
    """Why ``serve`` could not run its workers on ``event_loop`` (the setting
    ``PETSTORE_EVENT_LOOP``), or None: uvloop where it cannot be imported (it has
    no Windows build)."""
    if event_loop == "uvloop" and importlib.util.find_spec("uvloop") is None:
        return (
            "PETSTORE_EVENT_LOOP=uvloop, but uvloop is not installed (it has no Windows "
            "build): install it, or set PETSTORE_EVENT_LOOP=asyncio"
        )
    return None


def problems_of(invalid: ValidationError) -> list[str]:
    """Each validation error as ``PETSTORE_<FIELD>: reason`` (a ValueError's own
    message without pydantic's ``Value error,``); a check of several settings says
    their names itself."""
    problems = []
    for error in invalid.errors():
        cause = error.get("ctx", {}).get("error")
        reason = str(cause) if error["type"] == "value_error" and cause else error["msg"]
        field = error["loc"][0] if error["loc"] else None
        problems.append(reason if field is None else f"PETSTORE_{str(field).upper()}: {reason}")
    return problems


def not_text(environ: Mapping[str, str], names: set[str]) -> list[str]:
    """Each variable of ``names`` (any case) whose value in ``environ`` is not UTF-8
    text: ``os.environ`` holds such bytes as lone surrogates (PEP 383), which
    pydantic cannot even hold, so they are refused by name first."""
    return [
        f"{name.upper()}: is not UTF-8 text"
        for name, value in environ.items()
        if name.upper() in names and _UNDECODED.search(value)
    ]


#: What os.environ makes of bytes that are not UTF-8 (PEP 383).
_UNDECODED = re.compile("[\udc80-\udcff]")
