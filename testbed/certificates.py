"""The test bed's certificates: one certificate authority of the deployment's own and
a certificate for each host that serves TLS, made by deploy/tls/make-certificates,
the operator's own step (docs/operations/tls.md).

A host's certificate is named by the address clients connect to (an IP address is in
its subjectAltName as both a DNS name and an IP address), so libpq's
``sslmode=verify-full``, redis-py's ``rediss://`` and every HTTPS client verify it
exactly as they would a production host's name.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from testbed import DEPLOY
from testbed.processes import ServerUnavailableError, give_to_postgres

#: The operator's script that makes the CA and the hosts' certificates.
MAKE_CERTIFICATES = DEPLOY / "tls" / "make-certificates"


class Certificates:
    """The CA and the certificates under ``folder`` (nothing exists until
    :meth:`make`)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @property
    def ca(self) -> Path:
        """The CA's certificate, which every client trusts (``sslrootcert``)."""
        return self.folder / "ca.crt"

    def certificate(self, name: str) -> Path:
        """``name``'s certificate (PEM)."""
        return self.folder / f"{name}.crt"

    def key(self, name: str) -> Path:
        """``name``'s private key (PEM, mode 0600)."""
        return self.folder / f"{name}.key"

    def pem(self, name: str) -> Path:
        """``name``'s certificate then its key in one file (HAProxy's ``crt``)."""
        return self.folder / f"{name}.pem"

    def make(self, *names: str, days: int | None = None) -> None:
        """Make (or renew) the certificates of ``names`` (``NAME`` or
        ``NAME,ALTNAME,...``; the files are named by the first), valid ``days`` days
        (the script's default when None), with the CA made first when there is none.
        Raises ServerUnavailableError when the script fails."""
        argv = [str(MAKE_CERTIFICATES), *(["--days", str(days)] if days else [])]
        made = subprocess.run(  # noqa: S603 - the deployment's own script
            [*argv, str(self.folder), *names], capture_output=True, text=True, check=False
        )
        if made.returncode != 0:
            raise ServerUnavailableError(f"make-certificates: {made.stderr.strip()}")

    def give_to_postgres(self) -> None:
        """Make the folder and every file in it the PostgreSQL user's (PostgreSQL and
        pgBackRest refuse a key that another user can read, and run as that user)."""
        for path in [self.folder, *self.folder.iterdir()]:
            give_to_postgres(path)
