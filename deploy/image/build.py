"""Build the OCI image ``localhost/petstore:<version>`` with no container registry.

    python -m deploy.image.build          # make image: build, or say it is up to date
    python -m deploy.image.build --check  # exit 0 when the image is current, 1 when not
    python -m deploy.image.build lock     # re-pin deploy/image/requirements.txt

Nothing comes from a registry, so an operator with only a Debian mirror and a PyPI
mirror builds the same image:

1. the base root file system is Debian's packages (``mmdebstrap --variant=essential``
   plus ``python3.11`` and ``ca-certificates``, no documentation), cached in
   ``.tools/image/`` by its package list;
2. the dependencies are the wheels pinned with their hashes in ``requirements.txt``
   (downloaded once into ``.tools/image/wheels``), the project is a wheel built from
   the working tree, all installed into the virtualenv ``/opt/petstore`` inside the
   root file system (``chroot``; no pip is left in it), and every module compiled with
   hash-checked ``.pyc`` files, so a read-only root file system never needs to write
   one;
3. ``buildah build --timestamp $SOURCE_DATE_EPOCH`` turns the tree into a one-layer
   image from ``Containerfile``, every file's time and the image's creation time set
   to the time of the last commit that changed the image's sources: the same
   sources, mirror state and wheels give the same image digest, and a commit that
   changes nothing the image is made from (the Kubernetes overlay that pins the
   digest, docs) keeps it.

The network is needed only for steps 1 and 2 the first time (``make
test-prerequisites`` runs ``make image``); afterwards a build works offline. The
image is labelled with a digest of everything it is made from; ``--check`` and a
build compare it, so an unchanged tree is not rebuilt. Podman and buildah read
``containers.conf`` and ``storage.conf`` from this directory unless
``CONTAINERS_CONF`` / ``CONTAINERS_STORAGE_CONF`` are set.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CACHE = ROOT / ".tools" / "image"
WHEELS = CACHE / "wheels"
REQUIREMENTS = HERE / "requirements.txt"
BUILD_REQUIREMENTS = HERE / "build-requirements.txt"
CONTAINERFILE = HERE / "Containerfile"

#: The image's name; the tag is the project's version.
NAME = "localhost/petstore"
#: The label holding the digest of the image's inputs (see :func:`inputs_digest`).
INPUTS_LABEL = "org.petstore.image.inputs"

#: The Debian release, its archives and the packages beside the Essential set.
SUITE = "bookworm"
MIRRORS = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
PACKAGES = ("python3.11", "ca-certificates")
#: What dpkg leaves out of the base: nobody reads documentation in a container, and
#: Python's codecs are its own, not glibc's iconv modules (8 MB).
EXCLUDES = (
    "/usr/lib/x86_64-linux-gnu/gconv/*",
    "/usr/share/doc/*",
    "/usr/share/man/*",
    "/usr/share/info/*",
    "/usr/share/locale/*",
    "/usr/share/lintian/*",
)
#: mmdebstrap's own hooks for the merged /usr of bookworm, so that the ``usrmerge``
#: package, and the 47 MB of Perl it needs, stay out.
MERGED_USR_HOOKS = "/usr/share/mmdebstrap/hooks/merged-usr"
#: A fixed time for the cached base; the image's own files get the commit's time.
BASE_EPOCH = 1704067200  # 2024-01-01T00:00:00Z

#: The unprivileged user the service runs as (no login, no home).
UID = 10001
#: Where the SQLite database lives: a volume.
DATA_DIR = "/var/lib/petstore"
VENV = "/opt/petstore"
#: Where the wheels wait inside the root file system while they are installed.
INSTALL = "/tmp/install"  # noqa: S108 - inside the image's root, removed after use


#: What to do when a step needs the network and has none.
NETWORK_HINT = "run `make image` or `make test-prerequisites` where the network is reachable"


class BuildError(RuntimeError):
    """A step of the build failed; the message says which and what to do."""


def container_env() -> dict[str, str]:
    """The environment for podman and buildah: this directory's settings unless the
    caller set their own."""
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(HERE / "containers.conf"))
    env.setdefault("CONTAINERS_STORAGE_CONF", str(HERE / "storage.conf"))
    return env


def version() -> str:
    """The project's version from pyproject.toml, the image's tag."""
    import tomllib

    with (ROOT / "pyproject.toml").open("rb") as file:
        project = tomllib.load(file)["project"]
    return str(project["version"])


def image_name() -> str:
    """``localhost/petstore:<version>``."""
    return f"{NAME}:{version()}"


def _run(argv: Sequence[str], *, env: Mapping[str, str] | None = None, what: str) -> str:
    """Run ``argv``; its stdout. Raises BuildError naming ``what`` with the output."""
    result = subprocess.run(  # noqa: S603 - our own argv
        list(argv), capture_output=True, text=True, env=None if env is None else dict(env)
    )
    if result.returncode != 0:
        raise BuildError(f"{what} failed ({result.returncode}):\n{result.stderr or result.stdout}")
    return result.stdout


def _require(*programs: str) -> None:
    missing = [name for name in programs if shutil.which(name) is None]
    if missing:
        raise BuildError(
            f"{', '.join(missing)} not found: install Debian's mmdebstrap, buildah, podman "
            "and runc packages (make image does, as root)"
        )


def _last_image_commit(field: str) -> str:
    """``git log``'s ``field`` (``%H``, ``%ct``) of the last commit that changed what
    the image is made from (:data:`IMAGE_SOURCES`): a commit that changes anything
    else (the Kubernetes manifests that pin this image's digest, the docs) leaves the
    image, and its digest, as they were."""
    argv = ["git", "-C", str(ROOT), "log", "-1", f"--format={field}", "--", *IMAGE_SOURCES]
    return _run(argv, what="git log").strip()


def source_date_epoch() -> int:
    """``SOURCE_DATE_EPOCH`` when set, else the time of the last commit that changed
    what the image is made from."""
    if "SOURCE_DATE_EPOCH" in os.environ:
        return int(os.environ["SOURCE_DATE_EPOCH"])
    return int(_last_image_commit("%ct"))


def revision() -> str:
    """The last commit that changed what the image is made from, ``-modified``
    appended when tracked files the image is made from changed since."""
    commit = _last_image_commit("%H")
    status = _run(
        [
            "git",
            "-C",
            str(ROOT),
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            *IMAGE_SOURCES,
        ],
        what="git status",
    )
    return commit + ("-modified" if status.strip() else "")


#: What the image is made from, beside the base and the wheels: the package's sources
#: and metadata, and this directory (the build, its pins, the Containerfile).
IMAGE_SOURCES = ("src/", "pyproject.toml", "README.md", "deploy/image/")


def project_files() -> list[str]:
    """The files of the working tree under :data:`IMAGE_SOURCES` that git does not
    ignore, tracked or not, sorted: what the project's wheel is built from."""
    out = _run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        what="git ls-files",
    )
    names = {name for name in out.split("\0") if name.startswith(IMAGE_SOURCES)}
    return sorted(name for name in names if (ROOT / name).is_file())


