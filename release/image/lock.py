"""The hashed locks of deploy/image and the wheels they name.

``uv pip compile --generate-hashes`` resolves the locks for the image's Python (its
version and platform, :class:`~release.image.base.PythonTarget`, found by running the
base's python3), not for the Python that runs the build: a marker such as
``python_full_version < "3.11.3"`` is decided for the image. The target stands in the
header uv writes (the command that made the lock), so the check reads it from there
and needs no base. pip downloads the locked wheels for that platform, each checked
against its hash.
"""

from __future__ import annotations

import difflib
import re
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

from release.image.base import PythonTarget
from release.image.shell import CACHE, DEPLOY, NETWORK_HINT, ROOT, BuildError, run

#: The service's dependencies, from pyproject.toml: installed into /opt/petstore.
REQUIREMENTS = DEPLOY / "requirements.txt"
#: pip (which installs, from its wheel) and setuptools (which builds the project's
#: wheel), from build-requirements.in: never installed into the image.
BUILD_REQUIREMENTS = DEPLOY / "build-requirements.txt"
#: Each lock and what it is compiled from, relative to the repository's root.
LOCKS = {REQUIREMENTS: "pyproject.toml", BUILD_REQUIREMENTS: "deploy/image/build-requirements.in"}
#: Every wheel ever downloaded for the locks; a build takes the locked ones from here.
WHEELS = CACHE / "wheels"

_VERSION = re.compile(r"--python-version[ =](\S+)")
_PLATFORM = re.compile(r"--python-platform[ =](\S+)")
_PIN = re.compile(r"^([A-Za-z0-9._-]+==[^\s\\]+)", re.MULTILINE)


def _uv() -> str:
    """The uv of the build's virtualenv (the dev extras), else uv on PATH. Raises
    BuildError when there is none."""
    beside = Path(sysconfig.get_path("scripts")) / "uv"
    found = str(beside) if beside.exists() else shutil.which("uv")
    if found is None:
        raise BuildError("uv not found: install the dev extras (make .venv/.installed)")
    return found


def _compile(
    source: str, output: Path, version: str, platform: str, *, header: bool, offline: bool
) -> None:
    """``uv pip compile`` of ``source`` into ``output`` for the Python ``version`` on
    ``platform``; the versions already in ``output`` are kept when they still fit.
    ``offline``: from uv's cache alone. Raises BuildError when uv fails (it needs the
    package index, or its cache of it)."""
    argv = [_uv(), "pip", "compile", "--quiet", source, "--generate-hashes"]
    argv += ["--python-version", version, "--python-platform", platform]
    argv += ["--output-file", str(output.relative_to(ROOT) if header else output)]
    argv += [*(["--no-header"] if not header else []), *(["--offline"] if offline else [])]
    run(argv, what=f"uv pip compile {source} (needs the package index)", cwd=ROOT)


def lock(target: PythonTarget) -> None:
    """Write every lock of :data:`LOCKS` for ``target``, keeping the pinned versions
    that still fit their source (delete a lock to take the newest releases). Raises
    BuildError when uv fails."""
    for output, source in LOCKS.items():
        # uv keeps the hashes of a version it keeps: without them, it writes every
        # file's of the index, so the lock serves another platform's build too.
        if output.exists():
            kept = _PIN.findall(output.read_text())
            output.write_text("".join(f"{pin}\n" for pin in kept))
        _compile(source, output, target.version, target.platform, header=True, offline=False)
        pins = sum(1 for line in output.read_text().splitlines() if "==" in line)
        print(f"image: wrote {output.relative_to(ROOT)} ({pins} pins for {target.platform})")


def locked_target() -> tuple[str, str]:
    """The Python version and uv platform ``requirements.txt`` was locked for, from the
    command in its header. Raises BuildError when the header names none."""
    text = REQUIREMENTS.read_text()
    version, platform = _VERSION.search(text), _PLATFORM.search(text)
    if version is None or platform is None:
        raise BuildError(f"{REQUIREMENTS.relative_to(ROOT)} names no target: run its lock")
    return version.group(1), platform.group(1)


def _body(text: str) -> list[str]:
    """The lines of a lock after uv's header comment."""
    lines = text.splitlines()
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return lines


def check_locks() -> None:
    """Nothing when every lock is what ``uv pip compile`` makes of its source now, for
    the target it was locked for, keeping its versions; raises BuildError with the
    difference otherwise (a dependency added, removed or moved out of its pinned
    version in pyproject.toml). From uv's cache when it has what the locks need (make
    test-prerequisites fills it, so make test runs with no network), else from the
    package index."""
    version, platform = locked_target()
    with tempfile.TemporaryDirectory(prefix="petstore-lock-") as tmp:
        for output, source in LOCKS.items():
            fresh = Path(tmp) / output.name
            try:
                shutil.copy2(output, fresh)
                _compile(source, fresh, version, platform, header=False, offline=True)
            except BuildError:
                shutil.copy2(output, fresh)
                _compile(source, fresh, version, platform, header=False, offline=False)
            diff = list(
                difflib.unified_diff(
                    _body(output.read_text()), _body(fresh.read_text()), lineterm="", n=1
                )
            )
            if diff:
                name = output.relative_to(ROOT)
                raise BuildError(
                    f"{name} is out of date with {source}: run `python -m release.image lock` "
                    "and commit it\n" + "\n".join(diff[:40])
                )
    print(f"image: the locks are up to date with their sources ({platform}, Python {version})")


def check_target(target: PythonTarget) -> None:
    """Nothing when the locks were made for ``target``; raises BuildError otherwise (a
    new Debian release, or a build on another architecture)."""
    if locked_target() != (target.version, target.platform):
        version, platform = locked_target()
        raise BuildError(
            f"the base's Python is {target.version} on {target.platform}, the locks are for "
            f"{version} on {platform}: run `python -m release.image lock` and commit"
        )


def _pip(*args: str) -> list[str]:
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]


def wheels(target: PythonTarget, out: Path) -> Path:
    """The locked wheels for ``target`` in the new directory ``out``, each checked
    against its hash: from the cache in ``.tools/image/wheels``, downloaded into it
    first when one is missing (that needs the network). Raises BuildError when pip
    fails."""
    out.mkdir(parents=True)
    WHEELS.mkdir(parents=True, exist_ok=True)
    platform = [f"--platform={tag}" for tag in target.wheel_platforms]
    platform += ["--implementation", "cp"]
    platform += ["--python-version", target.version, "--abi", target.abi]
    for requirements in LOCKS:
        common = ["download", "--quiet", "--only-binary=:all:", "--no-deps", "--require-hashes"]
        common += [*platform, "-r", str(requirements)]
        offline = [*common, "--no-index", "--find-links", str(WHEELS), "-d", str(out)]
        try:
            run(_pip(*offline), what=f"pip download -r {requirements.name} from the cache")
        except BuildError:
            print(f"image: downloading the wheels of {requirements.name} (network)", flush=True)
            what = f"pip download -r {requirements.name} (needs the network: {NETWORK_HINT})"
            run(_pip(*common, "-d", str(WHEELS)), what=what)
            run(_pip(*offline), what=f"pip download -r {requirements.name} from the cache")
    return out
