"""An operation is declared once, on the app's route table (``http.routes.Operation``):
these tests hold everything else that states an operation to that declaration, so a
new or changed operation fails here in each place it was forgotten.

- the OpenAPI document: the same operations, each with the same operationId, method,
  path, scope, success status, body, Idempotency-Key and deprecation, and no other;
- ``schemathesis.toml``: an entry for every operation, and for no other;
- the operation selectors of the Prometheus rules, the alerts and the Grafana
  dashboard: each expression that selects operations selects every one (the
  Idempotency-Key replay ratio: every operation that takes one), and never a health
  check, a document or an unknown path;
- what the pipeline does from the declaration, for every operation over the real app:
  401 before 415 before the Idempotency-Key before the body (413), and a deprecated
  operation's headers on every answer, a refusal's too.

The tables of scopes and success statuses of ``test_auth.py`` and the requests of
``tests/examples.py`` are built from the route table.
"""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any

import pytest
import yaml
from starlette.testclient import TestClient

from petstore.server.app import create_app
from petstore.server.config import Settings
from petstore.server.http import docs
from tests import ROOT, examples

#: The methods of an OpenAPI path item that are operations.
HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
#: The files whose expressions select requests by their ``operation`` label.
PROMETHEUS_FILES = ("deploy/prometheus/rules.yml", "deploy/prometheus/alerts.yml")
DASHBOARD = "deploy/grafana/petstore.json"
#: A series selector (``name{...}``) and, in one, an ``operation`` label matcher.
_SELECTOR = re.compile(r"([A-Za-z_:][\w:]*)?\{([^}]*)\}")
_OPERATION_MATCHER = re.compile(r'\boperation\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
#: The metric whose expression is about the operations that take an Idempotency-Key.
REPLAYS = "petstore_idempotent_replays_total"


def _settings() -> Settings:
    return Settings(database_url="sqlite:///unused.db", metrics_enabled=True, metrics_port=None)


def _resolved(document: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
    """``value`` with its ``$ref`` (into ``document``) followed, if it has one."""
    while "$ref" in value:
        target: Any = document
        for part in value["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        value = target
    return value


def in_table() -> set[tuple[Any, ...]]:
    """Each operation of the route table: (operationId, method, path under ``/v1``,
    scope, success status, body struct's name, takes an Idempotency-Key, deprecated)."""
    return {
        (
            operation.operation_id,
            method.lower(),
            template.removeprefix("/v1"),
            operation.scope,
            str(operation.status),
            None if operation.body is None else operation.body.__name__,
            operation.idempotent,
            operation.deprecated is not None,
        )
        for method, template, operation in examples.table()
    }


def in_document(document: dict[str, Any]) -> set[tuple[Any, ...]]:
    """Each operation of the OpenAPI ``document``, as :func:`in_table` states one."""
    found = set()
    for path, item in document["paths"].items():
        for method in HTTP_METHODS:
            if method not in item:
                continue
            operation = item[method]
            [requirement] = operation.get("security", document.get("security"))
            [[scope]] = requirement.values()
            [status] = [code for code in operation["responses"] if code.startswith("2")]
            body = operation.get("requestBody")
            struct = None
            if body is not None:
                schema = _resolved(document, body)["content"]["application/json"]["schema"]
                struct = schema["$ref"].rpartition("/")[2]
            parameters = [
                _resolved(document, parameter)
                for parameter in [*item.get("parameters", ()), *operation.get("parameters", ())]
            ]
            idempotent = {"name": "Idempotency-Key", "in": "header"} in [
                {"name": parameter["name"], "in": parameter["in"]} for parameter in parameters
            ]
            found.add(
                (
                    operation["operationId"],
                    method,
                    path,
                    scope,
                    status,
                    struct,
                    idempotent,
                    operation.get("deprecated", False),
                )
            )
    return found


def test_the_document_states_every_operation_of_the_route_table_and_no_other() -> None:
    document = docs.openapi_document(_settings())
    assert sorted(in_document(document), key=str) == sorted(in_table(), key=str)


def test_schemathesis_has_an_entry_for_every_operation_and_no_other() -> None:
    config = tomllib.loads((ROOT / "schemathesis.toml").read_text())
    entries = [entry["include-operation-id"] for entry in config["operations"]]
    assert sorted(entries) == sorted(op.operation_id for op in examples.operations())


def _matches(operator: str, value: str, label: str) -> bool:
    """Whether PromQL's label matcher ``operation<operator>"value"`` selects ``label``
    (a regular expression matches the whole value, as in PromQL)."""
    value = value.encode().decode("unicode_escape")  # a PromQL string's escapes
    if operator in ("=", "!="):
        return (label == value) == (operator == "=")
    return (re.fullmatch(value, label) is not None) == (operator == "=~")


def unwatched(
    expressions: dict[str, str],
    *,
    operations: set[str],
    idempotent: set[str],
    others: set[str],
) -> list[str]:
    """What is wrong with ``expressions`` (where -> PromQL) for an app whose requests
    are labelled with the ``operations`` (those that take an Idempotency-Key:
    ``idempotent``) and the ``others``: an expression that selects operations but not
    every one (the Idempotency-Key replay ratio: not exactly the idempotent ones), and
    a selector of a metric the app exports (not a recording rule's, whose series
    carry only what its rule selected) that selects one of the ``others``."""
    problems = []
    for where, expression in expressions.items():
        selected: set[str] = set()
        for metric, matchers in _SELECTOR.findall(expression):
            for operator, value in _OPERATION_MATCHER.findall(matchers):
                labels = {
                    label for label in operations | others if _matches(operator, value, label)
                }
                selected |= labels & operations
                if ":" not in metric and labels & others:
                    problems.append(f"{where}: {metric} selects {sorted(labels & others)}")
        if not selected:
            continue
        expected = idempotent if REPLAYS in expression else operations
        if selected != expected:
            problems.append(
                f"{where}: selects {sorted(selected)}, not {sorted(expected)}: {expression}"
            )
    return problems


def _expressions() -> dict[str, str]:
    """Every PromQL expression of the rules, the alerts and the dashboard, by where."""
    found = {}
    for name in PROMETHEUS_FILES:
        for group in yaml.safe_load((ROOT / name).read_text())["groups"]:
            for rule in group["rules"]:
                found[f"{name}: {rule.get('record') or rule.get('alert')}"] = rule["expr"]

    def walk(value: Any, where: str) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("expr"), str):
                found[where] = value["expr"]
            for key, inner in value.items():
                walk(inner, f"{where}.{key}")
        elif isinstance(value, list):
            for index, inner in enumerate(value):
                walk(inner, f"{where}[{index}]")

    walk(json.loads((ROOT / DASHBOARD).read_text()), DASHBOARD)
    return found


def _labels() -> tuple[set[str], set[str], set[str]]:
    """The operation ids of the route table, those that take an Idempotency-Key, and
    every other ``operation`` label the app's metrics carry (``pipeline._account``)."""
    operations = {op.operation_id for op in examples.operations()}
    idempotent = {op.operation_id for op in examples.operations() if op.declared.idempotent}
    routes = create_app(_settings()).router.routes
    labels = {label for route in routes for label in route.labels.values()}
    return operations, idempotent, labels - operations | {"unmatched"}


def test_every_rule_alert_and_panel_that_selects_operations_selects_every_one() -> None:
    operations, idempotent, others = _labels()
    expressions = _expressions()
    assert any(_OPERATION_MATCHER.search(e) for e in expressions.values())  # read them
    assert unwatched(expressions, operations=operations, idempotent=idempotent, others=others) == []


def test_an_operation_left_out_of_a_selector_is_found() -> None:
    """The check above can fail: a hard-coded list without a new operation, a list
    that lets a health check in, and a replay ratio over another operation."""
    expressions = {
        "slo": 'sum(rate(petstore_requests_total{operation=~"listPets|getPet"}[5m]))',
        "latency": ('p99{operation="createPet"} > 0.5 or p99{operation=~"listPets|getPet"} > 0.25'),
        "health": 'sum(rate(petstore_requests_total{operation!="unmatched"}[5m]))',
        "replays": f'sum(rate({REPLAYS}[5m])) / sum(rate(x{{operation="getPet"}}[5m]))',
        "generic": 'sum(rate(petstore_requests_total{operation!~"/.*|unmatched"}[5m]))',
    }
    problems = unwatched(
        expressions,
        operations={"listPets", "createPet", "getPet", "patchPet"},
        idempotent={"createPet"},
        others={"/healthz", "unmatched"},
    )
    assert [problem.split(":")[0] for problem in problems] == [
        "slo",
        "latency",
        "health",
        "replays",
    ], problems


# What the pipeline does from the declaration, over the real app ---------------------


def _operation(method: str, path: str) -> examples.Operation:
    [operation] = [op for op in examples.operations() if (op.method, op.path) == (method, path)]
    return operation


@pytest.mark.parametrize(("method", "path", "body"), examples.OPERATION_PARAMS)
def test_an_operation_refuses_in_the_order_its_declaration_sets(
    client: TestClient,
    auth: dict[str, str],
    settings: Settings,
    method: str,
    path: str,
    body: dict[str, Any] | None,
) -> None:
    """Admission (401) before the Content-Type (415) before the Idempotency-Key (400)
    before the body (413), each answered before the body is read (Connection: close)."""
    declared = _operation(method, path).declared
    oversized = b"x" * (settings.max_body_bytes + 1)
    wrong = {"Content-Type": "text/plain", "Idempotency-Key": "not a token"}
    refused = client.request(method, path, content=oversized, headers=wrong)
    assert refused.status_code == 401, refused.text
    if declared.body is None:
        return
    refused = client.request(method, path, content=oversized, headers={**auth, **wrong})
    assert refused.status_code == 415, refused.text
    assert refused.headers["connection"] == "close"
    json_type = {"Content-Type": "application/json"}
    if declared.idempotent:
        refused = client.request(
            method, path, content=oversized, headers={**auth, **wrong, **json_type}
        )
        assert refused.status_code == 400, refused.text
        assert refused.json()["message"].startswith("Idempotency-Key:")
        assert refused.headers["connection"] == "close"
    refused = client.request(method, path, content=oversized, headers={**auth, **json_type})
    assert refused.status_code == 413, refused.text


@pytest.mark.parametrize(("method", "path", "body"), examples.OPERATION_PARAMS)
def test_a_deprecated_operation_says_so_on_every_answer_and_no_other_does(
    client: TestClient, auth: dict[str, str], method: str, path: str, body: dict[str, Any] | None
) -> None:
    """D14: the Deprecation and Sunset fields on a success and on a 401 alike, exactly
    where the route table marks the operation deprecated."""
    deprecated = _operation(method, path).declared.deprecated is not None
    for headers in ({}, auth):
        response = client.request(method, path, json=body, headers=headers)
        assert ("deprecation" in response.headers) is deprecated, response.status_code
        assert ("sunset" in response.headers) is deprecated, response.status_code
