"""Many instances as one service: two real ``petstore serve`` processes on different
ports share one PostgreSQL database (issue: scale out)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from petstore.server.store import migrate
from tests.conftest import LiveServer, all_pets, create_concurrently, postgres_database

SECRET = "scale-out-test-cursor-secret-0123456789abcdef"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, LiveServer, str]]:
    """Two instances on one fresh PostgreSQL database, and a key both accept."""
    with postgres_database() as url:
        migrate.upgrade(url)
        env = {"PETSTORE_DATABASE_URL": url, "PETSTORE_CURSOR_SECRET": SECRET}
        servers = []
        for name in ("a", "b"):
            server = LiveServer(tmp_path_factory.mktemp(name), env=env)
            server.start()
            servers.append(server)
        key = _cli(servers[0], "keys", "create", "--name", "scale-out").stdout.splitlines()[-1]
        try:
            yield servers[0], servers[1], key
        finally:
            for server in servers:
                server.stop()


def _cli(server: LiveServer, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "petstore", *args],
        env=server.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result


def _all_ids(server: LiveServer, key: str) -> list[int]:
    return [pet["id"] for pet in all_pets(server.url, key)]


def test_a_thousand_creates_over_both_instances_are_one_store(
    pair: tuple[LiveServer, LiveServer, str],
) -> None:
    a, b, key = pair
    before = set(_all_ids(a, key))
    created = create_concurrently([a.url, b.url], key, batches=20)
    assert len(set(created)) == 1000
    for server in (a, b):
        listed = _all_ids(server, key)
        assert listed == sorted(listed)
        assert set(listed) - before == set(created)


def test_a_cursor_from_one_instance_is_followed_on_the_other(
    pair: tuple[LiveServer, LiveServer, str],
) -> None:
    a, b, key = pair
    headers = {"Authorization": f"Bearer {key}"}
    for i in range(3):
        httpx2.post(f"{a.url}/v1/pets", json={"name": f"c{i}", "categoryId": 1}, headers=headers)
    first = httpx2.get(f"{a.url}/v1/pets?limit=1", headers=headers)
    next_url = first.headers["link"].split(">")[0][1:].replace(a.url, b.url)
    second = httpx2.get(next_url, headers=headers)
    assert second.status_code == 200
    assert second.json()[0]["id"] > first.json()[0]["id"]


def test_a_pet_created_on_one_is_read_on_the_other_at_once(
    pair: tuple[LiveServer, LiveServer, str],
) -> None:
    a, b, key = pair
    headers = {"Authorization": f"Bearer {key}"}
    for i in range(20):
        pet = httpx2.post(
            f"{a.url}/v1/pets", json={"name": f"fresh{i}", "categoryId": 7}, headers=headers
        ).json()
        assert httpx2.get(f"{b.url}/v1/pets/{pet['id']}", headers=headers).json() == pet


def test_a_key_revoked_with_the_cli_is_refused_by_both_within_5_seconds(
    pair: tuple[LiveServer, LiveServer, str],
) -> None:
    a, b, _ = pair
    key = _cli(a, "keys", "create", "--name", "to-revoke").stdout.splitlines()[-1]
    headers = {"Authorization": f"Bearer {key}"}
    for server in (a, b):  # warm both caches
        assert httpx2.get(f"{server.url}/v1/pets", headers=headers).status_code == 200
    listing = _cli(a, "keys", "list", "--json").stdout
    key_id = next(line for line in listing.splitlines() if '"to-revoke"' in line)
    key_id = key_id.split('"id": ')[1].split(",")[0]
    _cli(a, "keys", "revoke", key_id)
    revoked_at = time.monotonic()
    refused: dict[str, float] = {}
    while len(refused) < 2 and time.monotonic() - revoked_at < 6:
        for server in (a, b):
            if server.url not in refused:
                status = httpx2.get(f"{server.url}/v1/pets", headers=headers).status_code
                if status == 401:
                    refused[server.url] = time.monotonic() - revoked_at
        time.sleep(0.05)
    assert len(refused) == 2, refused
    assert max(refused.values()) <= 5


def test_serve_refuses_an_out_of_date_postgres_schema(tmp_path: Path) -> None:
    with postgres_database() as url:
        server = LiveServer(tmp_path, env={"PETSTORE_DATABASE_URL": url})
        result = server.refused()
    assert result.returncode == 1
    assert "petstore db upgrade" in result.stderr
