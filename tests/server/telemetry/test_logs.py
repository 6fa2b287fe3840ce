"""The log lines on stderr (D18): the access line has one shape, in JSON and in text."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from petstore.server.app import create_app
from petstore.server.config import Settings
from petstore.server.telemetry import logs, logstream
from petstore.server.telemetry.escapes import escape_field
from petstore.server.telemetry.logstream import BufferedStderr

#: A JSON access line's fields, in their order, when every one has a value.
JSON_FIELDS = [
    "time",
    "level",
    "logger",
    "message",
    "request_id",
    "method",
    "route",
    "status",
    "duration_ms",
    "api_key_id",
    "client",
]
TEXT_TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"
JSON_TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00"


def log_known(request_id: str = "abc") -> None:
    """A getPet-like line with every field set."""
    logs.AccessLog().access(
        request_id=request_id,
        method="GET",
        route="/v1/pets/{petId}",
        path="/v1/pets/7",
        status=200,
        seconds=0.0012,
        api_key_id=3,
        client="127.0.0.1:5000",
    )


def log_unknown(request_id: str = "r2") -> None:
    """A line of an unknown path, without key or client."""
    logs.AccessLog().access(
        request_id=request_id,
        method="GET",
        route=None,
        path="/nowhere",
        status=404,
        seconds=0.002,
        api_key_id=None,
        client=None,
    )


@pytest.fixture
def configure() -> Iterator[Callable[[bool], BufferedStderr]]:
    """``logs.configure(level="INFO", json=...)``, which returns its handler; the
    ``petstore`` loggers restored afterwards, and access lines no longer handed to a
    JSON handler."""
    logger = logging.getLogger("petstore")
    saved = logger.handlers[:], logger.level, logger.propagate
    yield lambda as_json: logs.configure(level="INFO", json=as_json)
    logs.configure(level="INFO", json=False)
    logger.handlers[:], logger.level, logger.propagate = saved


def written(capfd: pytest.CaptureFixture[str]) -> list[str]:
    """The lines written to stderr (fd 2) so far, the log buffer flushed first."""
    for handler in logging.getLogger("petstore").handlers:
        handler.flush()
    return capfd.readouterr().err.splitlines()


# Text -------------------------------------------------------------------------------


def test_a_text_access_line_carries_the_key_id_and_the_client(
    configure: Callable[[bool], None], capfd: pytest.CaptureFixture[str]
) -> None:
    configure(False)
    log_known()
    (line,) = written(capfd)
    assert re.fullmatch(
        rf"{TEXT_TIME} INFO petstore\.access request_id=abc GET /v1/pets/\{{petId\}} 200 1\.2ms"
        r" api_key_id=3 client=127\.0\.0\.1:5000",
        line,
    ), line


def test_a_text_access_line_leaves_out_the_fields_it_has_not(
    configure: Callable[[bool], None], capfd: pytest.CaptureFixture[str]
) -> None:
    configure(False)
    log_unknown()
    (line,) = written(capfd)
    assert re.fullmatch(
        rf"{TEXT_TIME} INFO petstore\.access request_id=r2 GET /nowhere 404 2\.0ms", line
    )
    assert "None" not in line


def test_other_text_lines_name_the_request_id_or_a_dash(
    configure: Callable[[bool], None], capfd: pytest.CaptureFixture[str]
) -> None:
    configure(False)
    logging.getLogger("petstore.test").warning("outside a request")
    logging.getLogger("petstore.test").warning("in one", extra={"request_id": "r9"})
    assert [line.split(" ", 2)[2] for line in written(capfd)] == [
        "WARNING petstore.test request_id=- outside a request",
        "WARNING petstore.test request_id=r9 in one",
    ]


# JSON -------------------------------------------------------------------------------


def test_a_json_access_line_has_every_field_in_order(
    configure: Callable[[bool], None], capfd: pytest.CaptureFixture[str]
) -> None:
    configure(True)
    log_known()
    (line,) = [json.loads(text) for text in written(capfd)]
    assert list(line) == JSON_FIELDS
    assert re.fullmatch(JSON_TIME, line.pop("time"))
    assert line == {
        "level": "INFO",
        "logger": "petstore.access",
        "message": "GET /v1/pets/{petId} 200 1.2ms",
        "request_id": "abc",
        "method": "GET",
        "route": "/v1/pets/{petId}",
        "status": 200,
        "duration_ms": 1.2,
        "api_key_id": 3,
        "client": "127.0.0.1:5000",
    }


def test_a_json_access_line_leaves_out_the_fields_that_are_none(
    configure: Callable[[bool], None], capfd: pytest.CaptureFixture[str]
) -> None:
    configure(True)
    log_unknown()
    (line,) = [json.loads(text) for text in written(capfd)]
    assert list(line) == [f for f in JSON_FIELDS if f not in ("route", "api_key_id", "client")]
    assert line["message"] == "GET /nowhere 404 2.0ms"
    assert line["status"] == 404


def test_json_access_lines_keep_their_order_among_other_log_lines(
    configure: Callable[[bool], None], capfd: pytest.CaptureFixture[str]
) -> None:
    # Access lines are encoded in batches; a line logged after them still comes after.
    configure(True)
    for n in range(3):
        log_unknown(f"r{n}")
    logging.getLogger("petstore.test").warning("after the requests")
    lines = [json.loads(line) for line in capfd.readouterr().err.splitlines()]
    assert [line["message"] for line in lines] == [
        "GET /nowhere 404 2.0ms",
        "GET /nowhere 404 2.0ms",
        "GET /nowhere 404 2.0ms",
        "after the requests",
    ]
    assert [line["request_id"] for line in lines] == ["r0", "r1", "r2", "-"]


def test_many_json_access_lines_are_all_written_in_order(
    configure: Callable[[bool], None], capfd: pytest.CaptureFixture[str]
) -> None:
    configure(True)
    count = logstream.ACCESS_BATCH * 2 + 3
    for n in range(count):
        log_known(f"r{n}")
    lines = [json.loads(text) for text in written(capfd)]
    assert [line["request_id"] for line in lines] == [f"r{n}" for n in range(count)]


# The same line whichever way it is written -------------------------------------------


class Keep(logging.Handler):
    """Keeps the records it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.mark.parametrize("log", [log_known, log_unknown], ids=["known", "unknown"])