def base_key() -> str:
    """What the cached base root file system depends on."""
    spec = {
        "suite": SUITE,
        "mirrors": MIRRORS,
        "packages": PACKAGES,
        "excludes": EXCLUDES,
        "hooks": MERGED_USR_HOOKS,
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def inputs_digest(files: Iterable[str]) -> str:
    """A digest of everything the image is made from: the base's key, the project's
    files (names and contents; this directory and its pins among them), the last
    commit that changed them and its time. An image labelled with it is current."""
    digest = hashlib.sha256()
    digest.update(f"{base_key()}\n{source_date_epoch()}\n{revision()}\n".encode())
    for name in files:
        digest.update(name.encode() + b"\0")
        digest.update(hashlib.sha256((ROOT / name).read_bytes()).digest())
    return digest.hexdigest()


def _buildah(*args: str) -> subprocess.CompletedProcess[str]:
    """Run buildah with this directory's settings; its result, whatever it is."""
    buildah = shutil.which("buildah") or "buildah"
    return subprocess.run(  # noqa: S603 - our own argv
        [buildah, *args], capture_output=True, text=True, env=container_env()
    )


def current_inputs_label(name: str) -> str | None:
    """The inputs label of the local image ``name``, or None when there is none.
    Read with podman: buildah 1.28's templates have no ``json`` function."""
    podman = shutil.which("podman") or "podman"
    result = subprocess.run(  # noqa: S603 - our own argv
        [podman, "image", "inspect", "--format", "{{json .Labels}}", name],
        capture_output=True,
        text=True,
        env=container_env(),
    )
    if result.returncode != 0:
        return None
    labels: dict[str, str] = json.loads(result.stdout or "null") or {}
    return labels.get(INPUTS_LABEL)


def base_tarball() -> Path:
    """Where the tarball of the Debian base is cached (:func:`base_rootfs`)."""
    return CACHE / f"base-{SUITE}-{base_key()}.tar"


def base_rootfs() -> Path:
    """The cached tarball of the Debian base, made with mmdebstrap when missing."""
    target = base_tarball()
    if target.exists():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    print(f"image: building the Debian {SUITE} base with mmdebstrap (network)", flush=True)
    partial = target.with_suffix(".partial.tar")
    argv = [
        "mmdebstrap",
        "--quiet",
        "--mode=root",
        "--variant=essential",
        f"--hook-dir={MERGED_USR_HOOKS}",
        f"--include={','.join(PACKAGES)}",
        *(f"--dpkgopt=path-exclude={path}" for path in EXCLUDES),
        "--dpkgopt=path-include=/usr/share/doc/*/copyright",
        "--format=tar",
        SUITE,
        str(partial),
        *MIRRORS,
    ]
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(BASE_EPOCH)}
    _run(argv, env=env, what=f"mmdebstrap (the first build needs the network: {NETWORK_HINT})")
    partial.rename(target)
    return target


