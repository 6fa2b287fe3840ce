"""The OCI image made of the root file system's tarball by ``buildah build`` with
deploy/image/Containerfile, and what podman says of the local images."""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

from release.image.shell import DEPLOY, container_env, run

CONTAINERFILE = DEPLOY / "Containerfile"
#: The label holding the digest of the image's inputs (sources.inputs_digest).
INPUTS_LABEL = "org.petstore.image.inputs"


def _tool(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run podman or buildah with deploy/image's settings; its result, whatever it is."""
    return subprocess.run(  # noqa: S603 - our own argv
        [shutil.which(name) or name, *args],
        capture_output=True,
        text=True,
        env=container_env(),
        check=False,
    )


def build(context: Path, *, name: str, epoch: int, labels: dict[str, str]) -> None:
    """``buildah build`` of the Containerfile with ``context`` (holding ``rootfs.tar``)
    into the local image ``name``: no network, no pull, OCI format, every file's time
    and the creation time ``epoch``, the OCI labels ``created`` (from ``epoch``) and
    ``labels``. Raises BuildError when buildah fails."""
    created = datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    labels = {"org.opencontainers.image.created": created, **labels}
    run(
        [
            "buildah",
            "build",
            "--quiet",
            f"--timestamp={epoch}",
            "--network=none",
            "--pull=never",
            "--format=oci",
            f"--file={CONTAINERFILE}",
            *(f"--label={key}={value}" for key, value in labels.items()),
            f"--tag={name}",
            str(context),
        ],
        env=container_env(),
        what="buildah build",
    )


def current_inputs_label(name: str) -> str | None:
    """The inputs label of the local image ``name``, or None when there is no such
    image or label. Read with podman: buildah 1.28's templates have no ``json``."""
    result = _tool("podman", "image", "inspect", "--format", "{{json .Labels}}", name)
    if result.returncode != 0:
        return None
    labels: dict[str, str] = json.loads(result.stdout or "null") or {}
    return labels.get(INPUTS_LABEL)


def image_id(name: str) -> str | None:
    """The id of the local image ``name``, or None when there is none."""
    result = _tool("buildah", "inspect", "--type", "image", "--format", "{{.FromImageID}}", name)
    return (result.stdout.strip() or None) if result.returncode == 0 else None


def remove(image: str) -> None:
    """Remove the local image ``image`` (an id or a name) unless something uses it;
    nothing when it cannot be removed."""
    _tool("buildah", "rmi", image)


def describe(name: str) -> str:
    """The image's size in MB (as podman counts it), its id and its digest, as one
    line. Raises BuildError when podman knows no such image."""
    out = run(
        ["podman", "image", "inspect", "--format", "{{.Size}} {{.Id}} {{.Digest}}", name],
        env=container_env(),
        what="podman image inspect",
    )
    size, identifier, digest = out.split()
    return f"{int(size) / 1e6:.0f} MB, id {identifier[:12]}, digest {digest}"
