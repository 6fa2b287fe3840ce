"""The manifests of deploy/kubernetes: every overlay rendered, validated and scanned,
the probes and the grace period checked, TLS to the database and Redis verified, and
the digest production and staging pin compared with (or set to) the image's."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from release.image.shell import ROOT, container_env
from release.image.sources import image_name

HERE = ROOT / "deploy" / "kubernetes"
TOOLS = ROOT / ".tools" / "k8s-venv" / "bin"
OVERLAYS = ("production", "staging", "local")
#: The overlays that run the image by its digest.
PINNED = ("production", "staging")
#: The overlays whose pods reach PostgreSQL and Redis on other hosts: over TLS, each
#: server verified against the deployment's CA (components/tls).
VERIFIED = ("production", "staging")
#: The Kubernetes versions every object is validated against, strictly: the minor
#: releases kubernetes-validate 1.37 ships schemas for that are newer than 1.31.
KUBERNETES_VERSIONS = ("1.32.0", "1.33.0", "1.34.0", "1.35.0", "1.36.0", "1.37.0")
DIGEST = re.compile(r"(digest: )(sha256:[0-9a-f]{64})")


class CheckError(RuntimeError):
    """A step failed; the message says which and why."""


def run(argv: Sequence[str], *, what: str, timeout: float = 300) -> str:
    """Run ``argv`` with podman's settings from deploy/image; its stdout. Raises
    CheckError naming ``what``, with the output, when it fails or times out."""
    result = subprocess.run(  # noqa: S603 - our own argv
        list(argv),
        capture_output=True,
        text=True,
        env=container_env(),
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise CheckError(f"{what} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    return result.stdout


def _tool(name: str) -> str:
    """The checker ``name`` of .tools/k8s-venv. Raises CheckError when missing."""
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
        text = run([kubectl, "kustomize", str(HERE / "overlays" / overlay)], what=overlay)
        files[overlay] = out / f"{overlay}.yaml"
        files[overlay].write_text(text)
    return files


def validate(files: Sequence[Path]) -> None:
    """Every object of ``files`` valid, strictly, for every Kubernetes version."""
    for version in KUBERNETES_VERSIONS:
        argv = [_tool("kubernetes-validate"), "--strict", "--quiet", "-k", version]
        run([*argv, *map(str, files)], what=f"kubernetes-validate for Kubernetes {version}")


def scan(directory: Path) -> None:
    """No failed checkov check in the rendered overlays; offline (no download, no upload)."""
    argv = [_tool("checkov"), "--framework", "kubernetes", "--directory", str(directory)]
    argv += ["--compact", "--quiet", "--skip-download", "--skip-results-upload"]
    run(argv, what="checkov")


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


def check_tls(files: dict[str, Path]) -> None:
    """In every overlay of :data:`VERIFIED`, the pods verify the servers they reach
    (issue 59): the database URL of the Deployment and the migration Job asks libpq
    for ``sslmode=verify-full`` with ``sslrootcert`` a file of a Secret mounted
    read-only; the Deployment's Redis URL is ``rediss://`` with ``ssl_ca_certs`` such
    a file, and turns neither check off; the Deployment's pods serve TLS
    (``PETSTORE_TLS_CERTIFICATE`` and ``PETSTORE_TLS_KEY`` files of a Secret mounted
    read-only) and are probed over HTTPS. A container's ``env`` wins over its
    ``envFrom``, as in the kubelet. Raises CheckError naming the overlay, the object
    and what is missing."""
    for overlay in VERIFIED:
        documents = [doc for doc in yaml.safe_load_all(files[overlay].read_text()) if doc]
        (settings,) = (doc["data"] for doc in documents if doc["kind"] == "ConfigMap")
        for kind in ("Deployment", "Job"):
            (workload,) = (doc for doc in documents if doc["kind"] == kind)
            where = f"overlays/{overlay}: the {kind} {workload['metadata']['name']}"
            pod = workload["spec"]["template"]["spec"]
            (container,) = pod["containers"]
            env = {
                **settings,
                **{var["name"]: var.get("value") for var in container.get("env", [])},
            }
            database = _query(env.get("PETSTORE_DATABASE_URL"))
            if database.get("sslmode") != "verify-full":
                raise CheckError(f"{where}: PETSTORE_DATABASE_URL lacks sslmode=verify-full")
            _check_mounted(where, pod, container, database.get("sslrootcert"), "sslrootcert")
            if kind != "Deployment":
                continue
            for setting in ("PETSTORE_TLS_CERTIFICATE", "PETSTORE_TLS_KEY"):
                _check_mounted(where, pod, container, env.get(setting), setting)
            probes = [
                container.get(f"{kind}Probe", {}) for kind in ("startup", "liveness", "readiness")
            ]
            if any(probe.get("httpGet", {}).get("scheme") != "HTTPS" for probe in probes):
                raise CheckError(f"{where}: a probe is not HTTPS, while the pod serves TLS")
            redis = env.get("PETSTORE_REDIS_URL") or ""
            query = _query(redis)
            if not redis.startswith("rediss://") or query.get("ssl_cert_reqs", "required") != (
                "required"
            ):
                raise CheckError(
                    f"{where}: PETSTORE_REDIS_URL is not rediss:// with the server verified"
                )
            if query.get("ssl_check_hostname", "true").lower() in ("false", "0", "no", "n", "f"):
                raise CheckError(f"{where}: PETSTORE_REDIS_URL turns the host name check off")
            _check_mounted(where, pod, container, query.get("ssl_ca_certs"), "ssl_ca_certs")


def _query(url: str | None) -> dict[str, str]:
    """The query parameters of ``url`` (the last of a repeated one, as libpq and
    redis-py take them)."""
    return {name: values[-1] for name, values in parse_qs(urlsplit(url or "").query).items()}


def _check_mounted(
    where: str, pod: dict[str, Any], container: dict[str, Any], path: str | None, name: str
) -> None:
    """``path`` (the URL parameter ``name``) is a file of a Secret volume that
    ``container`` mounts read-only. Raises CheckError otherwise."""
    if not path:
        raise CheckError(f"{where}: no file is named by {name}")
    volumes = {volume["name"]: volume for volume in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        if PurePosixPath(path).is_relative_to(mount["mountPath"]):
            if "secret" in volumes[mount["name"]] and mount.get("readOnly"):
                return
            raise CheckError(f"{where}: {name}={path} is not in a Secret mounted read-only")
    raise CheckError(f"{where}: {name}={path} is not mounted")


def image_digest() -> str:
    """The digest of the local image ``make image`` built (``localhost/petstore:<version>``)."""
    argv = ["podman", "image", "inspect", "--format", "{{.Digest}}", image_name()]
    return run(argv, what=f"podman image inspect {image_name()} (run `make image`)").strip()


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
                f"({image_name()}) is {digest}: run `make kubernetes-pin` and commit"
            )


def pin() -> None:
    """Write the local image's digest into every pinned overlay."""
    digest = image_digest()
    for overlay in PINNED:
        path = HERE / "overlays" / overlay / "kustomization.yaml"
        path.write_text(DIGEST.sub(rf"\g<1>{digest}", path.read_text()))
        print(f"kubernetes: overlays/{overlay} pins {image_name()}@{digest}")
