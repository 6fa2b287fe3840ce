"""The served OpenAPI document and the offline docs pages (D12, D19).

The document is ``openapi.yaml`` in this package, reviewed by hand (spec first);
only its ``servers`` are filled from the settings. The docs page is Swagger UI 5
from the ``swagger-ui-py`` package's static files, so it works with no internet.
"""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from petstore.config import Settings
from petstore.pets import REPLACEMENT, SUNSET_HEADER


def openapi_document(settings: Settings) -> dict[str, Any]:
    """The OpenAPI 3.1 document with this deployment's servers (D19)."""
    text = files("petstore").joinpath("openapi.yaml").read_text(encoding="utf-8")
    document: dict[str, Any] = yaml.safe_load(text)
    document["servers"] = [
        {"url": "/v1", "description": "This deployment"},
        {"url": str(settings.base_url).rstrip("/"), "description": "Production"},
        {"url": str(settings.staging_base_url).rstrip("/"), "description": "Staging"},
    ]
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

_DEPRECATIONS_PAGE = f"""<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Petstore API: deprecations</title></head>
<body>
<h1>Deprecations</h1>
<h2 id="getPet">GET /v1/pets/{{petId}} (getPet)</h2>
<p>Deprecated since 2026-01-01. Removed on {SUNSET_HEADER} (the <code>Sunset</code>
header); from then on it answers <code>410 gone</code>.</p>
<p>Replacement: <code>{REPLACEMENT}</code>, for example
<code>GET /v1/pets?status=available</code>, following <code>Link: rel="next"</code>.</p>
</body>
</html>
"""


def routes(settings: Settings) -> list[Route | Mount]:
    """The routes of ``/v1/openapi.json``, ``/v1/docs`` and its assets."""
    document = json.dumps(openapi_document(settings), indent=2).encode()

    async def openapi_json(request: Request) -> Response:
        """The OpenAPI 3.1 document. No key needed (D12)."""
        return Response(document, media_type="application/json")

    async def docs_page(request: Request) -> Response:
        """The interactive docs page."""
        return HTMLResponse(_DOCS_PAGE)

    async def docs_init(request: Request) -> Response:
        return Response(_DOCS_INIT, media_type="text/javascript")

    async def deprecations(request: Request) -> Response:
        """What is deprecated, when it goes, and what replaces it (D14)."""
        return HTMLResponse(_DEPRECATIONS_PAGE)

    return [
        Route("/v1/openapi.json", openapi_json, methods=["GET"]),
        Route("/v1/docs", docs_page, methods=["GET"]),
        Route("/v1/docs/init.js", docs_init, methods=["GET"]),
        Route("/v1/docs/deprecations", deprecations, methods=["GET"]),
        Mount("/v1/docs/assets", StaticFiles(directory=_swagger_ui_assets())),
    ]