def test_an_access_record_formats_as_the_batched_json_line(
    configure: Callable[[bool], None],
    capfd: pytest.CaptureFixture[str],
    log: Callable[[], None],
) -> None:
    # Text logs, or loggers left to the caller, get a LogRecord; JsonFormatter must
    # turn it into the line the JSON handler encodes without one.
    configure(True)
    log()
    (batched,) = [json.loads(text) for text in written(capfd)]
    configure(False)
    keep = Keep()
    logs.access_log.addHandler(keep)
    try:
        log()
    finally:
        logs.access_log.removeHandler(keep)
    assert len(written(capfd)) == 1  # the text line, out of the way
    (record,) = keep.records
    formatted: dict[str, Any] = json.loads(logs.JsonFormatter().format(record))
    assert list(formatted) == list(batched)
    assert re.fullmatch(JSON_TIME, formatted.pop("time"))
    batched.pop("time")
    assert formatted == batched


def test_configure_refuses_an_unknown_level_and_changes_nothing(
    configure: Callable[[bool], None],
) -> None:
    configure(False)
    logger = logging.getLogger("petstore")
    before = logger.handlers[:], logger.level
    with pytest.raises(ValueError, match="LOUD"):
        logs.configure(level="LOUD", json=True)
    assert (logger.handlers, logger.level) == before


def _flush_threads() -> int:
    return sum(thread.name == "log-flush" for thread in threading.enumerate())


def test_the_flush_thread_stops_when_replaced_and_at_shutdown(
    configure: Callable[[bool], BufferedStderr], capfd: pytest.CaptureFixture[str]
) -> None:
    before = _flush_threads()
    configure(True)
    configure(False)
    handler = configure(True)
    assert _flush_threads() == before + 1  # each configure stops the thread it replaces
    # What the lifespan of the app the worker hands its handler to does at shutdown.
    logs.AccessLog(handler).close()
    assert _flush_threads() == before
    log_known("after-close")  # written at once, nothing left in a buffer
    assert [json.loads(line)["request_id"] for line in capfd.readouterr().err.splitlines()] == [
        "after-close"
    ]


