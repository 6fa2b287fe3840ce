"""The image's root file system made from the unpacked base: the locked wheels and the
project installed into the virtualenv ``/opt/petstore``, what nothing runs removed,
every module compiled, the service's user and data directory, packed as a tarball."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from release.image.base import PythonTarget, in_root
from release.image.lock import BUILD_REQUIREMENTS, REQUIREMENTS
from release.image.shell import run

#: The unprivileged user the service runs as (no login, no home), and its group.
UID = 10001
USER = "petstore"
#: Where the SQLite database lives: a volume.
DATA_DIR = "/var/lib/petstore"
VENV = "/opt/petstore"
#: Where the wheels wait inside the root file system while they are installed.
INSTALL = "/tmp/install"  # noqa: S108 - inside the image's root, removed after use


def _locked_pip(wheels: Path) -> Path:
    """The wheel of the pip that build-requirements.txt locks, in ``wheels``."""
    for line in BUILD_REQUIREMENTS.read_text().splitlines():
        if line.startswith("pip=="):
            version = line.split("==")[1].split()[0]
            (wheel,) = wheels.glob(f"pip-{version}-*.whl")
            return wheel
    raise LookupError(f"{BUILD_REQUIREMENTS.name} locks no pip")


def install(rootfs: Path, wheels: Path, project: Path) -> None:
    """The virtualenv :data:`VENV` in ``rootfs``, made by the base's python3: the
    wheels of requirements.txt from ``wheels``, each checked against its hash and none
    but those (``--no-deps``), then the ``project`` wheel, then ``pip check``. pip
    runs from its wheel, so the image holds no installer. Raises BuildError when a
    step fails."""
    install_dir = rootfs / INSTALL.lstrip("/")
    install_dir.mkdir(parents=True)
    for wheel in (*wheels.glob("*.whl"), project):
        shutil.copy2(wheel, install_dir)
    shutil.copy2(REQUIREMENTS, install_dir / "requirements.txt")
    pip = [f"{VENV}/bin/python", f"{INSTALL}/{_locked_pip(wheels).name}/pip"]
    options = ["--quiet", "--no-index", "--no-compile", "--no-cache-dir", f"--find-links={INSTALL}"]
    in_root(rootfs, "python3", "-m", "venv", "--without-pip", VENV)
    locked = ["--require-hashes", "--no-deps", "-r", f"{INSTALL}/requirements.txt"]
    in_root(rootfs, *pip, "install", *options, *locked)
    in_root(rootfs, *pip, "install", *options, "--no-deps", f"{INSTALL}/{project.name}")
    # --no-deps installed the lock as it is: pip check says that it is complete.
    in_root(rootfs, *pip, "check")
    shutil.rmtree(install_dir)


def trim(rootfs: Path, target: PythonTarget) -> None:
    """Remove from ``rootfs`` what nothing in the image runs (about 28 MB): Swagger
    Editor and source maps of the docs page's assets, the test harnesses of
    SQLAlchemy, Alembic and Mako, type stubs, the standard library's help texts and
    tests, documentation but its copyright files, shell completions and apt's caches."""
    site = rootfs / VENV.lstrip("/") / target.site_packages
    # The docs page serves Swagger UI's bundle and stylesheet; the package also ships
    # Swagger Editor and source maps (20 MB) that nothing asks for.
    static = site / "swagger_ui" / "static"
    for unused in {*static.glob("swagger-editor*"), *static.glob("*.map")}:
        unused.unlink()
    stdlib = rootfs / target.stdlib.lstrip("/")
    unused_trees = [site / "sqlalchemy/testing", site / "alembic/testing", site / "mako/testing"]
    unused_trees += [stdlib / "pydoc_data", stdlib / "test"]
    unused_trees += [rootfs / path for path in ("usr/share/bash-completion", "var/cache/apt")]
    unused_trees.append(rootfs / "var/cache/debconf")
    for tree in unused_trees:
        shutil.rmtree(tree, ignore_errors=True)
    for stub in (rootfs / VENV.lstrip("/")).rglob("*.pyi"):
        stub.unlink()
    for doc in (rootfs / "usr/share/doc").rglob("*"):
        if doc.is_file() and doc.name != "copyright":
            doc.unlink()


