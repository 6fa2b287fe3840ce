"""Schemathesis hooks: teach the generator two rules JSON Schema cannot state.

Loaded with SCHEMATHESIS_HOOKS=tests.fuzz.schemathesis_hooks. Only cases the
generator meant as *valid* are touched; invalid (negative) data goes out as drawn.

- D9: a cursor is valid only when this service issued it for the same ``status``.
  A schema-valid random string is not one, so a positive case gets a real cursor,
  signed with the test server's secret (PETSTORE_CURSOR_SECRET).
- D16: an Idempotency-Key names one request; the generator draws few distinct keys,
  so a valid case gets a key of its own (a reused key with another body is a 422).
- D3: ``1.0`` is not an integer on this API, but JSON Schema counts it as one, so
  an integral float the generator drew as a valid ``categoryId`` is sent as an int.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import schemathesis
from schemathesis.core.parameters import ParameterLocation

from petstore.config import DEFAULT_CURSOR_SECRET
from petstore.pagination import CursorSigner
from petstore.schemas import PetStatus

_signer = CursorSigner(os.environ.get("PETSTORE_CURSOR_SECRET", DEFAULT_CURSOR_SECRET).encode())


_QUERY, _BODY = ParameterLocation.QUERY, ParameterLocation.BODY
_HEADERS = ParameterLocation.HEADER


def _positive(case: Any, location: ParameterLocation) -> bool:
    meta = case._meta
    return meta is None or not meta.is_negative_at(location)


@schemathesis.hook
def map_case(context: Any, case: Any) -> Any:
    operation_id = case.operation.definition.raw.get("operationId")
    query = case.query
    if operation_id == "listPets" and query and "cursor" in query and _positive(case, _QUERY):
        status = PetStatus(query["status"]) if query.get("status") in set(PetStatus) else None
        last_id = sum(map(ord, str(query["cursor"]))) % 1000
        case.query = {**query, "cursor": _signer.issue(last_id=last_id, status=status)}
    headers = case.headers
    if headers and "Idempotency-Key" in headers and _positive(case, _HEADERS):
        case.headers = {**headers, "Idempotency-Key": f"st-{uuid.uuid4().hex}"}
    if operation_id == "createPet" and isinstance(case.body, dict):
        category_id = case.body.get("categoryId")
        if isinstance(category_id, float) and category_id.is_integer() and _positive(case, _BODY):
            case.body = {**case.body, "categoryId": int(category_id)}
    return case
