"""The docs site: Sphinx with MyST (the Markdown of docs/) and autodoc (the Python
client's reference from its docstrings). ``make docs`` builds it into build/docs with
every warning an error and every cross-reference checked (docs/contributing.md).

The HTTP API page shows the OpenAPI document the service serves (``openapi_document``,
what ``petstore openapi`` prints) in the Swagger UI files the service's own docs page
loads, all written next to the pages at the end of the build: nothing is fetched.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import swagger_ui
from sphinx.application import Sphinx

from petstore import __version__
from petstore.server.config import Settings
from petstore.server.http.docs import ASSET_FILES, openapi_document

project = "Petstore"
release = version = __version__
root_doc = "README"
extensions = ["myst_parser", "sphinx.ext.autodoc"]

# Every page's headings get GitHub's anchors, so that links such as
# `run.md#2-settings` work on the site as on GitHub, and are checked.
myst_heading_anchors = 4

# nitpicky: a reference in a docstring that finds nothing is an error (make docs runs
# sphinx-build -n -W). Other projects' objects are not checked: that would need their
# inventories, fetched over the network.
nitpicky = True
# Private names (a TypeVar in a signature) are no reference targets either.
nitpick_ignore_regex = [
    (r"py:.*", r"(httpx|msgspec|anyio|collections\.abc|typing)\..*"),
    (r"py:.*", r".*\._\w+"),
]
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
add_module_names = False

html_theme = "furo"
html_title = f"Petstore {__version__}"
html_show_copyright = False

#: Where the HTTP API page finds the rendered document, relative to the site's root.
OPENAPI_DIR = "openapi"

_OPENAPI_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Petstore API v{version}</title>
<link rel="stylesheet" href="swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="swagger-ui-bundle.js"></script>
<script>
SwaggerUIBundle({{url: "openapi.json", dom_id: "#swagger-ui", deepLinking: true,
                  validatorUrl: null, supportedSubmitMethods: []}});
</script>
</body>
</html>
"""


def write_generated_pages(app: Sphinx, exception: Exception | None) -> None:
    """The served OpenAPI document, Swagger UI's two files the service's docs page
    loads, and the page that starts it, into the site's ``openapi/`` ("Try it out"
    off: no service answers at the site); and the home page as ``index.html``."""
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / OPENAPI_DIR
    target.mkdir(exist_ok=True)
    assets = Path(swagger_ui.__file__).with_name("static")
    for name in sorted(ASSET_FILES):
        shutil.copyfile(assets / name, target / name)
    document = openapi_document(Settings())
    (target / "openapi.json").write_text(json.dumps(document, indent=2), encoding="utf-8")
    page = _OPENAPI_PAGE.format(version=document["info"]["version"])
    (target / "index.html").write_text(page, encoding="utf-8")
    # The home page is docs/README.md, as GitHub shows the folder; a site's is index.html.
    shutil.copyfile(Path(app.outdir) / f"{root_doc}.html", Path(app.outdir) / "index.html")


def setup(app: Sphinx) -> None:
    app.connect("build-finished", write_generated_pages)
