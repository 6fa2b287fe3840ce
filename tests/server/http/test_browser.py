"""The docs page in a real browser: Debian's chromium, headless, driven by Playwright
with the system browser (issue: docs in a real browser)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests import examples
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
