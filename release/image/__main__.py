"""Build the OCI image ``localhost/petstore:<version>`` with no container registry.

    python -m release.image                # make image: build, or say it is up to date
    python -m release.image --check        # exit 0 when the image is current, 1 when not
    python -m release.image lock           # re-lock deploy/image/*requirements.txt
    python -m release.image lock --check   # exit 1 when a lock is out of date

Nothing comes from a registry, so an operator with only a Debian mirror and a PyPI
mirror builds the same image:

1. the base root file system is Debian's packages (``mmdebstrap --variant=essential``
   plus ``python3`` and ``ca-certificates``, no documentation) for this machine's
   architecture, cached in ``.tools/image/`` by what it is made from
   (:mod:`release.image.base`); the image's Python is what the base's python3 says
   it is;
2. the dependencies are the wheels locked with their hashes by ``uv pip compile
   --generate-hashes`` for that Python and platform (deploy/image/requirements.txt,
   :mod:`release.image.lock`), downloaded once into ``.tools/image/wheels``; the
   project is a wheel built from the working tree; ``pip install --require-hashes
   --no-deps`` installs them into the virtualenv ``/opt/petstore`` inside the root
   file system (``chroot``; no pip is left in it), and every module is compiled with
   hash-checked ``.pyc`` files, so a read-only root never writes one
   (:mod:`release.image.install`);
3. ``buildah build --timestamp $SOURCE_DATE_EPOCH`` turns the tree into a one-layer
   image from deploy/image/Containerfile (:mod:`release.image.oci`), every file's
   time and the image's creation time those of the last commit that changed the
   image's sources (:mod:`release.image.sources`): the same sources, mirror state
   and wheels give the same image digest, and a commit that changes nothing the image
   is made from (the Kubernetes overlay that pins the digest, docs) keeps it.

The network is needed only for steps 1 and 2 the first time (``make
test-prerequisites`` runs ``make image``); afterwards a build works offline. The
image is labelled with a digest of everything it is made from; ``--check`` and a
build compare it, so an unchanged tree is not rebuilt. Podman and buildah read
deploy/image's ``containers.conf`` and ``storage.conf`` unless ``CONTAINERS_CONF`` /
``CONTAINERS_STORAGE_CONF`` are set.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from release.image import base, install, lock, oci, sources
from release.image.shell import CACHE, BuildError, require


def build(*, name: str, force: bool = False) -> None:
    """Build the image ``name`` unless the local one is current (or ``force``). A
    current image is built again when this tree has no cached base: a later build
    here (``--force``, offline) needs the base the image was made from. Raises
    BuildError naming the step that failed."""
    require("mmdebstrap", "buildah", "unshare", "chroot", "groupadd", "useradd", "strip")
    files = sources.project_files()
    inputs = sources.inputs_digest(files)
    if not force and oci.current_inputs_label(name) == inputs and base.base_tarball().exists():
        print(f"image: {name} is up to date")
        return
    started = time.monotonic()
    previous = oci.image_id(name)
    epoch = sources.source_date_epoch()
    tarball = base.base_rootfs()
    CACHE.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="work-", dir=CACHE))
    try:
        rootfs = work / "rootfs"
        base.unpack(tarball, rootfs)
        target = base.python_target(rootfs)
        lock.check_target(target)
        wheels = lock.wheels(target, work / "wheels")
        project = sources.project_wheel(files, wheels, epoch, work / "dist")
        install.install(rootfs, wheels, project)
        install.trim(rootfs, target)
        install.strip_debug(rootfs, target)
        install.compile_modules(rootfs, target)
        install.remove_perl(rootfs)
        install.add_user(rootfs, epoch)
        install.pack(rootfs, work / "rootfs.tar")
        labels = {
            "org.opencontainers.image.version": sources.version(),
            "org.opencontainers.image.revision": sources.revision(),
            oci.INPUTS_LABEL: inputs,
        }
        context = work / "context"
        context.mkdir()
        (work / "rootfs.tar").rename(context / "rootfs.tar")
        oci.build(context, name=name, epoch=epoch, labels=labels)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if previous is not None and previous != oci.image_id(name):
        # The image this one replaces, now untagged: removed unless something uses it.
        oci.remove(previous)
    print(f"image: built {name} in {time.monotonic() - started:.0f} s: {oci.describe(name)}")


def relock() -> None:
    """Re-lock deploy/image for the Python of the base (made when missing). Raises
    BuildError when a step fails."""
    require("mmdebstrap", "unshare", "chroot")
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="lock-", dir=CACHE) as tmp:
        rootfs = Path(tmp) / "rootfs"
        base.unpack(base.base_rootfs(), rootfs)
        lock.lock(base.python_target(rootfs))


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (module docstring): 0 when done, 1 on a failed step (naming
    it), a stale image with ``--check`` or a stale lock with ``lock --check``."""
    parser = argparse.ArgumentParser(prog="python -m release.image", description=__doc__)
    parser.add_argument("command", nargs="?", choices=["build", "lock"], default="build")
    parser.add_argument("--check", action="store_true", help="exit 1 when stale, build nothing")
    parser.add_argument("--force", action="store_true", help="rebuild even when current")
    parser.add_argument(
        "--tag", default=None, help="image name (default: localhost/petstore:VERSION)"
    )
    args = parser.parse_args(argv)
    name = args.tag or sources.image_name()
    try:
        if args.command == "lock":
            lock.check_locks() if args.check else relock()
        elif args.check:
            current = oci.current_inputs_label(name) == sources.inputs_digest(
                sources.project_files()
            )
            print(f"image: {name} is {'up to date' if current else 'missing or stale'}")
            return 0 if current else 1
        else:
            build(name=name, force=args.force)
    except BuildError as exc:
        print(f"image: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