def test_a_close_under_the_handlers_lock_is_not_held_up_by_the_flush_thread() -> None:
    # What Granian() does at start (dictConfig -> logging.shutdown of every handler):
    # close each handler with its lock held. A flush thread that woke meanwhile waits
    # for that lock; the close used to wait for the thread: `petstore serve` hung
    # before "Starting granian", now and then, in CI.
    handler = logstream.BufferedStderr(logs.TextFormatter())

    def close_as_logging_does() -> None:
        with handler.lock:  # type: ignore[union-attr]
            time.sleep(logstream.FLUSH_SECONDS * 1.5)  # the flush thread wakes and waits
            logging.shutdown([weakref.ref(handler)])

    closer = threading.Thread(target=close_as_logging_does, daemon=True)
    closer.start()
    closer.join(timeout=logstream.FLUSH_SECONDS * 10)
    assert not closer.is_alive(), "the close waits for the flush thread, which waits for it"


class StalledStream:
    """A binary stream whose writes wait until :attr:`go` is set, as a write to a file
    waits behind another file's fsync on a busy disk."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.data = bytearray()

    def write(self, data: bytes) -> int:
        self.go.wait()
        self.data += data
        return len(data)

    def flush(self) -> None:
        self.go.wait()


def test_access_lines_never_wait_for_a_stalled_stream_below_the_limit() -> None:
    stream = StalledStream()
    handler = logs.handler(json=True, stream=stream)  # type: ignore[arg-type]
    access = logs.AccessLog(handler)
    count = logstream.ACCESS_BATCH * 3  # three batches, far below ACCESS_WAITING_MAX

    def requests() -> None:
        for n in range(count):
            access.access(
                request_id=f"r{n}",
                method="GET",
                route="/v1/pets/{petId}",
                path="/v1/pets/7",
                status=200,
                seconds=0.001,
                api_key_id=1,
                client=None,
            )

    loop = threading.Thread(target=requests, daemon=True)
    loop.start()
    loop.join(timeout=5)
    stalled = loop.is_alive()
    stream.go.set()
    access.close()
    assert not stalled, "the request's path waited for the stream"
    lines = [json.loads(line) for line in stream.data.decode().splitlines()]
    assert [line["request_id"] for line in lines] == [f"r{n}" for n in range(count)]


def test_configure_patches_nothing_of_the_standard_library(
    configure: Callable[[bool], None],
) -> None:
    flags = (logging._srcfile, logging.logThreads, logging.logProcesses)
    configure(True)
    assert (logging._srcfile, logging.logThreads, logging.logProcesses) == flags


# What a client sends cannot forge a line ---------------------------------------------

#: A path that, written as it is, would end the line and start a forged access line
#: coloured red by an ANSI escape.
FORGING_PATH = (
    "/nowhere\n2026-01-01 00:00:00,000 INFO petstore.access request_id=x GET /v1/pets 200"
    " 1.0ms\x1b[31m\r\x7f\x85\u2028"
)
ESCAPED_PATH = (
    "/nowhere\\n2026-01-01\\x2000:00:00,000\\x20INFO\\x20petstore.access\\x20request_id=x"
    "\\x20GET\\x20/v1/pets\\x20200\\x201.0ms\\x1b[31m\\r\\x7f\\x85\\u2028"
)


def log_forging(client: str | None = None) -> None:
    logs.AccessLog().access(
        request_id="r3",
        method="GET",
        route=None,
        path=FORGING_PATH,
        status=404,
        seconds=0.002,
        api_key_id=None,
        client=client,
    )


def test_a_text_access_line_escapes_the_control_characters_of_the_path(
    configure: Callable[[bool], None], capfd: pytest.CaptureFixture[str]
) -> None:
    configure(False)
    log_forging(client="10.0.0.1:0")
    (line,) = written(capfd)
    assert line.endswith(
        f"INFO petstore.access request_id=r3 GET {ESCAPED_PATH} 404 2.0ms client=10.0.0.1:0"
    ), line
    assert "\x1b" not in line


def test_a_forwarded_value_that_is_not_an_address_is_logged_escaped_and_ignored(
    database_url: str, configure: Callable[[bool], None], capfd: pytest.CaptureFixture[str]
) -> None:
    """Behind a trusted proxy the client's address comes from X-Forwarded-For when it
    is one: anything else is written, escaped, in a warning, never as the client."""
    configure(False)
    app = create_app(Settings(database_url=database_url, trust_forwarded_headers=True))
    with TestClient(app) as client:
        client.get("/healthz", headers={"X-Forwarded-For": "10.0.0.1\x1b[2J client=1"})
    (warning, line) = [line for line in written(capfd) if "/healthz" in line or "WARN" in line]
    assert warning.endswith("not an IP address: 10.0.0.1\\x1b[2J\\x20client=1"), warning
    assert line.endswith("client=testclient:50000"), line
    assert "\x1b" not in warning + line


def test_a_json_access_line_escapes_the_control_characters_of_the_path(
    configure: Callable[[bool], None], capfd: pytest.CaptureFixture[str]
) -> None:
    configure(True)
    log_forging()
    (text,) = written(capfd)
    assert json.loads(text)["message"] == f"GET {ESCAPED_PATH} 404 2.0ms"
    assert not any(c in text for c in "\x1b\x7f\x85\u2028")


def test_other_text_lines_escape_control_characters(
    configure: Callable[[bool], None], capfd: pytest.CaptureFixture[str]
) -> None:
    configure(False)
    logging.getLogger("petstore.test").warning("a\nb\x1bc")
    (line,) = written(capfd)
    assert line.endswith("request_id=- a\\nb\\x1bc")


def test_a_percent_encoded_line_break_in_a_path_is_one_text_line(
    configure: Callable[[bool], None], capfd: pytest.CaptureFixture[str], client: Any
) -> None:
    configure(False)
    response = client.get("/nowhere%0AGET%20/v1/pets%20200%1B[31m")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    lines = [line for line in written(capfd) if "petstore.access" in line]
    assert len(lines) == 1, lines
    assert "GET /nowhere\\nGET\\x20/v1/pets\\x20200\\x1b[31m 404 " in lines[0]


def test_a_path_cannot_forge_the_fields_of_its_text_line(
    configure: Callable[[bool], None], capfd: pytest.CaptureFixture[str], client: Any
) -> None:
    """Issue 53: a path whose spaces ended the message wrote a made-up status,
    ``api_key_id`` and ``client`` into its own line."""
    configure(False)
    response = client.get("/v1/x%20404%200.2ms%20api_key_id=1%20client=10.0.0.1:1")
    assert response.status_code == 404
    (line,) = [line for line in written(capfd) if "petstore.access" in line]
    assert " api_key_id=" not in line
    assert " client=10.0.0.1:1" not in line
    assert re.search(
        r" GET /v1/x\\x20404\\x200\.2ms\\x20api_key_id=1\\x20client=10\.0\.0\.1:1 404 "
        r"[0-9.]+ms client=testclient:50000$",
        line,
    ), line


def test_a_field_escape_reads_back_one_way() -> None:
    """A backslash is escaped too, so a path that spells an escape is not taken for
    the character it names; every bidi control (the Arabic letter mark too), what is
    drawn as nothing (a soft hyphen, a tag character) and other Unicode white space
    are escaped, as D2 refuses them in names; an emoji's joiner is not."""
    assert escape_field("/a\\x20b c") == "/a\\\\x20b\\x20c"
    assert escape_field("/\u202egnp.exe\u3000\xa0") == "/\\u202egnp.exe\\u3000\\xa0"
    assert escape_field("/\u061c\xad\U000e0001") == "/\\u061c\\xad\\U000e0001"
    assert escape_field("/v1/pets/é😀\u200d🐕") == "/v1/pets/é😀\u200d🐕"
