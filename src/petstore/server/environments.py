"""Where an instance runs (:class:`Environment`), and what staging and production
refuse that development allows: the public cursor secret (D9), and a placeholder as
the public URL every link of theirs starts with (D19, :mod:`.http.links`)."""

from __future__ import annotations

from enum import StrEnum


class Environment(StrEnum):
    """Where an instance runs; staging and production refuse unsafe settings."""

    DEVELOPMENT = "development"
    STAGING = "staging"
    PRODUCTION = "production"


#: The cursor secret used when none is configured. Fine on a laptop, refused in
#: staging and production (cursors signed with a public secret can be forged).
DEFAULT_CURSOR_SECRET = "petstore-development-cursor-secret-not-for-production"  # noqa: S105

#: D19: the public URLs a deployment has until its operator sets its own.
PLACEHOLDER_BASE_URL = "https://petstore.example.com/v1"
PLACEHOLDER_STAGING_BASE_URL = "https://staging.petstore.example.com/v1"


def refusals(
    environment: Environment, *, cursor_secret: str, base_url: str, staging_base_url: str
) -> list[str]:
    """What ``environment`` refuses of these settings, one sentence each naming its
    variable; none in development. Outside it: a cursor secret that is the default
    or shorter than 32 characters, and the environment's own public URL
    (``base_url`` in production, ``staging_base_url`` in staging) left at its
    placeholder, with or without a final ``/``."""
    if environment is Environment.DEVELOPMENT:
        return []
    problems = []
    if cursor_secret == DEFAULT_CURSOR_SECRET or len(cursor_secret) < 32:
        problems.append(
            f"PETSTORE_CURSOR_SECRET must be set to a private value of at least 32 "
            f"characters in {environment.value} (the default is public)"
        )
    if environment is Environment.PRODUCTION:
        variable, url, placeholder = "PETSTORE_BASE_URL", base_url, PLACEHOLDER_BASE_URL
    else:
        variable, url = "PETSTORE_STAGING_BASE_URL", staging_base_url
        placeholder = PLACEHOLDER_STAGING_BASE_URL
    if url.rstrip("/") == placeholder:
        problems.append(
            f"{variable} must be set to this deployment's public URL (ending in /v1) in "
            f"{environment.value}: every Link header's URL starts with it, and the "
            f"default {placeholder} is a placeholder"
        )
    return problems
