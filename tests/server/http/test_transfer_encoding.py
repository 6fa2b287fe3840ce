"""The refusal of a ``Transfer-Encoding`` other than ``chunked`` alone, in the step
that reads a request (``http.reading.malformed``; issue 60, P8). Over real sockets,
with granian's own answers, in tests/serve/test_framing.py."""

from __future__ import annotations

import pytest

from petstore.server.http.reading import malformed

HOST = (b"host", b"127.0.0.1")


def malformed_with(*fields: tuple[bytes, bytes]) -> str | None:
    raw_headers = [HOST, *fields]
    scope = {"type": "http", "http_version": "1.1", "headers": raw_headers}
    return malformed(scope, dict(reversed(raw_headers)))


@pytest.mark.parametrize("value", [b"chunked", b"Chunked", b"CHUNKED"])
def test_chunked_alone_in_any_case_is_accepted(value: bytes) -> None:
    assert malformed_with((b"transfer-encoding", value)) is None


@pytest.mark.parametrize(
    "value",
    [b"identity, chunked", b"chunked, chunked", b"gzip, chunked", b",chunked", b"identity", b""],
)
def test_any_other_coding_is_refused(value: bytes) -> None:
    message = malformed_with((b"transfer-encoding", value))
    assert str(message).startswith("Transfer-Encoding: the only coding accepted is chunked")


def test_two_transfer_encoding_fields_are_refused() -> None:
    chunked = (b"transfer-encoding", b"chunked")
    message = malformed_with(chunked, chunked)
    assert message == "Transfer-Encoding: the header is sent more than once; send it once"
