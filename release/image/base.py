"""The base root file system: Debian's own packages by ``mmdebstrap``, cached by what it
is made from, and what its Python is (version, machine, C library), found by running
it, never written in."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from release.image.shell import CACHE, NETWORK_HINT, BuildError, run

#: The Debian release and its archives. The image's Python is this release's python3.
SUITE = "bookworm"
MIRRORS = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
#: Beside the Essential set: the release's default Python and the CA certificates.
PACKAGES = ("python3", "ca-certificates")
#: What dpkg leaves out of the base: nobody reads documentation in a container, and
#: Python's codecs are its own, not glibc's iconv modules (8 MB), whatever the
#: architecture's library directory (dpkg's patterns match across ``/``).
EXCLUDES = (
    "/usr/lib/*/gconv/*",
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

#: Run in the base by :func:`python_target`: what its python3 is.
_FACTS = (
    "import json, os, platform, sys, sysconfig; print(json.dumps({"
    "'version': platform.python_version(), 'machine': platform.machine(), "
    "'libc': os.confstr('CS_GNU_LIBC_VERSION'), 'stdlib': sysconfig.get_path('stdlib'), "
    "'cache_tag': sys.implementation.cache_tag}))"
)


def architecture() -> str:
    """The Debian architecture the base is made for: this machine's
    (``dpkg --print-architecture``, e.g. ``amd64``). Raises BuildError without dpkg."""
    return run(["dpkg", "--print-architecture"], what="dpkg --print-architecture").strip()


def base_key() -> str:
    """A digest (16 hex digits) of what the cached base depends on: the release, the
    archives, the packages, the exclusions, the hooks and the architecture."""
    spec = {
        "suite": SUITE,
        "mirrors": MIRRORS,
        "packages": PACKAGES,
        "excludes": EXCLUDES,
        "hooks": MERGED_USR_HOOKS,
        "architecture": architecture(),
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def base_tarball() -> Path:
    """Where the tarball of the Debian base is cached (:func:`base_rootfs`)."""
    return CACHE / f"base-{SUITE}-{base_key()}.tar"


def base_rootfs() -> Path:
    """The cached tarball of the Debian base, made with mmdebstrap when missing (that
    needs the network). Raises BuildError when mmdebstrap fails."""
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
        f"--architectures={architecture()}",
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
    run(argv, env=env, what=f"mmdebstrap (the first build needs the network: {NETWORK_HINT})")
    partial.rename(target)
    return target


def unpack(tarball: Path, rootfs: Path) -> None:
    """The base ``tarball`` unpacked into the new directory ``rootfs``, owners kept.
    Raises BuildError when tar fails."""
    rootfs.mkdir()
    run(["tar", "-xpf", str(tarball), "--numeric-owner", "-C", str(rootfs)], what="unpacking")


def in_root(rootfs: Path, *argv: str, env: dict[str, str] | None = None) -> str:
    """Run ``argv`` chrooted in ``rootfs`` with /dev and /proc mounted, in a mount
    namespace of its own so nothing stays mounted, in a clean environment plus
    ``env``; its stdout. Raises BuildError naming the program when it fails."""
    script = 'mount --rbind /dev "$0/dev" && mount -t proc proc "$0/proc" && exec chroot "$0" "$@"'
    clean = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LC_ALL": "C.UTF-8"}
    return run(
        ["unshare", "--mount", "--fork", "sh", "-c", script, str(rootfs), *argv],
        env={**clean, **(env or {})},
        what=f"{argv[0]} {argv[1] if len(argv) > 1 else ''} in the image's root",
    )


@dataclass(frozen=True)
class PythonTarget:
    """The image's Python: ``version`` (``3.11.2``), ``machine`` (``x86_64``), ``glibc``
    (``2.36``), its standard library's directory and its ``cache_tag``
    (``cpython-311``)."""

    version: str
    machine: str
    glibc: str
    stdlib: str
    cache_tag: str

    @property
    def platform(self) -> str:
        """The platform as uv names it: ``x86_64-manylinux_2_36``."""
        return f"{self.machine}-manylinux_{self.glibc.replace('.', '_')}"

    @property
    def wheel_platforms(self) -> list[str]:
        """The wheel platform tags it runs (PEP 600), newest first:
        ``manylinux_2_36_x86_64`` down to ``manylinux_2_17_x86_64``, then
        ``manylinux2014_x86_64``, which pip widens to manylinux2010 and manylinux1."""
        major, minor = (int(part) for part in self.glibc.split(".")[:2])
        tags = [f"manylinux_{major}_{glibc}_{self.machine}" for glibc in range(minor, 16, -1)]
        return [*tags, f"manylinux2014_{self.machine}"]

    @property
    def abi(self) -> str:
        """CPython's ABI tag for it: ``cp311``."""
        return "cp" + "".join(self.version.split(".")[:2])

    @property
    def site_packages(self) -> str:
        """A virtualenv's site-packages below its prefix: ``lib/python3.11/site-packages``."""
        return f"lib/{Path(self.stdlib).name}/site-packages"


def python_target(rootfs: Path) -> PythonTarget:
    """What the python3 of the unpacked base at ``rootfs`` is, asked by running it
    there. Raises BuildError when it does not run."""
    facts = json.loads(in_root(rootfs, "python3", "-c", _FACTS))
    libc, _, glibc = str(facts.pop("libc")).partition(" ")
    if libc != "glibc":
        raise BuildError(f"the base's C library is {libc!r}, not glibc: no manylinux wheels")
    return PythonTarget(glibc=glibc, **facts)
