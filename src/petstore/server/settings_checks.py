"""The checks of ``Settings`` that read several settings at once, or files: each
problem one sentence naming its variables, for ``Settings``' validation
(:mod:`.config`)."""

from __future__ import annotations

import ssl
from pathlib import Path


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
