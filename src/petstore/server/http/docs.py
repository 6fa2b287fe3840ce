"""The served OpenAPI document and the offline docs pages (D12, D19).

The document is ``openapi.yaml`` in this package, reviewed by hand (spec first);
only its ``servers`` are filled from the settings. The docs page is Swagger UI 5
from the ``swagger-ui-py`` package's static files, so it works with no internet.

The page carries a Content-Security-Policy of its own (:func:`docs_policy`): scripts,
styles and images from this server only (images also as ``data:`` URLs, which
Swagger UI's stylesheet uses), requests to this server and the configured
deployments, nothing else; and of the package's static files only the two the page
loads are served (:data:`ASSET_FILES`).
"""

from __future__ import annotations

import copy
import functools
import json
from email.utils import format_datetime
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml
from starlette.staticfiles import StaticFiles

from petstore.server import errors
from petstore.server.config import Settings
from petstore.server.http.exchange import Header, Request, Response
from petstore.server.rules.pets import SUNSET

HTML = b"text/html; charset=utf-8"
JAVASCRIPT = b"text/javascript; charset=utf-8"
#: Where Swagger UI's static files are served.
ASSETS = "/v1/docs/assets"
#: The files of Swagger UI's static folder that the docs page loads: the only ones
#: served (the editor bundles, source maps and OAuth2 redirect page are not).
ASSET_FILES = frozenset({"swagger-ui.css", "swagger-ui-bundle.js"})


def openapi_document(settings: Settings) -> dict[str, Any]:
    """The OpenAPI 3.1 document with this deployment's servers (D19): a copy of its
    own for each call, so no caller can change another's."""
    document = copy.deepcopy(_reviewed_document())
    document["servers"] = [
        {"url": "/v1", "description": "This deployment"},
        {"url": str(settings.base_url).rstrip("/"), "description": "Production"},
        {"url": str(settings.staging_base_url).rstrip("/"), "description": "Staging"},
    ]
    return document


@functools.cache
def _reviewed_document() -> dict[str, Any]:
    """``openapi.yaml`` as shipped, read once (with libyaml's parser where PyYAML has
    it: the pure-Python one takes ten times as long, on every app built)."""
    text = files("petstore").joinpath("openapi.yaml").read_text(encoding="utf-8")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    document: dict[str, Any] = yaml.load(text, Loader=loader)  # noqa: S506 (a safe loader)
    return document


def _swagger_ui_assets() -> Path:
    import swagger_ui

    return Path(swagger_ui.__file__).with_name("static")


# Relative links: the page lives at /v1/docs, so "docs/assets/x" is /v1/docs/assets/x.
_DOCS_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Petstore API v1.0.0</title>
<link rel="stylesheet" href="docs/assets/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="docs/assets/swagger-ui-bundle.js"></script>
<script src="docs/init.js"></script>
</body>
</html>
"""

# validatorUrl null: Swagger UI would otherwise load a badge from the internet.
_DOCS_INIT = """window.ui = SwaggerUIBundle({
  url: "openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  validatorUrl: null,
  tryItOutEnabled: true
});
"""

_SUNSET = format_datetime(SUNSET, usegmt=True)
_DEPRECATIONS_PAGE = f"""<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Petstore API: deprecations</title></head>
<body>
<h1>Deprecations</h1>
<h2 id="getPet">GET /v1/pets/{{petId}} (getPet)</h2>
<p>Deprecated since 2026-01-01. Removed on {_SUNSET} (the <code>Sunset</code>
header); from then on it answers <code>410 gone</code>.</p>
<p>Replacement: <code>GET /v1/pets</code> with the <code>status</code> filter, for example
<code>GET /v1/pets?status=available</code>, following <code>Link: rel="next"</code>.</p>
</body>
</html>
"""


def docs_policy(settings: Settings) -> str:
    """The Content-Security-Policy of the docs page (CSP Level 3): only what Swagger
    UI needs, as checked in a real browser (tests/server/http/test_browser.py). "Try it out"
    may call this server and the production and staging base URLs of ``settings``
    (the document's ``servers``, D19)."""
    origins = sorted(
        {f"{url.scheme}://{url.host}" + (f":{url.port}" if url.port not in (80, 443) else "")
         for url in (settings.base_url, settings.staging_base_url)}
    )  # fmt: skip
    return "; ".join(
        (
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self' data:",
            f"connect-src 'self' {' '.join(origins)}",
            "form-action 'none'",
            "base-uri 'none'",
            "frame-ancestors 'none'",
        )
    )


class DocsPages:
    """``/v1/openapi.json`` (no key needed, D12), the interactive docs page
    ``/v1/docs`` with its script and assets, and the deprecations page (D14)."""

    def __init__(self, settings: Settings) -> None:
        # UTF-8 as it is: the Name pattern holds characters beyond U+FFFF, which as
        # \u escapes would be surrogate pairs that YAML readers of JSON refuse.
        self._document = json.dumps(
            openapi_document(settings), indent=2, ensure_ascii=False
        ).encode()
        self._assets = StaticFiles(directory=_swagger_ui_assets())
        self._policy: Header = (b"content-security-policy", docs_policy(settings).encode())

    async def openapi_json(self, request: Request, response: Response) -> None:
        """The OpenAPI 3.1 document of this deployment."""
        await response.respond(200, self._document)

    async def docs_page(self, request: Request, response: Response) -> None:
        """The interactive docs page (Swagger UI, no internet needed), under its own
        Content-Security-Policy instead of the API's ``frame-ancestors 'none'``."""
        response.drop_header(b"content-security-policy")
        await response.respond(200, _DOCS_PAGE.encode(), [self._policy], content_type=HTML)

    async def docs_init(self, request: Request, response: Response) -> None:
        """The script that starts Swagger UI on the document."""
        await response.respond(200, _DOCS_INIT.encode(), content_type=JAVASCRIPT)

    async def deprecations(self, request: Request, response: Response) -> None:
        """What is deprecated, when it goes, and what replaces it (D14)."""
        await response.respond(200, _DEPRECATIONS_PAGE.encode(), content_type=HTML)

    async def assets(self, request: Request, response: Response) -> None:
        """The static files of Swagger UI the page loads (:data:`ASSET_FILES`), under
        :data:`ASSETS`; raises NotFound for any other."""
        if request.path_param not in ASSET_FILES:
            raise errors.NotFound("no such path; the API lives under /v1 (see /v1/docs)")
        await response.forward(self._assets, mounted_at=ASSETS)