def _pip(*args: str) -> list[str]:
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]


def wheels() -> Path:
    """The pinned wheels (runtime and build) in ``.tools/image/wheels``: checked
    offline first, downloaded only when one is missing."""
    WHEELS.mkdir(parents=True, exist_ok=True)
    for requirements in (REQUIREMENTS, BUILD_REQUIREMENTS):
        common = ["download", "--quiet", "--only-binary=:all:", "--no-deps", "--require-hashes"]
        common += ["-r", str(requirements), "-d", str(WHEELS)]
        offline = subprocess.run(  # noqa: S603 - our own argv
            _pip(*common, "--no-index", "--find-links", str(WHEELS)), capture_output=True
        )
        if offline.returncode != 0:
            print(f"image: downloading the wheels of {requirements.name} (network)", flush=True)
            what = f"pip download -r {requirements.name} (needs the network: {NETWORK_HINT})"
            _run(_pip(*common), what=what)
    return WHEELS


def project_wheel(files: Sequence[str], epoch: int, out: Path) -> Path:
    """The project's wheel built offline from a copy of ``files``, its timestamps the
    commit's (setuptools from the pinned build wheels)."""
    with tempfile.TemporaryDirectory(prefix="petstore-image-src-") as tmp:
        source = Path(tmp)
        for name in files:
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
        argv = _pip("wheel", "--quiet", "--no-deps", "--no-index", "--find-links", str(WHEELS))
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch), "PIP_CONSTRAINT": ""}
        _run([*argv, "-w", str(out), str(source)], env=env, what="building the project's wheel")
    (wheel,) = out.glob("petstore-*.whl")
    return wheel


def in_root(rootfs: Path, *argv: str) -> None:
    """Run ``argv`` chrooted in ``rootfs`` with /dev and /proc mounted, in a mount
    namespace of its own so nothing stays mounted; a clean environment."""
    script = 'mount --rbind /dev "$0/dev" && mount -t proc proc "$0/proc" && exec chroot "$0" "$@"'
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LC_ALL": "C.UTF-8"}
    _run(
        ["unshare", "--mount", "--fork", "sh", "-c", script, str(rootfs), *argv],
        env=env,
        what=f"{argv[0]} {argv[1] if len(argv) > 1 else ''} in the image's root",
    )


