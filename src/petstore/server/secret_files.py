"""Settings held in files (``PETSTORE_SECRETS_DIR``), as Docker and Kubernetes mount
secrets: where :class:`petstore.server.config.Settings` finds them
(:class:`FileSettings`), and which files it refuses.

A setting's file is a ``petstore_*`` entry of the directory. One that cannot be read
as a setting (:func:`unreadable`) is left out of the source, where pydantic-settings
would fail without naming it (a file not UTF-8), skip it with only a warning (a
broken link, a folder, a link leading out of the directory) or block (a FIFO), and
refused by :func:`check_owner_only` with its name.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

from pydantic import ValidationInfo
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SecretsSettingsSource,
)


class FileSettings(BaseSettings):
    """pydantic-settings' settings read from the arguments, then the environment, then
    the files of ``secrets_dir`` (from the arguments or ``PETSTORE_SECRETS_DIR``)."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The sources, in that order. A directory that does not exist is left out
        here and refused by :func:`existing_directory`, with its name: the library
        would only warn."""
        directory = os.environ.get("PETSTORE_SECRETS_DIR")
        if isinstance(init_settings, InitSettingsSource):
            directory = init_settings.init_kwargs.get("secrets_dir", directory)
        found: tuple[PydanticBaseSettingsSource, ...] = (
            init_settings,
            env_settings,
            dotenv_settings,
        )
        if directory and Path(directory).is_dir():
            found += (_SettingFiles(settings_cls, secrets_dir=directory),)
        return found


class _SettingFiles(SecretsSettingsSource):
    """pydantic-settings' secrets files, less the files :func:`unreadable` finds
    fault with (refused by :func:`check_owner_only`)."""

    @classmethod
    def find_case_path(cls, dir_path: Path, file_name: str, case_sensitive: bool) -> Path | None:
        """The file of ``dir_path`` named ``file_name``, None when there is none or
        it cannot be read as a setting."""
        try:
            path = super().find_case_path(dir_path, file_name, case_sensitive)
        except OSError:  # a directory that cannot be listed, refused by name too
            return None
        return None if path is None or unreadable(path, directory=dir_path) else path


def unreadable(path: Path, *, directory: Path) -> str | None:
    """Why the setting's file ``path`` of ``directory`` cannot be read as a setting,
    or None when it can: it names nothing, is no regular file (a folder, a FIFO
    would block the read), leads out of ``directory`` (pydantic-settings ignores
    such a file), cannot be read, or is not UTF-8 text."""
    try:
        target = path.resolve(strict=True)
    except (OSError, RuntimeError):  # RuntimeError: a loop of links before 3.13
        return f"{path} leads to no file (a broken symbolic link?)"
    if not target.is_file():
        return f"{path} is not a file"
    if directory.resolve() not in target.parents:
        return f"{path} leads out of {directory}: copy the file into it"
    try:
        target.read_bytes().decode()
    except OSError as exc:
        return f"{path} cannot be read: {exc.strerror}"
    except UnicodeDecodeError:
        return f"{path} is not UTF-8 text"
    return None


def existing_directory(value: object) -> object:
    """``secrets_dir`` as given, None when empty. Raises ValueError for a path that is
    not a directory."""
    if value in (None, ""):
        return None
    if not Path(str(value)).is_dir():
        raise ValueError(f"no such directory: {value}")
    return value


def check_owner_only(directory: Path | None, info: ValidationInfo) -> Path | None:
    """``directory`` (``secrets_dir``), once none of its setting files (named
    ``petstore_*``, any case) is writable by its group or others: whoever can write
    one chooses the cursor secret or the database the instance trusts. A symbolic
    link is judged by its target, as Kubernetes mounts secrets. Outside development
    (the ``environment`` already validated in ``info``; absent, it was invalid), the
    directory and each setting file must also be owned by the service's user or
    root, and the directory writable by no one else unless it is mounted read-only
    (as Kubernetes and systemd mount secrets): whoever can write the directory can
    plant a setting the operator never wrote (``petstore_trust_forwarded_headers``).
    Raises ValueError naming the directory or file and the fix, also for a setting's
    file that cannot be read as one (:func:`unreadable`)."""
    if directory is None:
        return None
    strict = info.data.get("environment") != "development"  # a StrEnum
    if strict:
        _check_owner(directory)
        mode = directory.stat().st_mode
        if mode & 0o022 and not _read_only(directory):
            raise ValueError(
                f"{directory} is writable by its group or others (mode {mode & 0o7777:o}), "
                f"so they can add a setting's file to it; make it writable by its owner "
                f"only: chmod go-w {directory}"
            )
    try:
        entries = sorted(directory.iterdir())
    except OSError as exc:
        raise ValueError(f"{directory} cannot be read: {exc.strerror}") from None
    for path in entries:
        if not path.name.lower().startswith("petstore_"):
            continue
        if (reason := unreadable(path, directory=directory)) is not None:
            raise ValueError(reason)
        mode = path.stat().st_mode
        if mode & 0o022:
            raise ValueError(
                f"{path} is writable by its group or others (mode {mode & 0o777:o}); "
                f"make it writable by its owner only: chmod go-w {path}"
            )
        if strict:
            _check_owner(path)
    return directory


def _check_owner(path: Path) -> None:
    """Raise ValueError when ``path`` (its target, for a link) is owned by neither
    the user this process runs as nor root."""
    owner, service = path.stat().st_uid, os.geteuid()
    if owner not in (service, 0):
        raise ValueError(
            f"{path} is owned by {_user(owner)}, not by the service's user "
            f"({_user(service)}) or root; give it to one of them: chown {service} {path}"
        )


def _user(uid: int) -> str:
    """``uid 10001 (petstore)``, or ``uid 10001`` for a uid without a name."""
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _read_only(directory: Path) -> bool:
    """Whether ``directory`` is on a file system mounted read-only."""
    return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
