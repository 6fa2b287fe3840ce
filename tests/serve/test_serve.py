"""The real ``petstore serve`` process over real HTTP: start-up, the dev key, and a
schemathesis run (all checks, negative data too) over the served document."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx2
import psutil
import pytest

from petstore.server.store import migrate
from testbed.processes import child_pids, wait_gone
from tests import ROOT
from tests.conftest import LiveServer, all_pets, create_concurrently, postgres_database


def test_serve_creates_a_dev_key_and_prints_a_curl_line(live_server: LiveServer) -> None:
    key = live_server.dev_key
    assert f'curl -H "Authorization: Bearer {key}" {live_server.url}/v1/pets' in (
        live_server.output()
    )
    response = httpx2.get(f"{live_server.url}/v1/pets", headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200
    assert isinstance(response.json(), list)


def test_serve_creates_the_sqlite_file_and_its_folder(live_server: LiveServer) -> None:
    assert (live_server.root / "data" / "petstore.db").is_file()


def test_serve_does_not_print_a_key_again_when_one_is_active(tmp_path: Path) -> None:
    server = LiveServer(tmp_path)
    server.start()
    server.stop()
    first = server.dev_key
    server.start()
    server.stop()
    assert server.output().count("petstore_") == 0, "the stored key is never shown again"
    assert first


#: A staging instance's settings: a private cursor secret and its own public URL, as
#: staging requires.
STAGING = {
    "PETSTORE_ENVIRONMENT": "staging",
    "PETSTORE_CURSOR_SECRET": "s3cr3t-" * 6,
    "PETSTORE_STAGING_BASE_URL": "https://staging.pets.example.org/v1",
}


def test_staging_serve_prints_no_key_unless_asked(tmp_path: Path) -> None:
    server = LiveServer(tmp_path, env=STAGING)
    server.start()
    server.stop()
    assert "petstore_" not in server.output(), "no key when none is active and none asked"
    assert "Serving" in server.output()
    server.start("--dev-key")
    server.stop()
    key = server.dev_key
    assert server.output().count(key) == 2  # the key, and the curl line
    server.start("--dev-key")
    server.stop()
    assert "petstore_" not in server.output(), "a key is active: nothing created again"


def test_development_serve_creates_no_key_with_no_dev_key(tmp_path: Path) -> None:
    server = LiveServer(tmp_path)
    server.start("--no-dev-key")
    server.stop()
    assert "petstore_" not in server.output()


def test_production_serve_refuses_the_default_cursor_secret(tmp_path: Path) -> None:
    server = LiveServer(tmp_path, env={"PETSTORE_ENVIRONMENT": "production"})
    result = server.refused()
    assert result.returncode == 2
    assert "PETSTORE_CURSOR_SECRET" in result.stderr


def test_created_pet_is_durable_across_a_restart(tmp_path: Path) -> None:
    server = LiveServer(tmp_path)
    server.start()
    auth = {"Authorization": f"Bearer {server.dev_key}"}
    created = httpx2.post(
        f"{server.url}/v1/pets", json={"name": "Rex", "categoryId": 1}, headers=auth
    ).json()
    workers = child_pids(server.process.pid)  # type: ignore[union-attr]
    server.process.kill()  # type: ignore[union-attr]  # no clean shutdown
    server.process.wait()  # type: ignore[union-attr]
    # The orphaned workers end on their own, not at once; until then one can still
    # answer the new server's readiness probe on the port it holds.
    assert wait_gone(workers, seconds=15) == [], "workers outlived their killed server"
    server.start()
    fetched = httpx2.get(f"{server.url}/v1/pets", headers=auth)
    assert fetched.json() == [created]
    server.stop()


@contextmanager
def _served(
    backend: str, root: Path, *args: str, env: dict[str, str] | None = None
) -> Iterator[LiveServer]:
    """A real server on ``backend``: its own SQLite file, or a fresh PostgreSQL database."""
    root.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        env = dict(env or {})
        if backend == "postgres":
            url = stack.enter_context(postgres_database())
            migrate.upgrade(url)
            env["PETSTORE_DATABASE_URL"] = url
        server = LiveServer(root, env=env)
        server.start(*args)
        stack.callback(server.stop)
        yield server


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_two_workers_keep_every_create(backend: str, tmp_path: Path) -> None:
    """``serve --workers 2``: concurrent creates from both processes all land, once."""
    with _served(backend, tmp_path, "--workers", "2") as server:
        assert "worker-2" in server.output()
        created = create_concurrently([server.url], server.dev_key, batches=8)
        listed = [pet["id"] for pet in all_pets(server.url, server.dev_key)]
    assert len(set(created)) == 400
    assert listed == sorted(created)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_schemathesis_finds_no_failure(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """All checks, positive and negative data, every phase; bounded to a few minutes,
    each phase's line shown as it ends."""
    # The fuzzer sends thousands of requests a minute with one key, and many without
    # a valid one: lift both limits.
    limit = {
        "PETSTORE_RATE_LIMIT": "1000000/minute",
        "PETSTORE_AUTH_FAILURE_LIMIT": "1000000/minute",
    }
    with _served(backend, tmp_path / "server", env=limit) as live_server:
        output = _run_schemathesis(live_server, tmp_path, backend=backend, capsys=capsys)
    assert "No issues found" in output, output[-6000:]
    assert "Stateful" in output


