"""``python -m release.kubernetes [pin]``: every step of :mod:`release.kubernetes`, or
the image's digest written into the pinned overlays."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import release.kubernetes
from release.image.sources import image_name
from release.kubernetes import manifests
from release.kubernetes.manifests import (
    KUBERNETES_VERSIONS,
    OVERLAYS,
    PINNED,
    VERIFIED,
    CheckError,
)
from release.kubernetes.play import serve


@contextmanager
def step(what: str) -> Iterator[None]:
    """Print ``what`` with the seconds it took, once done."""
    started = time.monotonic()
    yield
    print(f"kubernetes: {what} ({time.monotonic() - started:.1f} s)", flush=True)


def check() -> None:
    """Every step of :mod:`release.kubernetes`'s docstring. Raises CheckError naming
    the step that failed (a stale pin is only a warning)."""
    with tempfile.TemporaryDirectory(prefix="petstore-kubernetes-") as tmp:
        work = Path(tmp)
        rendered = work / "rendered"
        rendered.mkdir()
        with step(f"{', '.join(OVERLAYS)} rendered"):
            files = manifests.render(rendered)
        with step(f"valid for Kubernetes {', '.join(KUBERNETES_VERSIONS)} (strict)"):
            manifests.validate(list(files.values()))
        with step("probes on /healthz and /readyz, grace period longer than the stop"):
            manifests.check_stop_and_probes(files)
        with step(f"{' and '.join(VERIFIED)} verify PostgreSQL and Redis against the CA"):
            manifests.check_tls(files)
        with step("checkov: no failed check"):
            manifests.scan(rendered)
        with step(f"{' and '.join(PINNED)} pin the digest of {image_name()}"):
            # A warning, not a failure: any commit to the image's sources, and Debian's
            # updates to the base, change the digest until `make kubernetes-pin` runs.
            try:
                manifests.check_pins()
            except CheckError as stale:
                print(f"kubernetes: warning: {stale}", flush=True)
        with step("local under podman kube play"):
            serve(files["local"], work)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (:mod:`release.kubernetes`): 0 when done, 1 naming the step
    that failed."""
    parser = argparse.ArgumentParser(
        prog="python -m release.kubernetes", description=release.kubernetes.__doc__
    )
    parser.add_argument("command", nargs="?", choices=["check", "pin"], default="check")
    args = parser.parse_args(argv)
    try:
        if args.command == "pin":
            manifests.pin()
        else:
            check()
    except CheckError as exc:
        print(f"kubernetes: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