def assemble(base: Path, project: Path, work: Path) -> Path:
    """The image's root file system as ``work/rootfs.tar``: the base, the virtualenv
    with the pinned wheels and the project, the service's user and data directory."""
    rootfs = work / "rootfs"
    rootfs.mkdir()
    unpack = ["tar", "-xpf", str(base), "--numeric-owner", "-C", str(rootfs)]
    _run(unpack, what="unpacking the base")
    install = rootfs / INSTALL.lstrip("/")
    install.mkdir(parents=True)
    for wheel in WHEELS.glob("*.whl"):
        shutil.copy2(wheel, install)
    shutil.copy2(project, install)
    shutil.copy2(REQUIREMENTS, install / "requirements.txt")
    (pip_wheel,) = install.glob("pip-*.whl")
    # pip runs from its wheel, so the image holds no installer.
    pip = [f"{VENV}/bin/python", f"{INSTALL}/{pip_wheel.name}/pip"]
    quiet = ["--quiet", "--no-index", "--no-compile", "--no-cache-dir", f"--find-links={INSTALL}"]
    in_root(rootfs, "python3.11", "-m", "venv", "--without-pip", VENV)
    pinned = ["--require-hashes", "-r", f"{INSTALL}/requirements.txt"]
    in_root(rootfs, *pip, "install", *quiet, *pinned)
    in_root(rootfs, *pip, "install", *quiet, "--no-deps", f"{INSTALL}/{project.name}")
    in_root(rootfs, *pip, "check")
    shutil.rmtree(install)
    # The docs page serves Swagger UI's bundle and stylesheet; the package also ships
    # Swagger Editor and source maps (20 MB) that nothing asks for.
    static = rootfs / VENV.lstrip("/") / "lib/python3.11/site-packages/swagger_ui/static"
    for unused in {*static.glob("swagger-editor*"), *static.glob("*.map")}:
        unused.unlink()
    _drop_unused(rootfs)
    # Debian's postinst compiled the standard library against its files' times, which
    # the image's fixed times would make stale: every module is compiled afresh, the
    # .pyc checked by the source's hash, never by its time.
    for directory in ("usr/lib/python3", "usr/lib/python3.11", VENV.lstrip("/")):
        for cache in sorted((rootfs / directory).rglob("__pycache__"), reverse=True):
            shutil.rmtree(cache)
    in_root(
        rootfs,
        "python3.11",
        "-m",
        "compileall",
        "-q",
        "-j0",
        "--invalidation-mode=unchecked-hash",
        "-x",
        r"lib2to3/tests|/test/",
        "/usr/lib/python3.11",
        "/usr/lib/python3",
        f"{VENV}/lib/python3.11/site-packages",
    )
    # Perl is Essential only for package maintainer scripts, and none runs in the
    # image (8 MB): dpkg's database says it is gone, so scanners see what is there.
    in_root(rootfs, "dpkg", "--purge", "--force-remove-essential", "--force-depends", "perl-base")
    _add_user(rootfs)
    data = rootfs / DATA_DIR.lstrip("/")
    data.mkdir(parents=True)
    os.chown(data, UID, UID)
    data.chmod(0o750)
    for name in ("var/log/dpkg.log", "var/log/alternatives.log", "var/cache/ldconfig/aux-cache"):
        (rootfs / name).unlink(missing_ok=True)
    tarball = work / "rootfs.tar"
    _run(
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


#: What nothing in the image runs (about 8 MB): the test harnesses of SQLAlchemy,
#: Alembic and Mako, type stubs, the standard library's help texts and tests,
#: documentation but its copyright files, shell completions, Perl's modules (Perl is
#: purged) and apt's caches.
_UNUSED = (
    f"{VENV}/lib/python3.11/site-packages/sqlalchemy/testing",
    f"{VENV}/lib/python3.11/site-packages/alembic/testing",
    f"{VENV}/lib/python3.11/site-packages/mako/testing",
    "/usr/lib/python3.11/pydoc_data",
    "/usr/lib/python3.11/test",
    "/usr/share/bash-completion",
    "/usr/share/perl5",
    "/var/cache/apt",
    "/var/cache/debconf",
)


def _drop_unused(rootfs: Path) -> None:
    """Remove :data:`_UNUSED`, the ``.pyi`` stubs and every file of ``/usr/share/doc``
    but its ``copyright`` files from the root file system at ``rootfs``."""
    for name in _UNUSED:
        shutil.rmtree(rootfs / name.lstrip("/"), ignore_errors=True)
    for stub in (rootfs / VENV.lstrip("/")).rglob("*.pyi"):
        stub.unlink()
    for doc in (rootfs / "usr/share/doc").rglob("*"):
        if doc.is_file() and doc.name != "copyright":
            doc.unlink()


def _add_user(rootfs: Path) -> None:
    """The ``petstore`` user and group, no home, no shell, no password."""
    with (rootfs / "etc/passwd").open("a") as passwd:
        passwd.write(f"petstore:x:{UID}:{UID}:Petstore:/nonexistent:/usr/sbin/nologin\n")
    with (rootfs / "etc/group").open("a") as group:
        group.write(f"petstore:x:{UID}:\n")
    with (rootfs / "etc/shadow").open("a") as shadow:
        shadow.write("petstore:!:19723::::::\n")


def build(*, name: str, force: bool = False) -> None:
    """Build the image ``name`` unless the local one is current (or ``force``). A
    current image is built again when this tree has no cached base: a later build
    here (``--force``, offline) needs the base the image was made from."""
    _require("mmdebstrap", "buildah", "unshare", "chroot")
    files = project_files()
    inputs = inputs_digest(files)
    if not force and current_inputs_label(name) == inputs and base_tarball().exists():
        print(f"image: {name} is up to date")
        return
    started = time.monotonic()
    previous = _image_id(name)
    epoch = source_date_epoch()
    base = base_rootfs()
    wheels()
    CACHE.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="work-", dir=CACHE))
    try:
        project = project_wheel(files, epoch, work / "dist")
        assemble(base, project, work)
        created = datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        labels = {
            "org.opencontainers.image.created": created,
            "org.opencontainers.image.version": version(),
            "org.opencontainers.image.revision": revision(),
            INPUTS_LABEL: inputs,
        }
        _run(
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
                str(work),
            ],
            env=container_env(),
            what="buildah build",
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if previous is not None and previous != _image_id(name):
        # The image this one replaces, now untagged: removed unless something uses it.
        _buildah("rmi", previous)
    print(f"image: built {name} in {time.monotonic() - started:.0f} s: {describe(name)}")


