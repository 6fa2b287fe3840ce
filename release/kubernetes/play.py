"""The ``local`` overlay of deploy/kubernetes run under ``podman kube play``: it serves,
drains on the stop and leaves nothing behind."""

from __future__ import annotations

import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import yaml

from release.image.shell import container_env
from release.kubernetes.manifests import CheckError, run

#: How long the pod has to answer /readyz 200 after ``podman kube play``.
START_SECONDS = 60


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def playable(rendered: Path, *, name: str, port: int, metrics_port: int) -> str:
    """The ``local`` overlay as ``podman kube play`` takes it: its ConfigMap and
    Deployment, named ``name``, on the host's network and free loopback ports (podman
    maps no ports on the host's network, so the probes name the port by number)."""
    documents = [doc for doc in yaml.safe_load_all(rendered.read_text()) if doc]
    kept: list[dict[str, Any]] = []
    for doc in documents:
        if doc["kind"] == "Deployment":
            doc["metadata"]["name"] = name
            pod = doc["spec"]["template"]["spec"]
            pod["hostNetwork"] = True
            for volume in pod["volumes"]:
                # podman makes a named volume of each emptyDir: names of their own.
                volume["name"] = f"{name}-{volume['name']}"
            (container,) = pod["containers"]
            for mount in container["volumeMounts"]:
                mount["name"] = f"{name}-{mount['name']}"
            container.pop("ports")
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                container[probe]["httpGet"]["port"] = port
            kept.append(doc)
        elif doc["kind"] == "ConfigMap":
            # In the ConfigMap: podman 4.3 lets envFrom win over a container's env.
            doc["data"]["PETSTORE_HOST"] = "127.0.0.1"
            doc["data"]["PETSTORE_PORT"] = str(port)
            doc["data"]["PETSTORE_METRICS_PORT"] = str(metrics_port)
            kept.append(doc)
    return yaml.safe_dump_all(kept)


