"""The docs pages in a real browser: Debian's chromium, headless, driven by Playwright
with the system browser (issue: docs in a real browser): the service's own /v1/docs,
and the docs site's HTTP reference opened from disk and from a web server (issue 64)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
import pytest
from playwright.sync_api import Browser, FrameLocator, Page, sync_playwright

from tests import ROOT, examples
from tests.conftest import LiveServer

CHROMIUM = shutil.which("chromium")
# Without the background-networking flags chromium calls home, which this network refuses.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None and not os.environ.get("CI"),
        reason="chromium is not installed (`make test` installs it with apt-get)",
    ),
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM, "chromium must be installed in CI"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


#: Records every Content-Security-Policy violation the page reports, as
#: "<directive> <blocked URI>", in window.cspViolations.
RECORD_VIOLATIONS = """
window.cspViolations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.cspViolations.push(`${event.violatedDirective} ${event.blockedURI}`);
});
"""


@pytest.fixture
def docs(browser: Browser, live_server: LiveServer) -> Iterator[tuple[Page, list[str]]]:
    """The docs page, loaded, and every URL the page requested."""
    page = browser.new_page()
    page.add_init_script(RECORD_VIOLATIONS)
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(f"{live_server.url}/v1/docs")
    page.wait_for_selector(".opblock", timeout=15_000)
    yield page, requested
    page.close()


def test_docs_page_renders_every_operation(docs: tuple[Page, list[str]]) -> None:
    page, _ = docs
    operations = examples.operations()
    assert page.locator(".opblock").count() == len(operations)
    for operation_id in (op.operation_id for op in operations):
        assert page.locator(f"#operations-pets-{operation_id}").count() == 1
    assert "Pet Store Service" in page.locator(".info .title").inner_text()


def test_docs_page_shows_get_pet_as_deprecated(docs: tuple[Page, list[str]]) -> None:
    page, _ = docs
    get_pet = page.locator("#operations-pets-getPet")
    assert "opblock-deprecated" in (get_pet.get_attribute("class") or "")
    assert page.locator(".opblock-deprecated").count() == 1


def test_docs_page_works_under_its_content_security_policy_with_no_violation(
    browser: Browser, live_server: LiveServer
) -> None:
    page = browser.new_page()
    page.add_init_script(RECORD_VIOLATIONS)
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    response = page.goto(f"{live_server.url}/v1/docs")
    assert response is not None
    policy = response.headers["content-security-policy"]
    assert policy.startswith("default-src 'none'; script-src 'self';")
    assert "frame-ancestors 'none'" in policy
    page.wait_for_selector(".opblock", timeout=15_000)
    page.click("#operations-pets-createPet .opblock-summary")  # opens models, examples
    page.wait_for_selector("#operations-pets-createPet .body-param", timeout=15_000)
    page.click("button.authorize")
    page.click("button.btn-done")
    assert page.evaluate("window.cspViolations") == []
    assert [text for text in console if "Content Security Policy" in text] == []
    page.close()


def test_docs_page_loads_nothing_from_outside_the_server(
    docs: tuple[Page, list[str]], live_server: LiveServer
) -> None:
    _, requested = docs
    server = urlsplit(live_server.url).netloc
    outside = [url for url in requested if urlsplit(url).netloc not in ("", server)]
    assert requested
    assert outside == []


def test_try_it_with_a_bearer_key_returns_200(
    docs: tuple[Page, list[str]], live_server: LiveServer
) -> None:
    page, _ = docs
    page.click("button.authorize")
    page.fill(".auth-container input", live_server.dev_key)
    page.click(".auth-btn-wrapper button.authorize")
    page.click("button.btn-done")
    page.click("#operations-pets-listPets .opblock-summary")
    # The page opens with "Try it out" already on (tryItOutEnabled).
    page.click("#operations-pets-listPets button.execute")
    status = page.locator(
        "#operations-pets-listPets .live-responses-table tr.response .response-col_status"
    )
    status.first.wait_for(timeout=15_000)
    assert status.first.inner_text().strip() == "200"
    assert page.evaluate("window.cspViolations") == []


# What the pages show: the document's examples, not values Swagger UI invents ---------

#: What Swagger UI shows where a document has no example (a string "string", a
#: status 0), and 2^63 - 1 as a browser reads it.
INVENTED = ('"string"', '"status": 0', "9223372036854776000")


def first_example(document: dict[str, Any], *names: str) -> Any:
    """The value of the first example of createPet's media type at ``names`` (from
    the operation on), its ``$ref`` followed."""
    node: Any = document["paths"]["/pets"]["post"]
    for name in names:
        node = node[name]
    example = next(iter(node["examples"].values()))
    if "$ref" in example:
        example = document["components"]["examples"][example["$ref"].rsplit("/", 1)[1]]
    return example["value"]


REQUEST = ("requestBody", "content", "application/json")
BAD_REQUEST = ("responses", "400", "content", "application/json")


def open_every_operation(page: Page | FrameLocator) -> None:
    for operation in examples.operations():
        page.locator(f"#operations-pets-{operation.operation_id} .opblock-summary").click()
    page.locator("#operations-pets-createPet .responses-table").first.wait_for(timeout=15_000)


def test_docs_page_shows_the_documents_examples_not_invented_values(
    docs: tuple[Page, list[str]], live_server: LiveServer
) -> None:
    """createPet's request body is the document's first example (Rex, ready to send
    with Try it out), its 400 the exact message the service answers; no invented
    value anywhere, and the Name model leads with its description, its patterns
    folded away."""
    page, _ = docs
    document = httpx2.get(f"{live_server.url}/v1/openapi.json").json()
    open_every_operation(page)
    body = page.locator("#operations-pets-createPet textarea.body-param__text").input_value()
    assert json.loads(body) == first_example(document, *REQUEST)
    bad_request = first_example(document, *BAD_REQUEST)
    shown = page.locator("#operations-pets-createPet tr.response[data-code='400']").inner_text()
    assert bad_request["message"] in shown
    text = page.locator("#swagger-ui").inner_text()
    assert [invented for invented in INVENTED if invented in text] == []
    name = (
        page.locator("section.models article")
        .filter(has=page.locator(".json-schema-2020-12__title", has_text="Name"))
        .first
    )
    name.locator(".json-schema-2020-12-accordion").first.click()
    assert "1 to 100 characters" in name.inner_text()
    assert "\\u0300" not in name.inner_text()  # the Unicode pattern, folded under anyOf


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The docs site as ``make docs`` builds it (strict), in a folder of this module."""
    built = tmp_path_factory.mktemp("site")
    strict = ("-b", "html", "-n", "-W", "--keep-going", "-q")
    build = [sys.executable, "-m", "sphinx", *strict, str(ROOT / "docs"), str(built)]
    subprocess.run(build, check=True, cwd=ROOT)
    return built


