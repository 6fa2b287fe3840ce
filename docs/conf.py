"""The docs site: Sphinx with MyST (the Markdown of docs/) and autodoc (the Python
client's reference from its docstrings). ``make docs`` builds it into build/docs with
every warning an error and every cross-reference checked (docs/contributing.md).

The HTTP API page shows the OpenAPI document the service serves (``openapi_document``,
what ``petstore openapi`` prints) in the Swagger UI files the service's own docs page
loads, all written next to the pages at the end of the build: nothing is fetched, so
the page works opened from disk (``file://``) as from a server.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import swagger_ui
from sphinx.application import Sphinx

from petstore import __version__
from petstore.server.config import Settings
from petstore.server.http.docs import ASSET_FILES, openapi_document

# code_facts.py, beside this file: the settings reference and the list of migrations.
sys.path.insert(0, str(Path(__file__).parent))

project = "Petstore"
release = version = __version__
root_doc = "README"
extensions = ["myst_parser", "sphinx.ext.autodoc", "code_facts"]
# Definition lists (`term` then `: definition`): what a wide table would clip.
myst_enable_extensions = ["deflist"]

# A code block says its language (```sh, ```python, ```text); one that does not is
# shown plain, never guessed (Pygments read a source tree's "with" as Python).
highlight_language = "none"

# Every page's headings get GitHub's anchors, so that links such as
# `run.md#settings` work on the site as on GitHub, and are checked.
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
# Tables wrap their cells, code included, within the page's width instead of
# scrolling out of it.
html_static_path = ["_static"]
html_css_files = ["petstore.css"]

#: Where the HTTP API page finds the rendered document, relative to the site's root.
OPENAPI_DIR = "openapi"

# The document is in the page: a browser fetches nothing from a file:// page
# ("Failed to load API definition."). Swagger UI resolves the document's $refs against
# its URL, and fails for any URL but http(s) (swagger-api/swagger-ui#9891): the URL it
# is given is the one production serves the document at, which it links under the
# title; it is never fetched.
_OPENAPI_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Petstore API v{version}</title>
<link rel="stylesheet" href="swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script id="openapi-document" type="application/json">{document}</script>
<script src="swagger-ui-bundle.js"></script>
<script>
const ui = SwaggerUIBundle({{dom_id: "#swagger-ui", deepLinking: true, validatorUrl: null,
                            supportedSubmitMethods: []}});
ui.specActions.updateUrl({url});
ui.specActions.updateSpec(document.getElementById("openapi-document").textContent);
</script>
</body>
</html>
"""


def openapi_page(document: dict[str, Any], *, url: str) -> str:
    """The page that shows ``document`` in Swagger UI, ``url`` given as its own
    ("Try it out" off: no service answers at the site). Both are JSON in the page's
    scripts, each ``<`` escaped (``\\u003c``) so that no string can end or comment
    out a script element."""
    text, url_text = (
        json.dumps(value, indent=2, ensure_ascii=False).replace("<", "\\u003c")
        for value in (document, url)
    )
    return _OPENAPI_PAGE.format(version=document["info"]["version"], document=text, url=url_text)


def write_generated_pages(app: Sphinx, exception: Exception | None) -> None:
    """The served OpenAPI document, Swagger UI's two files the service's docs page
    loads, and the page that shows the document in them (:func:`openapi_page`), into
    the site's ``openapi/``; and the home page as ``index.html``."""
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / OPENAPI_DIR
    target.mkdir(exist_ok=True)
    assets = Path(swagger_ui.__file__).with_name("static")
    for name in sorted(ASSET_FILES):
        shutil.copyfile(assets / name, target / name)
    settings = Settings()
    document = openapi_document(settings)
    # As the service serves it: UTF-8, the Name pattern's characters beyond U+FFFF
    # as they are.
    text = json.dumps(document, indent=2, ensure_ascii=False)
    (target / "openapi.json").write_text(text, encoding="utf-8")
    production = f"{str(settings.base_url).rstrip('/')}/openapi.json"
    (target / "index.html").write_text(openapi_page(document, url=production), encoding="utf-8")
    # The home page is docs/README.md, as GitHub shows the folder; a site's is index.html.
    shutil.copyfile(Path(app.outdir) / f"{root_doc}.html", Path(app.outdir) / "index.html")


def setup(app: Sphinx) -> None:
    app.connect("build-finished", write_generated_pages)
