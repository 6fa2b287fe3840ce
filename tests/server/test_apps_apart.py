"""Two apps in one process keep apart: each writes its access lines where it was told
and points its links at its own base, and the end of one app's lifespan closes its
own log handler only, neither the other app's nor the process's
(``server.app.create_app``, ``telemetry.logs.AccessLog``, ``http.links.LinkBase``)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from starlette.testclient import TestClient

from petstore.server.app import create_app
from petstore.server.config import load_settings
from petstore.server.telemetry import logs, logstream

SECRET = "a-private-cursor-secret-for-these-tests"
A = {
    "environment": "production",
    "base_url": "https://a.example.org/v1",
    "allowed_hosts": "a.internal",
}
B = {
    "environment": "staging",
    "staging_base_url": "https://b.example.org/v1",
    "allowed_hosts": "b.internal",
}


def flush_threads() -> int:
    return sum(thread.name == "log-flush" for thread in threading.enumerate())


def access_ids(path: Path) -> list[str]:
    """The request ids of the access lines written to ``path`` so far."""
    lines = [json.loads(line) for line in path.read_bytes().splitlines()]
    return [line["request_id"] for line in lines if line["logger"] == logs.LOGGER]


def next_link(client: TestClient, auth: dict[str, str], *, host: str, request_id: str) -> str:
    """The URL of the rel="next" link of a one-animal page asked for with ``host``."""
    headers = {**auth, "host": host, "x-request-id": request_id}
    page = client.get("/v1/pets?limit=1", headers=headers)
    assert page.status_code == 200, page.text
    link: str = page.headers["link"]
    return link[1 : link.index(">")]


@pytest.fixture
def log_files(tmp_path: Path) -> Iterator[Callable[[str], tuple[Path, BinaryIO]]]:
    opened: list[BinaryIO] = []

    def open_log(name: str) -> tuple[Path, BinaryIO]:
        path = tmp_path / name
        opened.append(path.open("wb"))
        return path, opened[-1]

    yield open_log
    for file in opened:
        file.close()


def test_one_app_stopping_leaves_the_other_its_logs_and_links(
    database_url: str,
    make_key: Callable[..., str],
    log_files: Callable[[str], tuple[Path, BinaryIO]],
) -> None:
    auth = {"Authorization": f"Bearer {make_key()}"}
    (path_a, file_a), (path_b, file_b) = log_files("a.log"), log_files("b.log")
    threads = flush_threads()

    def app(settings: dict[str, Any], stream: BinaryIO) -> TestClient:
        handler = logs.handler(json=True, stream=stream)
        built = create_app(
            load_settings(database_url=database_url, cursor_secret=SECRET, **settings),
            log_handler=handler,
        )
        return TestClient(built, raise_server_exceptions=False)

    with app(B, file_b) as client_b:
        with app(A, file_a) as client_a:
            for name in ("Rex", "Bo"):
                made = client_a.post("/v1/pets", json={"name": name, "categoryId": 1}, headers=auth)
                assert made.status_code == 201, made.text
            assert flush_threads() == threads + 2  # one for each app
            assert next_link(client_a, auth, host="a.internal", request_id="a-1").startswith(
                "http://a.internal/v1/pets?"
            )
            assert next_link(client_a, auth, host="b.internal", request_id="a-2").startswith(
                "https://a.example.org/v1/pets?"
            )
            assert next_link(client_b, auth, host="b.internal", request_id="b-1").startswith(
                "http://b.internal/v1/pets?"
            )
        # App A's lifespan has ended; app B goes on.
        assert flush_threads() == threads + 1  # A's own flush thread, and no other, stopped
        assert access_ids(path_a)[-2:] == ["a-1", "a-2"]  # A wrote out its last lines
        assert next_link(client_b, auth, host="a.internal", request_id="b-2").startswith(
            "https://b.example.org/v1/pets?"
        )
        assert next_link(client_b, auth, host="b.internal", request_id="b-3").startswith(
            "http://b.internal/v1/pets?"
        )
        deadline = time.monotonic() + logstream.FLUSH_SECONDS * 10
        while access_ids(path_b)[-3:] != ["b-1", "b-2", "b-3"]:  # B's own thread flushes
            assert time.monotonic() < deadline, access_ids(path_b)
            time.sleep(0.05)
    assert not {"b-1", "b-2", "b-3"} & set(access_ids(path_a))
    assert not {"a-1", "a-2"} & set(access_ids(path_b))
    assert flush_threads() == threads


def test_an_app_without_a_handler_of_its_own_leaves_the_process_handler_open(
    database_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """An app given no handler writes through the process's (``logs.configure``);
    the end of its lifespan flushes that handler but does not close it: the flush
    thread goes on for the process and the next app."""
    logger = logging.getLogger("petstore")
    saved = logger.handlers[:], logger.level, logger.propagate
    process = logs.configure(level="INFO", json=True)
    try:
        threads = flush_threads()
        settings = load_settings(database_url=database_url, cursor_secret=SECRET)
        with TestClient(create_app(settings)) as client:
            assert client.get("/healthz", headers={"x-request-id": "first"}).status_code == 200
        assert flush_threads() == threads  # the process's flush thread still runs
        written = [json.loads(line) for line in capfd.readouterr().err.splitlines()]
        assert "first" in [line.get("request_id") for line in written]  # flushed at the end
        with TestClient(create_app(settings)) as client:
            assert client.get("/healthz", headers={"x-request-id": "second"}).status_code == 200
            process.flush()
            written = [json.loads(line) for line in capfd.readouterr().err.splitlines()]
            assert "second" in [line.get("request_id") for line in written]
    finally:
        logs.configure(level="INFO", json=False)
        logger.handlers[:], logger.level, logger.propagate = saved
