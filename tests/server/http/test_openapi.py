"""The served OpenAPI document: valid OpenAPI 3.1, the interface exactly, and every
decision stated (issue: spec first). Responses are checked against it by every test
through the ``client`` fixture; these tests pin the document itself.

The document is written by hand, for people; the rules it states are written once,
in the code (:mod:`petstore.schemas`, :mod:`petstore.server.rules.pagination`). The
tests here compare the two, so neither can drift from the other: no bound of a rule
is copied into this file.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Annotated, Any

import msgspec
import pytest
from click.testing import CliRunner
from openapi_spec_validator import validate
from starlette.testclient import TestClient

from petstore.cli.main import main
from petstore.schemas import (
    CATEGORY_ID_MAX,
    CATEGORY_ID_MIN,
    DEFAULT_STATUS,
    NAME_MAX_LENGTH,
    NAME_MIN_LENGTH,
    NEW_PET_MEMBERS,
    NEW_PET_REQUIRED,
    NewPet,
    Pet,
    PetStatus,
    name_problem,
)
from petstore.server.rules import pagination
from tests import examples

#: The keywords of a JSON Schema that constrain a value (``format`` and the prose aside).
CONSTRAINTS = ("type", "minLength", "maxLength", "minimum", "maximum", "enum", "default")
#: The range of an integer ``format`` (OpenAPI 3.1, Data Types: signed 32 and 64 bits):
#: the document states an int64 bound by its format alone, since a browser shows
#: 2^63 - 1 written as a number rounded (test_openapi_examples.py).
FORMAT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


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


def test_every_operation_can_be_refused_401_and_403_under_bearer_security(
    document: dict[str, Any],
) -> None:
    """D21. Each operation's id, scope and the rest are the route table's
    (test_operations.py); here, what every one of them answers besides."""
    operations = [
        item[method]
        for item in document["paths"].values()
        for method in ("get", "put", "post", "delete", "patch")
        if method in item
    ]
    assert len(operations) == len(examples.operations())
    for operation in operations:
        [requirement] = operation["security"]
        assert list(requirement) == ["bearerAuth"]
        assert {"401", "403"} <= operation["responses"].keys()
    scheme = document["components"]["securitySchemes"]["bearerAuth"]
    assert scheme == {**scheme, "type": "http", "scheme": "bearer"}


def resolved(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every ``$ref`` (``#/...``, into ``document``) replaced by what it
    names; the keywords written beside a ``$ref`` (a ``default``) win."""
    while "$ref" in schema:
        target: Any = document
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def bounds(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """The :data:`CONSTRAINTS` of ``schema`` (references into ``document`` resolved),
    a ``minimum`` and ``maximum`` its integer ``format`` states when the schema names
    none (:data:`FORMAT_RANGES`), and those of each branch of an ``anyOf`` or
    ``oneOf`` (a member that may be null), by the branch's ``type``: what a value
    must be, wherever it is stated."""
    schema = resolved(document, schema)
    found: dict[str, Any] = {k: schema[k] for k in CONSTRAINTS if k in schema}
    if schema.get("type") == "integer" and schema.get("format") in FORMAT_RANGES:
        low, high = FORMAT_RANGES[schema["format"]]
        found.setdefault("minimum", low)
        found.setdefault("maximum", high)
    for combinator in ("anyOf", "oneOf"):
        for branch in schema.get(combinator, []):
            stated = bounds(document, branch)
            found[f"{combinator}:{stated.get('type', stated.get('enum'))}"] = stated
    return found


def enforced_schema(struct: type[msgspec.Struct]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The JSON Schema of what the decoder of ``struct`` accepts, as msgspec derives it
    from the struct's annotations, and the document its ``$ref``s point into."""
    document = msgspec.json.schema(struct)
    return resolved(document, document), document


def test_new_pet_schema_states_the_rules_the_service_enforces(document: dict[str, Any]) -> None:
    """The served NewPet against the code: the bounds of ``petstore.schemas`` (which
    the fast parser reads) and the NewPet struct the body is decoded into."""
    served = resolved(document, document["components"]["schemas"]["NewPet"])
    enforced, enforced_document = enforced_schema(NewPet)
    assert served["additionalProperties"] is enforced["additionalProperties"] is False  # D4
    assert served["required"] == enforced["required"] == list(NEW_PET_REQUIRED)
    assert list(served["properties"]) == list(enforced["properties"]) == list(NEW_PET_MEMBERS)
    for member in NEW_PET_MEMBERS:
        ours = bounds(document, served["properties"][member])
        theirs = bounds(enforced_document, enforced["properties"][member])
        # Every bound the struct enforces is stated, with its value, inside anyOf too.
        assert {k: ours.get(k) for k in theirs} == theirs, member
    name = resolved(document, served["properties"]["name"])
    assert (name["minLength"], name["maxLength"]) == (NAME_MIN_LENGTH, NAME_MAX_LENGTH)  # D2
    assert f"{NAME_MIN_LENGTH} to {NAME_MAX_LENGTH} characters" in name["description"]
    category = bounds(document, served["properties"]["categoryId"])
    assert (category["minimum"], category["maximum"]) == (CATEGORY_ID_MIN, CATEGORY_ID_MAX)  # D3
    assert resolved(document, served["properties"]["categoryId"])["format"] == "int64"
    status = resolved(document, served["properties"]["status"])
    assert status["enum"] == [status.value for status in PetStatus]
    assert status["default"] == DEFAULT_STATUS.value  # D1


def test_the_bounds_compared_include_those_inside_any_of() -> None:
    """An optional member is ``anyOf`` its type and null in msgspec's schema: the
    comparison above must see a bound stated inside a branch, and its absence."""
    enforced = msgspec.json.schema(Annotated[str, msgspec.Meta(max_length=30)] | None)
    stated = {"anyOf": [{"type": "string"}, {"type": "null"}]}
    assert bounds(enforced, enforced)["anyOf:string"] == {"type": "string", "maxLength": 30}
    assert bounds({}, stated)["anyOf:string"] == {"type": "string"}


def test_pet_schema_states_the_fields_of_a_returned_pet(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    pet = schemas["Pet"]
    members = [field.encode_name for field in msgspec.structs.fields(Pet)]
    assert list(pet["properties"]) == members
    assert pet["required"] == members  # D6
    assert pet["additionalProperties"] is False
    assert pet["properties"]["id"]["format"] == "int64"
    assert bounds(document, pet["properties"]["id"])["maximum"] == CATEGORY_ID_MAX  # D5
    assert set(schemas["Error"]["required"]) == {"code", "message", "status"}


def test_name_patterns_agree_with_the_name_rule_on_every_character(
    document: dict[str, Any],
) -> None:
    """The patterns of Name (D2), under its ``anyOf`` (a name is valid when one
    matches), against ``schemas.name_problem``, the rule the service applies, for
    every code point alone and after a visible one: a schema-valid name is never
    refused, a refused one never schema-valid (issue 53: schemathesis sent U+E077F,
    which the service refused and a pattern of the Basic Multilingual Plane let
    through). Python's ``re`` reads each pattern as ECMA-262 with the ``u`` flag
    does, as JSON Schema means it: code points, its ranges beyond U+FFFF written as
    the characters themselves, ``\\s`` and ``\\S`` only together; the anchors become
    a full match, since Python's ``$`` also matches before a final newline."""
    name = document["components"]["schemas"]["Name"]
    assert "pattern" not in name  # under anyOf, where Swagger UI shows it folded
    rules = [
        re.compile(branch["pattern"].removeprefix("^").removesuffix("$"))
        for branch in name["anyOf"]
    ]
    assert len(rules) == 2
    disagreements = [
        name
        for code in range(sys.maxunicode + 1)
        if not 0xD800 <= code <= 0xDFFF
        for name in (chr(code), "x" + chr(code))
        if any(rule.fullmatch(name) for rule in rules) != (name_problem(name) is None)
    ]
    assert disagreements == []


def test_list_parameters_state_the_page_size_rule_and_cursor(document: dict[str, Any]) -> None:
    parameters = {p["name"]: p for p in document["paths"]["/pets"]["get"]["parameters"]}
    limit = parameters["limit"]["schema"]
    assert (limit["minimum"], limit["maximum"], limit["default"]) == (
        pagination.LIMIT_MIN,
        pagination.LIMIT_MAX,
        pagination.LIMIT_DEFAULT,
    )
    assert limit["type"] == "integer"
    described = parameters["limit"]["description"]
    assert f"from {pagination.LIMIT_MIN} to {pagination.LIMIT_MAX}" in described
    assert document["components"]["schemas"]["Pets"]["maxItems"] == pagination.LIMIT_MAX
    assert parameters["status"]["schema"] == {"$ref": "#/components/schemas/PetStatus"}
    assert parameters["cursor"]["required"] is False
    assert "Link" in document["paths"]["/pets"]["get"]["responses"]["200"]["headers"]
    pet_id = document["paths"]["/pets/{petId}"]["get"]["parameters"][0]
    assert bounds(document, pet_id["schema"]) == {
        "type": "integer",
        "minimum": -(2**63),
        "maximum": 2**63 - 1,
    }


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
