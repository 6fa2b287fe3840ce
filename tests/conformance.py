"""Checks a response against the served OpenAPI document (issue: every response the
app gives conforms to it): documented status, JSON body valid against the schema,
required headers present. Paths outside the document must still carry an Error
body when they fail (D10)."""

from __future__ import annotations

import re
from typing import Any

import httpx2 as httpx
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

_DOC_URI = "urn:petstore:openapi"
_ERROR_KEYS = {"code", "message", "status"}


class Conformance:
    """Validates httpx responses against one OpenAPI document."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self._registry = Registry().with_resource(
            _DOC_URI, Resource.from_contents(document, default_specification=DRAFT202012)
        )
        self._paths = [
            (re.compile("^/v1" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"), item)
            for template, item in document["paths"].items()
        ]

    def _resolve(self, node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            node = self._registry.resolver(_DOC_URI).lookup(node["$ref"]).contents
        return node

    def check(self, response: httpx.Response) -> None:
        """Raise AssertionError when ``response`` breaks the document."""
        request = response.request
        body = response.read()
        if response.status_code >= 400 and request.method != "HEAD":
            assert response.headers["content-type"].startswith("application/json"), body
            error = response.json()
            assert set(error) == _ERROR_KEYS, error
            assert error["status"] == response.status_code, error
        assert response.headers.get("x-request-id"), "every response has X-Request-ID (D18)"
        item = next((i for pattern, i in self._paths if pattern.match(request.url.path)), None)
        if item is None:
            return
        method = request.method.lower()
        if method == "head":
            method = "get"
        operation = item.get(method)
        if operation is None:
            assert response.status_code == 405, (request.method, request.url, response.status_code)
            assert response.headers.get("allow"), "a 405 names the allowed methods"
            return
        spec = operation["responses"].get(str(response.status_code))
        assert spec is not None, f"{operation['operationId']}: {response.status_code} undocumented"
        spec = self._resolve(spec)
        for name, header in spec.get("headers", {}).items():
            if self._resolve(header).get("required"):
                assert name.lower() in response.headers, f"missing header {name}"
        content = spec.get("content")
        if content and request.method != "HEAD":
            assert response.headers["content-type"].startswith("application/json")
            schema = {"$ref": f"{_DOC_URI}{content['application/json']['schema']['$ref']}"}
            Draft202012Validator(schema, registry=self._registry).validate(response.json())
