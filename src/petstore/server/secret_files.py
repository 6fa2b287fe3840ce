"""Settings held in files (``PETSTORE_SECRETS_DIR``), as Docker and Kubernetes mount
secrets: where :class:`petstore.server.config.Settings` finds them, and which files
it refuses."""

from __future__ import annotations

import os
from pathlib import Path

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


def check_owner_only(directory: Path | None, names: set[str]) -> Path | None:
    """``directory``, once none of its setting files (``names``, lower case) is
    writable by its group or others: whoever can write one chooses the cursor secret
    or the database the instance trusts. A symbolic link is judged by its target, as
    Kubernetes mounts secrets. Raises ValueError naming the file and the fix."""
    if directory is None:
        return None
    for path in sorted(directory.iterdir()):
        if path.name.lower() not in names or not path.is_file():
            continue
        mode = path.stat().st_mode
        if mode & 0o022:
            raise ValueError(
                f"{path} is writable by its group or others (mode {mode & 0o777:o}); "
                f"make it writable by its owner only: chmod go-w {path}"
            )
    return directory
