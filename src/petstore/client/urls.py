"""The base URL a client is given (``http(s)://HOST[:PORT]/v1``): what is refused
before httpx sees it (:func:`base_url`). Every message names a URL through
:func:`petstore.text.printable_url`, never with its user name and password."""

from __future__ import annotations

import httpx

from petstore.text import printable, printable_url


def base_url(url: str) -> str:
    """``url`` without its trailing slashes, as a client's base. Raises ValueError
    when it is not ``http(s)://``, holds a user name or password (``user:password@``:
    httpx would send them as Basic credentials in place of the API key, and log
    them), names the pets collection (ends in ``/v1/pets``) rather than the base, or
    cannot be parsed (a port that is not a number)."""
    shown = printable_url(url)
    if not url.lower().startswith(("http://", "https://")):
        raise ValueError(
            f"{shown} is not an http:// or https:// URL; e.g. http://127.0.0.1:8000/v1"
        )
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:  # its message quotes a host or a port, no user-info
        raise ValueError(f"{shown} is not a URL: {printable(str(exc))}") from None
    if parsed.userinfo:
        raise ValueError(
            f"{shown} holds a user name or password (shown as ***), which the service does "
            "not take: its one credential is the API key. Remove the part before the @"
        )
    base = url.rstrip("/")
    if base.endswith("/v1/pets"):
        raise ValueError(
            f"{shown} is the pets collection; pass the base URL ending in /v1 "
            f"({printable_url(base.removesuffix('/pets'))})"
        )
    return base
