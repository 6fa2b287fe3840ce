"""What every step of the image's build shares: the paths, the error a step raises and
how a step runs a program."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: What an operator reads or installs: the Containerfile, the locks, podman's settings.
DEPLOY = ROOT / "deploy" / "image"
#: The cache of the base root file system and the wheels (``make test-prerequisites``).
CACHE = ROOT / ".tools" / "image"

#: What to do when a step needs the network and has none.
NETWORK_HINT = "run `make image` or `make test-prerequisites` where the network is reachable"


class BuildError(RuntimeError):
    """A step of the build failed; the message says which and what to do."""


def container_env() -> dict[str, str]:
    """The environment for podman and buildah: ``os.environ`` with deploy/image's
    ``containers.conf`` and ``storage.conf`` unless the caller set their own."""
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(DEPLOY / "containers.conf"))
    env.setdefault("CONTAINERS_STORAGE_CONF", str(DEPLOY / "storage.conf"))
    return env


def run(
    argv: Sequence[str],
    *,
    what: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> str:
    """Run ``argv`` (in ``cwd``, with ``env`` or this process's environment); its
    stdout. Raises BuildError naming ``what``, with the program's output, when it
    exits non-zero."""
    result = subprocess.run(  # noqa: S603 - our own argv
        list(argv),
        capture_output=True,
        text=True,
        env=None if env is None else dict(env),
        cwd=cwd,
        check=False,
    )
    if result.returncode != 0:
        raise BuildError(f"{what} failed ({result.returncode}):\n{result.stderr or result.stdout}")
    return result.stdout


def require(*programs: str) -> None:
    """Nothing when every program of ``programs`` is on PATH; raises BuildError naming
    the missing ones and the Debian packages to install otherwise."""
    missing = [name for name in programs if shutil.which(name) is None]
    if missing:
        raise BuildError(
            f"{', '.join(missing)} not found: install Debian's mmdebstrap, buildah, podman, "
            "runc, binutils and passwd packages (make image does all but passwd, as root)"
        )