class _QuietFiles(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def site_server(site: Path) -> Iterator[str]:
    """The built site served over HTTP on loopback, as a web server would: its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietFiles, directory=site))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.parametrize("opened", ["from disk", "from a server"])
def test_the_sites_reference_shows_create_pet_with_its_example(
    browser: Browser, site: Path, request: pytest.FixtureRequest, opened: str
) -> None:
    """The HTTP reference of the docs site, opened as the README says (from disk,
    where a browser fetches nothing: Swagger UI said "Failed to load API
    definition.") and from a web server: createPet shows the document's example,
    and no error, no invented value."""
    if opened == "from disk":
        url = (site / "reference" / "http-api.html").as_uri()
    else:
        url = f"{request.getfixturevalue('site_server')}/reference/http-api.html"
    document = json.loads((site / "openapi" / "openapi.json").read_text(encoding="utf-8"))
    page = browser.new_page()
    failures: list[str] = []
    page.on("pageerror", lambda error: failures.append(str(error)))
    page.goto(url)
    frame = page.frame_locator("iframe")
    frame.locator(".opblock").first.wait_for(timeout=15_000)
    open_every_operation(frame)
    create = frame.locator("#operations-pets-createPet")
    request_body = create.locator(".opblock-section-request-body").inner_text()
    rex = first_example(document, *REQUEST)
    assert json.loads(request_body[request_body.index("{") :]) == rex
    bad_request = first_example(document, *BAD_REQUEST)
    assert bad_request["message"] in create.locator("tr.response[data-code='400']").inner_text()
    text = frame.locator("#swagger-ui").inner_text()
    assert "Failed to load API definition" not in text
    assert frame.locator(".errors-wrapper").count() == 0, text[:2000]
    assert [invented for invented in INVENTED if invented in text] == []
    assert failures == []
    page.close()
