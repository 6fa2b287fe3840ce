"""What the image is made from, as git knows it: the project's files, the last commit
that changed them (the image's revision and time) and a digest of it all (an image
labelled with it is current)."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path

from release.image.base import base_key
from release.image.shell import ROOT, run

#: The image's name; the tag is the project's version.
NAME = "localhost/petstore"

#: What the image is made from, beside the base and the wheels: the package's sources
#: and metadata, deploy/image (the Containerfile, the locks) and the build itself. A
#: commit that changes anything else (the Kubernetes manifests that pin this image's
#: digest, the docs) leaves the image, and its digest, as they were.
IMAGE_SOURCES = ("src/", "pyproject.toml", "README.md", "deploy/image/", "release/image/")


def version() -> str:
    """The project's version from pyproject.toml, the image's tag."""
    with (ROOT / "pyproject.toml").open("rb") as file:
        project = tomllib.load(file)["project"]
    return str(project["version"])


def image_name() -> str:
    """``localhost/petstore:<version>``."""
    return f"{NAME}:{version()}"


def _last_image_commit(field: str) -> str:
    """``git log``'s ``field`` (``%H``, ``%ct``) of the last commit that changed what
    the image is made from (:data:`IMAGE_SOURCES`). Raises BuildError outside git."""
    argv = ["git", "-C", str(ROOT), "log", "-1", f"--format={field}", "--", *IMAGE_SOURCES]
    return run(argv, what="git log").strip()


def source_date_epoch() -> int:
    """``SOURCE_DATE_EPOCH`` when set, else the time (Unix seconds) of the last commit
    that changed what the image is made from."""
    if "SOURCE_DATE_EPOCH" in os.environ:
        return int(os.environ["SOURCE_DATE_EPOCH"])
    return int(_last_image_commit("%ct"))


def revision() -> str:
    """The last commit that changed what the image is made from, ``-modified``
    appended when tracked files the image is made from changed since."""
    commit = _last_image_commit("%H")
    argv = ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"]
    status = run([*argv, "--", *IMAGE_SOURCES], what="git status")
    return commit + ("-modified" if status.strip() else "")


def project_files() -> list[str]:
    """The files of the working tree under :data:`IMAGE_SOURCES` that git does not
    ignore, tracked or not, sorted: what the project's wheel is built from."""
    out = run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        what="git ls-files",
    )
    names = {name for name in out.split("\0") if name.startswith(IMAGE_SOURCES)}
    return sorted(name for name in names if (ROOT / name).is_file())


def inputs_digest(files: Iterable[str]) -> str:
    """A digest (hex) of everything the image is made from: the base's key, the
    project's ``files`` (names and contents; deploy/image and its locks among them),
    the last commit that changed them and its time."""
    digest = hashlib.sha256()
    digest.update(f"{base_key()}\n{source_date_epoch()}\n{revision()}\n".encode())
    for name in files:
        digest.update(name.encode() + b"\0")
        digest.update(hashlib.sha256((ROOT / name).read_bytes()).digest())
    return digest.hexdigest()


def project_wheel(files: Sequence[str], wheels: Path, epoch: int, out: Path) -> Path:
    """The project's wheel, built offline into ``out`` from a copy of ``files`` with
    the locked setuptools in ``wheels``, every time in it ``epoch``. Raises
    BuildError when pip fails."""
    with tempfile.TemporaryDirectory(prefix="petstore-image-src-") as tmp:
        source = Path(tmp)
        for name in files:
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
        argv = [sys.executable, "-m", "pip", "--disable-pip-version-check", "wheel", "--quiet"]
        argv += ["--no-deps", "--no-index", "--find-links", str(wheels), "-w", str(out)]
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch), "PIP_CONSTRAINT": ""}
        run([*argv, str(source)], env=env, what="building the project's wheel")
    (wheel,) = out.glob("petstore-*.whl")
    return wheel
