"""Small disks for the data nodes: each node's folder on a tmpfs of a fixed size, so
that ``make chaos-network`` can fill one (the "data node's disk full" fault) and
empty it again, and the rest of the machine never runs short.

Each is mounted with the source name ``pst-disk<N>`` (:data:`testbed.hosts.PREFIX`), so
that :func:`leftovers` finds what a crashed run left and :func:`remove_all` unmounts
it. Needs root.
"""

from __future__ import annotations

import os
import subprocess
from contextlib import suppress
from pathlib import Path

import psycopg

from testbed.hosts import PREFIX
from testbed.processes import ServerUnavailableError, give_to_postgres

#: What fills a disk: one file, as large as the space left.
FILLER = "filler"


def _run(*argv: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)  # noqa: S603
    if result.returncode != 0:
        raise ServerUnavailableError(f"{' '.join(argv)}: {result.stderr.strip()}")


class SmallDisk:
    """A tmpfs of ``size`` (``mount``'s notation: ``2g``) at ``path``, named
    ``pst-<name>``; nothing is mounted until :meth:`mount`."""

    def __init__(self, path: Path, name: str, *, size: str) -> None:
        self.path, self.source, self.size = path, f"{PREFIX}{name}", size

    def mount(self) -> None:
        """Mount it (its root the PostgreSQL user's)."""
        self.path.mkdir(parents=True, exist_ok=True)
        _run("mount", "-t", "tmpfs", "-o", f"size={self.size},mode=0755", self.source,
             str(self.path))  # fmt: skip
        give_to_postgres(self.path)

    def available(self) -> int:
        """Bytes left for files (``statvfs``)."""
        stats = os.statvfs(self.path)
        return stats.f_bavail * stats.f_frsize

    def fill(self) -> None:
        """Take every byte left with one file (appended to when called again: what
        PostgreSQL frees meanwhile, old WAL segments, is taken too), written (a tmpfs
        allocates as it is written), 1 MiB at a time, then a page at a time, until it
        is refused."""
        with open(self.path / FILLER, "ab", buffering=0) as out:
            for chunk in (bytes(1 << 20), bytes(4096)):
                with suppress(OSError):  # ENOSPC: the disk is full
                    while out.write(chunk):
                        pass

    def empty(self) -> None:
        """Remove what :meth:`fill` wrote."""
        (self.path / FILLER).unlink(missing_ok=True)

    def unmount(self) -> None:
        """Unmount it (:func:`unmount`); its files are gone."""
        unmount(str(self.path))


def leftovers() -> list[str]:
    """The mount points of every disk named with :data:`PREFIX` mounted now."""
    with open("/proc/self/mounts") as mounts:
        rows = [line.split() for line in mounts]
    return [row[1] for row in rows if row[0].startswith(f"{PREFIX}disk")]


def remove_all() -> list[str]:
    """Unmount every disk named with :data:`PREFIX` (lazily: a process still in one
    lets go when it ends); returns those that are still mounted."""
    for point in leftovers():
        unmount(point)
    return leftovers()


def unmount(point: str) -> None:
    """Unmount what is mounted at ``point``, lazily: a process still in it lets go
    when it ends."""
    subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)  # noqa: S603, S607


def refuses_writes(url: str) -> bool:
    """Whether the PostgreSQL at ``url`` refuses a write for want of space (SQLSTATE
    53100): a temporary table too large for its memory, dropped with the session."""
    try:
        with psycopg.connect(url, connect_timeout=1) as connection:
            connection.execute(
                "CREATE TEMP TABLE probe AS SELECT g FROM generate_series(1, 2000000) AS g"
            )
    except psycopg.errors.DiskFull:
        return True
    except psycopg.Error:
        return False
    return False
