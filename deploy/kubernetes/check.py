"""``make kubernetes-check``: the manifests as an operator applies them, checked offline
and the ``local`` overlay run.

    python -m deploy.kubernetes.check        # render, validate, scan, pin, run
    python -m deploy.kubernetes.check pin    # write the image's digest into the overlays

1. ``kubectl kustomize`` renders every overlay;
2. ``kubernetes-validate --strict`` validates every object against the schemas of each
   Kubernetes version of :data:`KUBERNETES_VERSIONS` (they ship inside the package);
3. the probes ask ``/healthz`` (liveness, startup) and ``/readyz`` (readiness), and
   the grace period is longer than ``PETSTORE_SHUTDOWN_TIMEOUT_SECONDS``;
4. ``checkov --framework kubernetes`` finds no failed check (a skipped one carries
   its reason in a ``checkov.io/skipN`` annotation);
5. production and staging pin the digest of the image ``make image`` built from this
   tree (``pin`` writes it; the digest stays when a commit leaves the image's sources
   alone, deploy/image/build.py);
6. ``podman kube play`` runs the ``local`` overlay with the image: ``/readyz`` 200, an
   API key made in the pod, a createPet 201 and a getPet of it; the stop (SIGTERM)
   drains and the container exits 0; ``podman kube down`` removes the pod. The pod,
   its containers and its volumes are removed whatever happens.

The checkers come from ``.tools/k8s-venv`` (``make test-prerequisites``), kubectl from
the machine; nothing needs the network. Under ``podman kube play`` the pod shares
the host's network (CI has only loopback) on free loopback ports, under names of
its own: what :func:`playable` changes in the rendered ``local`` overlay, and
nothing else.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from deploy.image import build
from testbed.processes import free_port

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TOOLS = ROOT / ".tools" / "k8s-venv" / "bin"
OVERLAYS = ("production", "staging", "local")
#: The overlays that run the image by its digest.
PINNED = ("production", "staging")
#: The Kubernetes versions every object is validated against, strictly: the minor
#: releases kubernetes-validate 1.37 ships schemas for that are newer than 1.31.
KUBERNETES_VERSIONS = ("1.32.0", "1.33.0", "1.34.0", "1.35.0", "1.36.0", "1.37.0")
DIGEST = re.compile(r"(digest: )(sha256:[0-9a-f]{64})")
#: How long the pod has to answer /readyz 200 after ``podman kube play``.
START_SECONDS = 60


class CheckError(RuntimeError):
    """A step failed; the message says which and why."""


def _run(argv: Sequence[str], *, what: str, timeout: float = 300) -> str:
    """Run ``argv`` with podman's settings from deploy/image; its stdout."""
    result = subprocess.run(  # noqa: S603 - our own argv
        list(argv),
        capture_output=True,
        text=True,
        env=build.container_env(),
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise CheckError(f"{what} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    return result.stdout


def _tool(name: str) -> str:
    path = TOOLS / name
    if not path.exists():
        raise CheckError(f"{path} is missing: run `make test-prerequisites`")
    return str(path)


def render(out: Path) -> dict[str, Path]:
    """Every overlay rendered by ``kubectl kustomize`` into ``out``; the files by overlay."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise CheckError("kubectl not found: it renders the overlays (kubectl kustomize)")
    files = {}
    for overlay in OVERLAYS:
        text = _run([kubectl, "kustomize", str(HERE / "overlays" / overlay)], what=overlay)
        files[overlay] = out / f"{overlay}.yaml"
        files[overlay].write_text(text)
    return files


def validate(files: Sequence[Path]) -> None:
    """Every object of ``files`` valid, strictly, for every Kubernetes version."""
    for version in KUBERNETES_VERSIONS:
        argv = [_tool("kubernetes-validate"), "--strict", "--quiet", "-k", version]
        _run([*argv, *map(str, files)], what=f"kubernetes-validate for Kubernetes {version}")


def scan(directory: Path) -> None:
    """No failed checkov check in the rendered overlays; offline (no download, no upload)."""
    argv = [_tool("checkov"), "--framework", "kubernetes", "--directory", str(directory)]
    argv += ["--compact", "--quiet", "--skip-download", "--skip-results-upload"]
    _run(argv, what="checkov")


def check_stop_and_probes(files: dict[str, Path]) -> None:
    """In every overlay the probes mean what D25 and the drain mean: liveness and
    startup on ``/healthz`` (the process, never the database), readiness on
    ``/readyz``; and the grace period outlasts PETSTORE_SHUTDOWN_TIMEOUT_SECONDS, so
    the kubelet never kills a drain."""
    for overlay, path in files.items():
        documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
        (settings,) = (doc["data"] for doc in documents if doc["kind"] == "ConfigMap")
        (deployment,) = (doc for doc in documents if doc["kind"] == "Deployment")
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        paths = {
            probe: container[probe]["httpGet"]["path"]
            for probe in ("startupProbe", "livenessProbe", "readinessProbe")
        }
        wanted = {"startupProbe": "/healthz", "livenessProbe": "/healthz"}
        if paths != {**wanted, "readinessProbe": "/readyz"}:
            raise CheckError(f"overlays/{overlay}: the probes ask {paths}")
        timeout = int(settings["PETSTORE_SHUTDOWN_TIMEOUT_SECONDS"])
        if pod["terminationGracePeriodSeconds"] <= timeout:
            raise CheckError(
                f"overlays/{overlay}: terminationGracePeriodSeconds "
                f"{pod['terminationGracePeriodSeconds']} is not longer than the "
                f"shutdown timeout ({timeout} s)"
            )


def image_digest() -> str:
    """The digest of the local image ``make image`` built (``localhost/petstore:<version>``)."""
    argv = ["podman", "image", "inspect", "--format", "{{.Digest}}", build.image_name()]
    return _run(argv, what=f"podman image inspect {build.image_name()} (run `make image`)").strip()


def pinned(overlay: str) -> str:
    """The digest the overlay's kustomization pins."""
    match = DIGEST.search((HERE / "overlays" / overlay / "kustomization.yaml").read_text())
    if match is None:
        raise CheckError(f"overlays/{overlay} pins no image digest")
    return match.group(2)


def check_pins() -> None:
    """Production and staging pin the image this tree builds."""
    digest = image_digest()
    for overlay in PINNED:
        if pinned(overlay) != digest:
            raise CheckError(
                f"overlays/{overlay} pins {pinned(overlay)}, but the image of this tree "
                f"({build.image_name()}) is {digest}: run `make kubernetes-pin` and commit"
            )


def pin() -> None:
    """Write the local image's digest into every pinned overlay."""
    digest = image_digest()
    for overlay in PINNED:
        path = HERE / "overlays" / overlay / "kustomization.yaml"
        path.write_text(DIGEST.sub(rf"\g<1>{digest}", path.read_text()))
        print(f"kubernetes: overlays/{overlay} pins {build.image_name()}@{digest}")


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
        out = _run(["podman", "kube", "play", str(self.file)], what="podman kube play")
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
        return _run(["podman", "exec", self.container, *argv], what=" ".join(argv))

    def logs(self, *, since: str = "0") -> str:
        """What the service wrote on stdout and stderr since the Unix time ``since``."""
        result = subprocess.run(  # noqa: S603 - our own argv
            ["podman", "logs", f"--since={since}", self.container],  # noqa: S607
            capture_output=True,
            text=True,
            env=build.container_env(),
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
        _run(stop, what="podman pod stop", timeout=self.grace + 30)
        took = time.monotonic() - started
        logged = self.logs(since=since)
        state = _run(
            ["podman", "inspect", "--format", "{{.State.ExitCode}}", self.container],
            what="podman inspect",
        )
        _run(["podman", "kube", "down", str(self.file)], what="podman kube down", timeout=60)
        return took, logged, int(state)

    def remove(self) -> None:
        """Whatever is left of the pod: its containers and its volumes."""
        for argv in (
            ["podman", "kube", "down", str(self.file)],
            ["podman", "pod", "rm", "--force", "--ignore", f"{self.name}-pod-0"],
        ):
            subprocess.run(argv, capture_output=True, env=build.container_env(), check=False)  # noqa: S603
        for volume in ("data", "tmp"):
            subprocess.run(  # noqa: S603
                ["podman", "volume", "rm", "--force", f"{self.name}-{volume}"],  # noqa: S607
                capture_output=True,
                env=build.container_env(),
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
            names = _run(argv, what=" ".join(argv[:3])).split()
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


@contextmanager
def step(what: str) -> Iterator[None]:
    """Print ``what`` with the seconds it took, once done."""
    started = time.monotonic()
    yield
    print(f"kubernetes: {what} ({time.monotonic() - started:.1f} s)", flush=True)


def check() -> None:
    """Every step of the module docstring."""
    with tempfile.TemporaryDirectory(prefix="petstore-kubernetes-") as tmp:
        work = Path(tmp)
        rendered = work / "rendered"
        rendered.mkdir()
        with step(f"{', '.join(OVERLAYS)} rendered"):
            files = render(rendered)
        with step(f"valid for Kubernetes {', '.join(KUBERNETES_VERSIONS)} (strict)"):
            validate(list(files.values()))
        with step("probes on /healthz and /readyz, grace period longer than the stop"):
            check_stop_and_probes(files)
        with step("checkov: no failed check"):
            scan(rendered)
        with step(f"{' and '.join(PINNED)} pin the digest of {build.image_name()}"):
            # A warning, not a failure: any commit to the image's sources, and Debian's
            # updates to the base, change the digest until `make kubernetes-pin` runs.
            try:
                check_pins()
            except CheckError as stale:
                print(f"kubernetes: warning: {stale}", flush=True)
        with step("local under podman kube play"):
            serve(files["local"], work)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (module docstring); 1 naming the step that failed."""
    parser = argparse.ArgumentParser(prog="python -m deploy.kubernetes.check", description=__doc__)
    parser.add_argument("command", nargs="?", choices=["check", "pin"], default="check")
    args = parser.parse_args(argv)
    try:
        if args.command == "pin":
            pin()
        else:
            check()
    except CheckError as exc:
        print(f"kubernetes: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
