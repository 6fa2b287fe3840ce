"""The PostgreSQL of ``python -m bench.postgres_tls`` (``bench.postgres_server``):
it serves TLS that ``verify-full`` accepts with the run's CA, and the check after
each round tells an encrypted connection from a plain one by the side's
``application_name``."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from bench import postgres_server
from testbed.certificates import Certificates

pytestmark = pytest.mark.servers  # a PostgreSQL of the test's own


def test_the_tls_side_verifies_the_server_and_a_plain_connection_under_its_name_fails(
    tmp_path: Path,
) -> None:
    with postgres_server.running() as (url, certificates):
        tls, plain = (
            postgres_server.side_url(url, side, ca=certificates.ca) for side in ("TLS", "plain")
        )
        with psycopg.connect(tls), psycopg.connect(plain):
            negotiated = postgres_server.check_encryption(postgres_server.encryption(url))
        assert negotiated.startswith("TLSv1.3 ")

        stranger = Certificates(tmp_path / "stranger")
        stranger.make("other")
        with pytest.raises(psycopg.OperationalError):  # a CA that did not sign it
            psycopg.connect(tls.replace(str(certificates.ca), str(stranger.ca))).close()

        impostor = plain.replace("bench-plain", "bench-tls")
        with (
            psycopg.connect(plain),
            psycopg.connect(impostor),
            pytest.raises(RuntimeError, match="connections not as the sides say"),
        ):
            postgres_server.check_encryption(postgres_server.encryption(url))
