"""The served OpenAPI document: valid OpenAPI 3.1, the interface exactly, and every
decision stated (issue: spec first). Responses are checked against it by every test
through the ``client`` fixture; these tests pin the document itself."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from openapi_spec_validator import validate
from starlette.testclient import TestClient

from petstore.cli.main import main


@pytest.fixture
def document(client: TestClient) -> dict[str, Any]:
    response = client.get("/v1/openapi.json")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body: dict[str, Any] = response.json()
    return body


def test_document_is_valid_openapi_3_1(document: dict[str, Any]) -> None:
    validate(document)
    assert document["openapi"].startswith("3.1.")
    assert document["info"]["version"] == "1.0.0"


def test_servers_list_production_and_staging_base_urls(document: dict[str, Any]) -> None:
    urls = [server["url"] for server in document["servers"]]
    assert "https://petstore.example.com/v1" in urls
    assert "https://staging.petstore.example.com/v1" in urls
    assert all(url.endswith("/v1") for url in urls)


def test_operations_have_the_interface_ids_and_bearer_security(
    document: dict[str, Any],
) -> None:
    paths = document["paths"]
    assert paths["/pets"]["get"]["operationId"] == "listPets"
    assert paths["/pets"]["post"]["operationId"] == "createPet"
    assert paths["/pets/{petId}"]["get"]["operationId"] == "getPet"
    assert paths["/pets/{petId}"]["get"]["deprecated"] is True
    scopes = {"listPets": "pets:read", "createPet": "pets:write", "getPet": "pets:read"}
    for operation in (paths["/pets"]["get"], paths["/pets"]["post"], paths["/pets/{petId}"]["get"]):
        assert operation["security"] == [{"bearerAuth": [scopes[operation["operationId"]]]}]
        assert {"401", "403"} <= operation["responses"].keys()  # D21
    scheme = document["components"]["securitySchemes"]["bearerAuth"]
    assert scheme == {**scheme, "type": "http", "scheme": "bearer"}


def test_schemas_state_fields_formats_and_decisions(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    new_pet, pet = schemas["NewPet"], schemas["Pet"]
    assert new_pet["required"] == ["name", "categoryId"]
    assert new_pet["additionalProperties"] is False
    assert new_pet["properties"]["status"]["default"] == "available"
    assert set(pet["required"]) == {"id", "name", "categoryId", "status"}  # D6
    assert pet["properties"]["id"]["format"] == "int64"
    assert schemas["CategoryId"] == {
        **schemas["CategoryId"],
        "type": "integer",
        "format": "int64",
        "minimum": 1,
        "maximum": 9223372036854775807,
    }
    assert schemas["Name"]["minLength"] == 1
    assert schemas["Name"]["maxLength"] == 100
    assert schemas["PetStatus"]["enum"] == ["available", "pending", "sold"]
    assert set(schemas["Error"]["required"]) == {"code", "message", "status"}


def test_list_parameters_state_bounds_default_and_cursor(document: dict[str, Any]) -> None:
    parameters = {p["name"]: p for p in document["paths"]["/pets"]["get"]["parameters"]}
    limit = parameters["limit"]["schema"]
    assert (limit["minimum"], limit["maximum"], limit["default"]) == (1, 100, 20)
    assert parameters["status"]["schema"] == {"$ref": "#/components/schemas/PetStatus"}
    assert parameters["cursor"]["required"] is False
    assert "Link" in document["paths"]["/pets"]["get"]["responses"]["200"]["headers"]
    pet_id = document["paths"]["/pets/{petId}"]["get"]["parameters"][0]
    assert pet_id["schema"] == {"type": "integer", "format": "int64"}


@pytest.mark.parametrize(
    ("path", "method", "statuses"),
    [
        ("/pets", "get", {"200", "400", "401", "403", "405", "429", "500", "503"}),
        (
            "/pets",
            "post",
            {"201", "400", "401", "403", "405", "409", "413", "415", "422", "429", "500", "503"},
        ),
        (
            "/pets/{petId}",
            "get",
            {"200", "400", "401", "403", "404", "405", "410", "429", "500", "503"},
        ),
    ],
)
def test_every_response_status_is_documented_with_the_error_schema(
    document: dict[str, Any], path: str, method: str, statuses: set[str]
) -> None:
    responses = document["paths"][path][method]["responses"]
    assert set(responses) == statuses
    components = document["components"]["responses"]
    for status, response in responses.items():
        if status.startswith("2"):
            continue
        response = (
            components[response["$ref"].rsplit("/", 1)[1]] if "$ref" in response else response
        )
        schema = response["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/Error"}


def test_get_pet_documents_deprecation_and_sunset_headers(document: dict[str, Any]) -> None:
    headers = document["paths"]["/pets/{petId}"]["get"]["responses"]["200"]["headers"]
    assert {"Deprecation", "Sunset", "Link"} <= set(headers)


def test_document_needs_no_key_and_cli_prints_the_same(client: TestClient) -> None:
    served = client.get("/v1/openapi.json").json()
    printed = CliRunner().invoke(main, ["openapi"])
    assert printed.exit_code == 0
    assert json.loads(printed.stdout) == served


def test_document_declares_no_json_schema_dialect_and_names_a_contact(
    document: dict[str, Any],
) -> None:
    """A declared dialect makes Prism skip every body validation; OpenAPI 3.1's
    default needs none."""
    assert "jsonSchemaDialect" not in document
    assert {"name", "url", "email"} <= document["info"]["contact"].keys()


def test_int64_maxima_are_written_exactly_where_a_browser_shows_them(
    document: dict[str, Any],
) -> None:
    """JavaScript reads 9223372036854775807 as 9223372036854776000, so the docs page
    would show that; each int64 bound is also spelled out in its description."""
    schemas = document["components"]["schemas"]
    pet_id = document["paths"]["/pets/{petId}"]["get"]["parameters"][0]
    for described in (schemas["CategoryId"], schemas["Pet"]["properties"]["id"], pet_id):
        assert "9223372036854775807" in described["description"]