def strip_debug(rootfs: Path, target: PythonTarget) -> None:
    """Take the debugging sections out of the virtualenv's shared objects with this
    machine's ``strip --strip-debug`` (binutils): nothing in the image debugs them,
    and uvloop's event loop alone carries 11.7 MB of them in its 13.6. Their code and
    the symbols they are linked by stay. Raises BuildError when strip fails."""
    site = rootfs / VENV.lstrip("/") / target.site_packages
    objects = sorted(str(path) for path in site.rglob("*.so*") if path.is_file())
    run(["strip", "--strip-debug", *objects], what="strip --strip-debug")


def compile_modules(rootfs: Path, target: PythonTarget) -> None:
    """Every module of the standard library, Debian's and the virtualenv's compiled
    afresh, the ``.pyc`` checked by the source's hash, never by its time: Debian's
    postinst compiled against its files' times, which the image's fixed times would
    make stale, and a read-only root never writes one. Raises BuildError on failure."""
    directories = [target.stdlib, "/usr/lib/python3", f"{VENV}/{target.site_packages}"]
    for directory in directories:
        for cache in sorted((rootfs / directory.lstrip("/")).rglob("__pycache__"), reverse=True):
            shutil.rmtree(cache)
    argv = ["python3", "-m", "compileall", "-q", "-j0", "--invalidation-mode=unchecked-hash"]
    in_root(rootfs, *argv, "-x", r"lib2to3/tests|/test/", *directories)


def remove_perl(rootfs: Path) -> None:
    """Purge perl-base with dpkg, so that its database says what is there. Perl is
    Essential only for the maintainer scripts of packages, and none runs in the image
    (nothing is installed into it after the build); its 8 MB would take the image
    over its 200 MB. dpkg removes an Essential package only when told to
    (``--force-remove-essential``), and debconf's dependency on it only with
    ``--force-depends``. Raises BuildError when dpkg fails."""
    in_root(rootfs, "dpkg", "--purge", "--force-remove-essential", "--force-depends", "perl-base")
    shutil.rmtree(rootfs / "usr/share/perl5", ignore_errors=True)


def add_user(rootfs: Path, epoch: int) -> None:
    """The system group and user ``petstore`` (uid and gid :data:`UID`), no home, no
    shell, no password, added to ``rootfs`` by this machine's ``groupadd`` and
    ``useradd --root`` (the Essential set has no shadow tools, and the image needs
    none), any password change date at ``epoch`` (shadow honours SOURCE_DATE_EPOCH);
    and its data directory :data:`DATA_DIR`. Raises BuildError when a tool fails."""
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch)}
    root = f"--root={rootfs}"
    run(["groupadd", root, "--system", f"--gid={UID}", USER], env=env, what="groupadd")
    argv = ["useradd", root, "--system", f"--uid={UID}", f"--gid={UID}", "--no-create-home"]
    argv += ["--home-dir=/nonexistent", "--shell=/usr/sbin/nologin", "--comment=Petstore"]
    # No lastlog or faillog entry: a sparse file as long as the uid, and a time.
    run([*argv, "--no-log-init", USER], env=env, what="useradd")
    data = rootfs / DATA_DIR.lstrip("/")
    data.mkdir(parents=True)
    os.chown(data, UID, UID)
    data.chmod(0o750)


def pack(rootfs: Path, tarball: Path) -> Path:
    """``rootfs`` packed into ``tarball``, sorted, numeric owners, every time 0 (buildah
    sets the commit's), without the logs and caches that record the build's own time.
    Raises BuildError when tar fails."""
    for name in ("var/log/dpkg.log", "var/log/alternatives.log", "var/cache/ldconfig/aux-cache"):
        (rootfs / name).unlink(missing_ok=True)
    run(
        [
            "tar",
            "--create",
            f"--file={tarball}",
            f"--directory={rootfs}",
            "--sort=name",
            "--numeric-owner",
            "--mtime=@0",
            "--exclude=./dev/*",
            "--exclude=./proc/*",
            "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime",
            ".",
        ],
        what="packing the root file system",
    )
    return tarball
