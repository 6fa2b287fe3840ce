"""The docs page (offline Swagger UI), the deprecation page and the health checks."""

from __future__ import annotations

import re

import pytest
from starlette.testclient import TestClient

from tests.conftest import run_sql


def test_docs_page_loads_only_assets_served_here(client: TestClient) -> None:
    page = client.get("/v1/docs")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert sources, "the page loads its script and style"
    for source in sources:
        assert "//" not in source, f"{source} would leave the server"
        asset = client.get(f"/v1/{source}")
        assert asset.status_code == 200, source
        assert len(asset.content) > 100


def test_docs_init_points_at_the_served_document_and_no_validator(client: TestClient) -> None:
    script = client.get("/v1/docs/init.js").text
    assert 'url: "openapi.json"' in script
    assert "validatorUrl: null" in script


def test_swagger_ui_is_version_5_which_renders_openapi_3_1(client: TestClient) -> None:
    bundle = client.get("/v1/docs/assets/swagger-ui-bundle.js")
    assert bundle.status_code == 200
    assert "OpenAPI 3.1" in bundle.text or "openapi31" in bundle.text.lower()


def test_deprecation_page_names_the_replacement(client: TestClient) -> None:
    page = client.get("/v1/docs/deprecations")
    assert page.status_code == 200
    assert "GET /v1/pets" in page.text
    assert "status" in page.text
    assert "05 Dec 2030" in page.text


def test_the_deprecation_page_sets_only_code_in_code(client: TestClient) -> None:
    page = client.get("/v1/docs/deprecations").text
    codes = re.findall(r"<code>(.*?)</code>", page, flags=re.DOTALL)
    assert "GET /v1/pets" in codes
    assert codes, page
    for code in codes:
        assert not re.search(r"\b(with|the|for|from)\b", code), code
    assert "with the <code>status</code> filter" in page


def test_missing_docs_asset_is_a_404_error_body(client: TestClient) -> None:
    response = client.get("/v1/docs/assets/nope.js")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


@pytest.mark.parametrize(
    "asset",
    [
        "swagger-editor-bundle.js",
        "swagger-editor-bundle.js.map",
        "oauth2-redirect.html",
        "swagger-initializer.js",
        "swagger-ui.js",
        "index.css",
        "LICENSE",
        "favicon-32x32.png",
        "../static/swagger-ui.css",
    ],
)
def test_static_files_the_docs_page_does_not_load_are_not_served(
    client: TestClient, asset: str
) -> None:
    response = client.get(f"/v1/docs/assets/{asset}")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    assert response.json()["code"] == "not_found"


def test_the_docs_page_has_a_policy_allowing_only_this_server_and_the_deployments(
    client: TestClient,
) -> None:
    page = client.get("/v1/docs")
    assert page.headers.get_list("content-security-policy") == [
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self' https://petstore.example.com https://staging.petstore.example.com; "
        "form-action 'none'; base-uri 'none'; frame-ancestors 'none'"
    ]
    assert page.headers["x-frame-options"] == "DENY"
    assert client.get("/v1/docs/init.js").headers["content-security-policy"] == (
        "frame-ancestors 'none'"
    )


def test_healthz_answers_without_a_key(client: TestClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_answers_when_the_database_is_current(client: TestClient) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ready", "rateLimits": "ok"}


@pytest.mark.own_database
def test_readyz_is_503_when_the_schema_is_not_current(
    client: TestClient, database_url: str
) -> None:
    run_sql(database_url, "UPDATE alembic_version SET version_num = '0001'")
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["code"] == "unavailable"
    assert response.headers["retry-after"].isdigit()
