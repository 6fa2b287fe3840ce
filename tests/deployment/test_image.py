"""The OCI image (issue: the operator's kit): ``make image`` builds it, it serves as a
non-root user on a read-only root file system, drains and exits 0 on ``podman stop``,
is at most 200 MB, and two builds of the same tree are the same image.

``make test-prerequisites`` builds it (the first build needs the network); here the
build only checks that the image is current, or rebuilds it from the cache in
``.tools/image`` when the sources changed, and fails naming the step (and the need
for the network) otherwise. Podman runs with deploy/image's settings and the host's
network, which under CI is loopback only.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from release.image import lock, sources
from release.image.shell import ROOT, BuildError, container_env
from testbed.processes import free_port

pytestmark = pytest.mark.slow

DRAIN_SECONDS = 2


def podman(
    *args: str, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run podman with the image's settings (deploy/image/containers.conf)."""
    result = subprocess.run(
        ["podman", *args],
        capture_output=True,
        text=True,
        env=container_env(),
        timeout=timeout,
        check=False,
    )
    if check:
        assert result.returncode == 0, f"podman {' '.join(args)}:\n{result.stdout}{result.stderr}"
    return result


@pytest.fixture(scope="module")
def image() -> str:
    """The image of this tree, built when missing or stale."""
    result = subprocess.run(
        [sys.executable, "-m", "release.image"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return sources.image_name()


class Container:
    """A detached container of the image, its data on a named volume."""

    def __init__(self, image: str) -> None:
        self.name = f"petstore-test-{uuid.uuid4().hex[:8]}"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        podman(
            "run",
            "--detach",
            f"--name={self.name}",
            "--network=host",
            "--read-only",
            f"--volume={self.name}:/var/lib/petstore",
            f"--env=PETSTORE_PORT={self.port}",
            # The image listens on 0.0.0.0, where development must be chosen.
            "--env=PETSTORE_ENVIRONMENT=development",
            f"--env=PETSTORE_SHUTDOWN_DRAIN_SECONDS={DRAIN_SECONDS}",
            "--env=PETSTORE_SHUTDOWN_TIMEOUT_SECONDS=10",
            "--stop-timeout=15",
            image,
        )

    def healthy(self) -> bool:
        try:
            return httpx2.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx2.TransportError:
            return False

    def exec(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return podman("exec", self.name, *argv, check=check)

    def logs(self) -> str:
        result = podman("logs", self.name, check=False)
        return result.stdout + result.stderr

    def remove(self) -> None:
        podman("rm", "--force", "--volumes", self.name, check=False)
        podman("volume", "rm", "--force", self.name, check=False)


@pytest.fixture
def container(image: str) -> Iterator[Container]:
    """A started container, removed with its volume afterwards."""
    started = Container(image)
    try:
        deadline = time.monotonic() + 60
        while not started.healthy():
            assert time.monotonic() < deadline, f"the container did not start:\n{started.logs()}"
            time.sleep(0.2)
        yield started
    finally:
        started.remove()


def test_the_container_serves_as_a_non_root_user_and_drains_on_stop(container: Container) -> None:
    assert container.exec("id", "-u").stdout.strip() != "0"
    assert container.exec("cat", "/proc/1/cmdline").stdout.split("\0")[1:3] == [
        "/opt/petstore/bin/petstore",
        "serve",
    ]
    created_key = container.exec("petstore", "keys", "create", "--name", "image-test")
    key = created_key.stdout.strip().splitlines()[-1]
    auth = {"Authorization": f"Bearer {key}"}
    created = httpx2.post(
        f"{container.url}/v1/pets", json={"name": "Rex", "categoryId": 1}, headers=auth, timeout=10
    )
    assert created.status_code == 201, created.text
    listed = httpx2.get(f"{container.url}/v1/pets", headers=auth, timeout=10)
    assert listed.status_code == 200
    assert created.json() in listed.json()

    sent = time.monotonic()
    podman("stop", container.name, timeout=30)
    stopped = time.monotonic() - sent
    state = json.loads(podman("inspect", "--format", "{{json .State}}", container.name).stdout)
    assert state["ExitCode"] == 0, container.logs()
    assert DRAIN_SECONDS <= stopped < DRAIN_SECONDS + 5, container.logs()
    assert f"SIGTERM: draining for {DRAIN_SECONDS} s" in container.logs()


def test_the_root_file_system_is_read_only_and_the_data_volume_is_not(container: Container) -> None:
    refused = container.exec("touch", "/opt/petstore/written", check=False)
    assert refused.returncode != 0
    assert "Read-only file system" in refused.stderr
    assert "petstore.db" in container.exec("ls", "/var/lib/petstore").stdout.split()


def test_the_image_is_at_most_200_mb_and_carries_the_oci_labels(image: str) -> None:
    (inspected,) = json.loads(podman("image", "inspect", image).stdout)
    assert inspected["Size"] <= 200 * 1000 * 1000
    labels = inspected["Config"]["Labels"]
    assert labels["org.opencontainers.image.version"] == sources.version()
    assert labels["org.opencontainers.image.title"] == "petstore"
    assert labels["org.opencontainers.image.licenses"] == "MIT"
    assert labels["org.opencontainers.image.revision"].startswith(sources.revision()[:40])
    assert labels["org.opencontainers.image.created"].endswith("Z")
    config = inspected["Config"]
    assert config["User"] == "10001:10001"
    assert "PETSTORE_HOST=0.0.0.0" in config["Env"]


def test_two_builds_of_the_same_tree_are_the_same_image(image: str) -> None:
    again = "localhost/petstore:reproducibility-check"
    rebuilt = subprocess.run(
        [sys.executable, "-m", "release.image", "--force", f"--tag={again}"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    try:
        assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
        digests = podman("image", "inspect", "--format", "{{.Id}} {{.Digest}}", image, again)
        first, second = digests.stdout.splitlines()
        assert first == second
    finally:
        podman("rmi", again, check=False)  # the tag only: the image is the other's


def test_a_lock_out_of_date_with_pyproject_fails_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python -m release.image lock --check`` (make lint): the locks of a copy of the
    tree pass, then fail once its pyproject.toml no longer asks for one they pin."""
    image = "deploy/image"
    for name in ("pyproject.toml", *(f"{image}/{path.name}" for path in lock.LOCKS)):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    shutil.copy2(ROOT / image / "build-requirements.in", tmp_path / image)
    copies = {tmp_path / path.relative_to(ROOT): src for path, src in lock.LOCKS.items()}
    monkeypatch.setattr(lock, "ROOT", tmp_path)
    monkeypatch.setattr(lock, "LOCKS", copies)
    monkeypatch.setattr(lock, "REQUIREMENTS", tmp_path / image / "requirements.txt")
    lock.check_locks()

    pyproject = tmp_path / "pyproject.toml"
    # A dependency dropped: the check needs nothing beyond uv's cache (no network).
    pyproject.write_text(pyproject.read_text().replace('"wcwidth>=0.2.13",\n', "", 1))
    with pytest.raises(BuildError, match=r"requirements\.txt is out of date with pyproject\.toml"):
        lock.check_locks()