def _image_id(name: str) -> str | None:
    """The id of the local image ``name``, or None."""
    result = _buildah("inspect", "--type", "image", "--format", "{{.FromImageID}}", name)
    return (result.stdout.strip() or None) if result.returncode == 0 else None


def describe(name: str) -> str:
    """The image's size in MB (as podman counts it) and its digests."""
    out = _run(
        ["podman", "image", "inspect", "--format", "{{.Size}} {{.Id}} {{.Digest}}", name],
        env=container_env(),
        what="podman image inspect",
    )
    size, image_id, digest = out.split()
    return f"{int(size) / 1e6:.0f} MB, id {image_id[:12]}, digest {digest}"


#: The Python of the image (Debian bookworm's python3.11), for the pins' markers.
IMAGE_PYTHON = "3.11.2"


def _resolve(requirements: Sequence[str]) -> list[dict[str, object]]:
    """pip's resolution of ``requirements`` as wheels for this platform, from the
    package index: its report's ``install`` items."""
    report = _run(
        _pip(
            "install",
            "--quiet",
            "--dry-run",
            "--ignore-installed",
            "--only-binary=:all:",
            "--report=-",
            *requirements,
        ),
        what="resolving the pins",
    )
    items: list[dict[str, object]] = json.loads(report)["install"]
    return items


def _missing_for_image(items: Sequence[dict[str, object]]) -> list[str]:
    """The requirements of ``items`` that the image's Python needs but the Python that
    resolved them did not (``async-timeout; python_full_version < "3.11.3"``)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    image = {"python_full_version": IMAGE_PYTHON, "python_version": IMAGE_PYTHON[:4]}
    names = {canonicalize_name(str(_meta(item)["name"])) for item in items}
    missing = []
    for item in items:
        requires = _meta(item).get("requires_dist") or []
        assert isinstance(requires, list)
        for spec in requires:
            requirement = Requirement(str(spec))
            marker = requirement.marker
            needed = marker is None or marker.evaluate({**image, "extra": ""})
            if needed and canonicalize_name(requirement.name) not in names:
                requirement.marker = None
                missing.append(str(requirement))
    return missing


def _meta(item: Mapping[str, object]) -> dict[str, object]:
    meta = item["metadata"]
    assert isinstance(meta, dict)
    return meta


def lock() -> None:
    """Re-pin ``requirements.txt`` (the project's dependencies as wheels for this
    platform and the image's Python, with their hashes) and
    ``build-requirements.txt`` (pip and setuptools), resolved from the index now."""
    pins = ((REQUIREMENTS, [str(ROOT)]), (BUILD_REQUIREMENTS, ["pip", "setuptools>=69"]))
    for target, wanted in pins:
        items = _resolve(wanted)
        while extra := _missing_for_image(items):
            wanted = [*wanted, *extra]
            items = _resolve(wanted)
        lines = [
            "# Pinned by `python -m deploy.image.build lock`; installed into the image with\n"
            "# --require-hashes. Re-pin after changing the dependencies in pyproject.toml.\n"
        ]
        for item in sorted(items, key=lambda i: str(_meta(i)["name"]).lower()):
            meta, info = _meta(item), item["download_info"]
            if meta["name"] == "petstore":
                continue
            assert isinstance(info, dict)
            sha256 = info["archive_info"]["hashes"]["sha256"]
            lines.append(f"{meta['name']}=={meta['version']} --hash=sha256:{sha256}\n")
        target.write_text("".join(lines))
        print(f"image: wrote {target.relative_to(ROOT)} ({len(lines) - 1} pins)")


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (module docstring); 1 on a failed build, naming the step."""
    parser = argparse.ArgumentParser(prog="python -m deploy.image.build", description=__doc__)
    parser.add_argument("command", nargs="?", choices=["build", "lock"], default="build")
    parser.add_argument("--check", action="store_true", help="exit 1 when the image is stale")
    parser.add_argument("--force", action="store_true", help="rebuild even when current")
    parser.add_argument("--tag", default=None, help=f"image name (default {image_name()})")
    args = parser.parse_args(argv)
    name = args.tag or image_name()
    try:
        if args.command == "lock":
            lock()
        elif args.check:
            current = current_inputs_label(name) == inputs_digest(project_files())
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
