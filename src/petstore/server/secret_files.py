"""Settings held in files (``PETSTORE_SECRETS_DIR``), as Docker and Kubernetes mount
secrets: where :class:`petstore.server.config.Settings` finds them, and which files
it refuses."""

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


def sources(
    settings_cls: type[BaseSettings],
    init_settings: PydanticBaseSettingsSource,
    env_settings: PydanticBaseSettingsSource,
    dotenv_settings: PydanticBaseSettingsSource,
) -> tuple[PydanticBaseSettingsSource, ...]:
    """Arguments, then the environment, then the files of ``secrets_dir`` (from the
    arguments or ``PETSTORE_SECRETS_DIR``). A directory that does not exist is left
    out here and refused by :func:`existing_directory`, with its name: the library
    would only warn."""
    directory = os.environ.get("PETSTORE_SECRETS_DIR")
    if isinstance(init_settings, InitSettingsSource):
        directory = init_settings.init_kwargs.get("secrets_dir", directory)
    found: tuple[PydanticBaseSettingsSource, ...] = (init_settings, env_settings, dotenv_settings)
    if directory and Path(directory).is_dir():
        found += (SecretsSettingsSource(settings_cls, secrets_dir=directory),)
    return found


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
    Raises ValueError naming the directory or file and the fix."""
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
    for path in sorted(directory.iterdir()):
        if not path.name.lower().startswith("petstore_") or not path.is_file():
            continue
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