class Play:
    """The ``local`` overlay under ``podman kube play``: ``up``, then ``down`` (which
    ``remove`` repeats when anything failed, so nothing is left)."""

    def __init__(self, rendered: Path, work: Path) -> None:
        self.name = f"petstore-check-{uuid.uuid4().hex[:8]}"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.file = work / "play.yaml"
        self.file.write_text(
            playable(rendered, name=self.name, port=self.port, metrics_port=free_port())
        )
        self.pod = self.container = ""
        (deployment,) = (
            doc
            for doc in yaml.safe_load_all(rendered.read_text())
            if doc and doc["kind"] == "Deployment"
        )
        #: What the kubelet waits after the SIGTERM before it kills.
        self.grace = int(deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"])

    def up(self) -> None:
        """``podman kube play`` of the overlay, then wait for ``/readyz`` 200. Raises
        CheckError when podman fails or the pod is not ready in START_SECONDS."""
        out = run(["podman", "kube", "play", str(self.file)], what="podman kube play")
        # "Pod:\n<id>\nContainer:\n<id>\n": the pod and the service's container.
        lines = out.split()
        self.pod = lines[lines.index("Pod:") + 1]
        self.container = lines[lines.index("Container:") + 1]
        deadline = time.monotonic() + START_SECONDS
        while not self._ready():
            if time.monotonic() > deadline:
                raise CheckError(f"/readyz not 200 within {START_SECONDS} s:\n{self.logs()}")
            time.sleep(0.5)

    def _ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def exec(self, *argv: str) -> str:
        """``argv`` run in the service's container; its stdout. Raises CheckError."""
        return run(["podman", "exec", self.container, *argv], what=" ".join(argv))

    def logs(self, *, since: str = "0") -> str:
        """What the service wrote on stdout and stderr since the Unix time ``since``."""
        result = subprocess.run(  # noqa: S603 - our own argv
            ["podman", "logs", f"--since={since}", self.container],  # noqa: S607
            capture_output=True,
            text=True,
            env=container_env(),
            check=False,
        )
        return result.stdout + result.stderr

    def down(self) -> tuple[float, str, int]:
        """The kubelet's stop, then ``podman kube down``: the stop's duration, what the
        service logged meanwhile and the container's exit code. podman 4.3's ``kube
        down`` kills at once (exit 137 in 0.5 s, measured), so ``podman pod stop``
        sends the SIGTERM and waits, as the kubelet does, and ``kube down`` removes
        the stopped pod and its volumes."""
        since = str(int(time.time()))
        started = time.monotonic()
        stop = ["podman", "pod", "stop", f"--time={self.grace}", self.pod]
        run(stop, what="podman pod stop", timeout=self.grace + 30)
        took = time.monotonic() - started
        logged = self.logs(since=since)
        state = run(
            ["podman", "inspect", "--format", "{{.State.ExitCode}}", self.container],
            what="podman inspect",
        )
        run(["podman", "kube", "down", str(self.file)], what="podman kube down", timeout=60)
        return took, logged, int(state)

    def remove(self) -> None:
        """Whatever is left of the pod: its containers and its volumes."""
        for argv in (
            ["podman", "kube", "down", str(self.file)],
            ["podman", "pod", "rm", "--force", "--ignore", f"{self.name}-pod-0"],
        ):
            subprocess.run(argv, capture_output=True, env=container_env(), check=False)  # noqa: S603
        for volume in ("data", "tmp"):
            subprocess.run(  # noqa: S603
                ["podman", "volume", "rm", "--force", f"{self.name}-{volume}"],  # noqa: S607
                capture_output=True,
                env=container_env(),
                check=False,
            )

    def leftovers(self) -> list[str]:
        """The pods, containers and volumes of this play that still exist."""
        listings = {
            "pod": ["podman", "pod", "ps", "--format={{.Name}}"],
            "container": ["podman", "ps", "--all", "--format={{.Names}}"],
            "volume": ["podman", "volume", "ls", "--format={{.Name}}"],
        }
        left = []
        for kind, argv in listings.items():
            names = run(argv, what=" ".join(argv[:3])).split()
            left += [f"{kind} {name}" for name in names if name.startswith(self.name)]
        return left


def serve(rendered: Path, work: Path) -> None:
    """The ``local`` overlay under ``podman kube play``: it serves a createPet 201 and a
    getPet of it with a key made in the pod, as uid 10001 on a read-only root, then
    drains on ``podman kube down`` and exits 0; nothing of it is left."""
    play = Play(rendered, work)
    try:
        play.up()
        uid = play.exec("id", "-u").strip()
        if uid != "10001":
            raise CheckError(f"the service runs as uid {uid}, not 10001")
        key = play.exec("petstore", "keys", "create", "--name", "kubernetes-check")
        auth = {"Authorization": f"Bearer {key.strip().splitlines()[-1]}"}
        pet = {"name": "Rex", "categoryId": 1}
        created = httpx.post(f"{play.url}/v1/pets", json=pet, headers=auth, timeout=10)
        if created.status_code != 201:
            raise CheckError(f"createPet answered {created.status_code}: {created.text}")
        url = f"{play.url}/v1/pets/{created.json()['id']}"
        got = httpx.get(url, headers=auth, timeout=10)
        if got.status_code != 200 or got.json() != created.json():
            raise CheckError(f"getPet answered {got.status_code}: {got.text}")
        took, logged, code = play.down()
        if "SIGTERM: draining for" not in logged or code != 0:
            raise CheckError(f"stop: exit code {code} after {took:.1f} s, logged:\n{logged}")
        print(f"kubernetes: local: 201, 200; stopped, drained, exit 0 in {took:.1f} s")
    finally:
        play.remove()
        left = play.leftovers()
    if left:
        raise CheckError(f"left after podman kube down: {', '.join(left)}")
