"""``petstore db backup PATH`` in a folder where someone else plants files: nothing at
PATH or at a temporary name is ever followed or replaced, the copy is readable by its
owner only, and a refused or failed backup leaves nothing behind."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from petstore.cli import backup
from petstore.cli.main import main

ANIMALS = 25


@pytest.fixture
def database(tmp_path: Path) -> Path:
    """A migrated SQLite database of :data:`ANIMALS` animals, in a folder of its own."""
    path = tmp_path / "live" / "petstore.db"
    path.parent.mkdir()
    upgraded = CliRunner().invoke(
        main, ["db", "upgrade"], env={"PETSTORE_DATABASE_URL": f"sqlite:///{path}"}
    )
    assert upgraded.exit_code == 0, upgraded.output
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.executemany(
            "INSERT INTO pets (name, category_id, status) VALUES (?, 1, 'available')",
            [(f"Pet {n}",) for n in range(ANIMALS)],
        )
    return path


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """The folder the backups go to."""
    path = tmp_path / "backups"
    path.mkdir()
    return path


@pytest.fixture
def umask() -> Iterator[None]:
    """Restore the process's umask after a test that sets one."""
    before = os.umask(0o022)
    yield
    os.umask(before)


def back_up(database: Path, target: Path) -> Result:
    return CliRunner().invoke(
        main, ["db", "backup", str(target)], env={"PETSTORE_DATABASE_URL": f"sqlite:///{database}"}
    )


def animals_in(path: Path) -> int:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        (count,) = conn.execute("SELECT count(*) FROM pets").fetchone()
    return int(count)


def test_a_backup_is_a_regular_file_of_every_animal_and_nothing_else_is_left(
    database: Path, folder: Path
) -> None:
    target = folder / "petstore-2031-01-01.db"
    made = back_up(database, target)
    assert made.exit_code == 0, made.output
    assert made.stdout == f"Backed up {database} to {target}: {ANIMALS} animals, integrity ok.\n"
    assert stat.S_ISREG(target.lstat().st_mode)
    assert target.lstat().st_nlink == 1  # the temporary name is gone
    assert animals_in(target) == ANIMALS
    assert [p.name for p in folder.iterdir()] == [target.name]


@pytest.mark.parametrize("planted_at", ["live database", "empty file"])
def test_a_link_planted_at_the_old_temporary_name_is_not_followed(
    database: Path, folder: Path, planted_at: str
) -> None:
    """The earlier command wrote ``.NAME.partial`` through sqlite3, which followed a
    link planted there: it overwrote the file linked to (SQLite takes an empty file for
    a new database) and left PATH a link to it."""
    victim = database if planted_at == "live database" else folder / "victim"
    if planted_at == "empty file":
        victim.touch()
    before = victim.read_bytes()
    target = folder / "petstore.db"
    (folder / ".petstore.db.partial").symlink_to(victim)
    # A process with a deadline: copying the live database into itself waits forever.
    made = subprocess.run(
        [sys.executable, "-m", "petstore", "db", "backup", str(target)],
        env={**os.environ, "PETSTORE_DATABASE_URL": f"sqlite:///{database}"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    assert not target.is_symlink()
    assert stat.S_ISREG(target.lstat().st_mode)
    assert animals_in(target) == ANIMALS
    assert victim.read_bytes() == before
    assert (folder / ".petstore.db.partial").is_symlink()  # not ours: left alone


@pytest.mark.parametrize("points_to", ["a file", "nowhere"])
def test_a_link_at_path_is_refused_and_left_as_it_was(
    database: Path, folder: Path, points_to: str
) -> None:
    victim = folder / "victim.txt"
    if points_to == "a file":
        victim.write_bytes(b"not to be overwritten")
    target = folder / "petstore.db"
    target.symlink_to(victim)
    refused = back_up(database, target)
    assert refused.exit_code == 1
    assert f"Error: {target} already exists: choose a new name" in refused.stderr
    assert target.is_symlink()
    assert os.readlink(target) == str(victim)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["petstore.db", *(["victim.txt"] if points_to == "a file" else [])]
    )
    if points_to == "a file":
        assert victim.read_bytes() == b"not to be overwritten"


def test_an_existing_path_is_refused_and_nothing_is_overwritten(
    database: Path, folder: Path
) -> None:
    target = folder / "petstore.db"
    assert back_up(database, target).exit_code == 0
    first = target.read_bytes()
    again = back_up(database, target)
    assert again.exit_code == 1
    assert again.stdout == ""
    assert again.stderr == (
        f"Error: {target} already exists: choose a new name (nothing was overwritten)\n"
    )
    assert target.read_bytes() == first
    assert [p.name for p in folder.iterdir()] == ["petstore.db"]


def test_a_file_made_at_path_during_the_copy_is_refused_and_not_replaced(
    database: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PATH did not exist when it was checked, and does when the copy is named: the
    earlier command's ``rename`` replaced it."""
    target = folder / "petstore.db"
    opened = backup.connect

    def open_and_compete(path: Path, *, readonly: bool) -> sqlite3.Connection:
        target.write_bytes(b"made by someone else during the copy")
        return opened(path, readonly=readonly)

    monkeypatch.setattr(backup, "connect", open_and_compete)
    refused = back_up(database, target)
    assert refused.exit_code == 1
    assert f"{target} already exists" in refused.stderr
    assert target.read_bytes() == b"made by someone else during the copy"
    assert [p.name for p in folder.iterdir()] == ["petstore.db"]  # the copy removed


@pytest.mark.parametrize("kind", ["file", "folder", "link", "dangling link"])
def test_placing_the_copy_never_replaces_what_is_at_path(tmp_path: Path, kind: str) -> None:
    copy, target, other = tmp_path / "copy", tmp_path / "target", tmp_path / "other"
    copy.write_bytes(b"copy")
    other.write_bytes(b"other")
    if kind == "file":
        target.write_bytes(b"theirs")
    elif kind == "folder":
        target.mkdir()
    else:
        target.symlink_to(other if kind == "link" else tmp_path / "nowhere")
    with pytest.raises(backup.BackupError, match="already exists"):
        backup.place(copy, target)
    assert other.read_bytes() == b"other"
    assert copy.read_bytes() == b"copy"
    if kind == "file":
        assert target.read_bytes() == b"theirs"


@pytest.mark.parametrize("mask", [0o000, 0o022, 0o002])
@pytest.mark.usefixtures("umask")
def test_the_copy_is_readable_by_its_owner_only_whatever_the_umask(
    database: Path, folder: Path, mask: int
) -> None:
    os.umask(mask)
    target = folder / "petstore.db"
    assert back_up(database, target).exit_code == 0
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_a_failed_copy_leaves_nothing(database: Path, folder: Path) -> None:
    database.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4096)  # a broken header
    target = folder / "petstore.db"
    failed = back_up(database, target)
    assert failed.exit_code == 1
    assert f"Error: backup of {database} failed:" in failed.stderr
    assert list(folder.iterdir()) == []


def test_a_path_with_control_characters_is_shown_escaped(database: Path, folder: Path) -> None:
    target = folder / "evil\x1b]0;pwned\x07.db"
    made = back_up(database, target)
    assert made.exit_code == 0, made.output
    assert "evil\\x1b]0;pwned\\x07.db: 25 animals" in made.stdout
    assert "\x1b" not in made.output
    assert back_up(database, target).stderr.count("\\x1b") == 1