def _run_schemathesis(
    live_server: LiveServer, tmp_path: Path, *, backend: str, capsys: pytest.CaptureFixture[str]
) -> str:
    """``schemathesis run`` as docs/contributing.md tells a user to, with the repository's
    ``schemathesis.toml`` (every check, every phase), bounded in time here: its
    output, the lines that end a phase echoed to the terminal as they come."""
    env = {**os.environ, "PETSTORE_API_KEY": live_server.dev_key, "NO_COLOR": "1"}
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        "run",
        f"{live_server.url}/v1/openapi.json",
        *("--max-examples", "300", "--max-time", "85", "--workers", "2"),
        *("--suppress-health-check", "too_slow", "--report-dir", str(tmp_path)),
    ]
    lines = []
    with subprocess.Popen(
        command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        assert process.stdout is not None
        try:
            for line in process.stdout:
                lines.append(line)
                if re.match(r"\s*\S+\s+(Examples|Coverage|Fuzzing|Stateful) \(in ", line) or (
                    "===" in line and ("issues" in line or "passed" in line or "warning" in line)
                ):
                    with capsys.disabled():
                        print(f"\n  schemathesis [{backend}]: {line.strip()}", end="", flush=True)
            process.wait(timeout=400)
        except BaseException:  # interrupted, or too slow: do not wait for the run's end
            process.kill()
            raise
    return "".join(lines)


def test_the_serving_processes_never_load_the_migration_code(live_server: LiveServer) -> None:
    """Migrations run in a child process, and /readyz knows the revisions without
    Alembic, so neither granian's main process nor its worker maps SQLAlchemy's
    compiled modules (21 MiB of Alembic and SQLAlchemy each, docs/performance.md)."""
    import sqlalchemy

    compiled = list(Path(sqlalchemy.__file__).parent.rglob("*.so"))
    if not compiled:
        pytest.skip("this SQLAlchemy has no compiled modules to look for")
    assert httpx2.get(f"{live_server.url}/readyz").status_code == 200
    assert live_server.process is not None
    pids = [live_server.process.pid, *child_pids(live_server.process.pid)]
    assert len(pids) == 2  # granian's main process and its one worker
    for pid in pids:
        maps = "\n".join(region.path for region in psutil.Process(pid).memory_maps())
        assert "/site-packages/" in maps  # the check can see a loaded extension
        assert "/sqlalchemy/" not in maps, f"process {pid} loaded SQLAlchemy"


def test_the_worker_app_keeps_its_long_lived_objects_out_of_collections(tmp_path: Path) -> None:
    """The app a worker serves is built with everything alive then (the modules above
    all) frozen out of the garbage collector's generations, so that no collection
    walks them while requests wait (docs/performance.md). In a child interpreter, as
    in a worker."""
    script = (
        "import gc\n"
        "from petstore.server.app import app_from_environment\n"
        "app_from_environment()\n"
        "print(gc.get_freeze_count(), len(gc.get_objects()))\n"
    )
    env = {
        **os.environ,
        "PETSTORE_DATABASE_URL": f"sqlite:///{tmp_path / 'petstore.db'}",
    }
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    frozen, collectable = map(int, result.stdout.split())
    assert frozen > 20_000
    assert collectable < frozen // 100


def test_the_worker_collects_its_youngest_objects_every_gc_threshold_allocations(
    tmp_path: Path,
) -> None:
    """The worker's app factory leaves the youngest generation of objects uncollected
    for ``GC_THRESHOLD`` allocations, not Python's 700 (docs/performance.md). In a
    child interpreter, as in a worker."""
    script = (
        "import gc\n"
        "from petstore.cli.worker import GC_THRESHOLD, app\n"
        "app()\n"
        "print(gc.get_threshold()[0], GC_THRESHOLD)\n"
    )
    env = {**os.environ, "PETSTORE_DATABASE_URL": f"sqlite:///{tmp_path / 'petstore.db'}"}
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    threshold, expected = map(int, result.stdout.split())
    assert threshold == expected > 700


@pytest.mark.parametrize("setting", [None, "asyncio"])
def test_each_worker_runs_the_event_loop_the_settings_name(
    tmp_path: Path, setting: str | None
) -> None:
    """uvloop unless ``PETSTORE_EVENT_LOOP`` says asyncio (docs/performance.md), as each
    worker logs when it starts."""
    server = LiveServer(tmp_path, env={} if setting is None else {"PETSTORE_EVENT_LOOP": setting})
    server.start()
    server.stop()
    (worker_line,) = re.findall(r"worker \d+ serves on the \w+ event loop", server.output())
    assert worker_line.endswith(f" {setting or 'uvloop'} event loop")


def test_serve_refuses_uvloop_where_it_is_not_installed(tmp_path: Path) -> None:
    """Where uvloop cannot be imported (Windows), ``serve`` names the setting that
    turns it off instead of starting workers that cannot run."""
    hidden = "import sys; sys.modules['uvloop'] = None; from petstore.cli.main import main; main()"
    server = LiveServer(tmp_path)
    result = subprocess.run(
        [sys.executable, "-c", hidden, "serve"],
        env=server.env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "PETSTORE_EVENT_LOOP=asyncio" in result.stderr


def exchange(server: LiveServer, head: str) -> tuple[int, dict[str, object]]:
    """Send the request ``head`` (lines joined by CRLF, no body) byte for byte to
    ``server`` and read its answer whole; its status and JSON body."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as conn:
        conn.sendall(head.replace("\n", "\r\n").encode() + b"\r\n")
        answer = b"".join(iter(lambda: conn.recv(65536), b""))
    status_line, _, rest = answer.partition(b"\r\n")
    body: dict[str, object] = json.loads(rest.partition(b"\r\n\r\n")[2])
    return int(status_line.split()[1]), body


@pytest.mark.parametrize(
    ("head", "named"),
    [
        ("GET /v1/pets HTTP/1.1\nAuthorization: Bearer {key}\nConnection: close\n", "Host"),
        ("GET /healthz HTTP/1.1\nConnection: close\n", "Host"),
        ("GET /v1/pets HTTP/1.1\nHost: a\nHost: b\nAuthorization: Bearer {key}\n"
         "Connection: close\n", "Host"),
        ("GET /v1/pets HTTP/1.1\nHost: a\nAuthorization: Bearer {key}\n"
         "Authorization: Bearer nope\nConnection: close\n", "Authorization"),
        ("GET /v1/pets HTTP/1.1\nHost: a\nAuthorization: Bearer nope\n"
         "Authorization: Bearer {key}\nConnection: close\n", "Authorization"),
    ],
)  # fmt: skip
def test_a_request_without_host_or_with_two_hosts_or_keys_is_400(
    live_server: LiveServer, head: str, named: str
) -> None:
    """Issue 53 (N9): these were 200 (the first Authorization won). RFC 9112, section
    3.2: a request without Host, or with two, is answered 400."""
    status, body = exchange(live_server, head.format(key=live_server.dev_key))
    assert status == 400
    assert body["code"] == "invalid_request"
    assert str(body["message"]).startswith(f"{named}: ")


def test_an_http_1_0_request_may_leave_out_host(live_server: LiveServer) -> None:
    head = f"GET /v1/pets HTTP/1.0\nAuthorization: Bearer {live_server.dev_key}\n"
    status, _ = exchange(live_server, head)
    assert status == 200
