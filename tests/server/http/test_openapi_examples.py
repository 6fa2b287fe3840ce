"""Every example of the served OpenAPI document is real (issue 64): each schema,
request body, response, parameter and header has one; each validates against its
schema; and each is what the service does, through the real app with a real key.

The examples tell one story (the head of ``openapi.yaml``): the request bodies of
createPet, sent in their order to a fresh database, are created with ids 1, 2 and 3
and answered with the 201 examples of the same names; listPets and getPet then answer
their 200 examples. Each other response example is the body the service answers to
the request its summary names: :data:`REQUESTS` sends that request, by the example's
name, for every operation whose response lists it. A response example with no request
here, or a request with no example, fails the suite.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, NamedTuple

import httpx2 as httpx
import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from starlette.testclient import TestClient

from petstore.schemas import DEFAULT_STATUS
from petstore.server.config import Settings
from petstore.server.http import docs
from petstore.server.rules import keys, pets
from petstore.server.store.postgres import ID_ORDER_LOCK
from tests import examples
from tests.conftest import FakeClock, insert_corrupt_pet, run_sql

DOCUMENT = docs.openapi_document(Settings(database_url="sqlite:///unused.db"))
_URI = "urn:petstore:openapi"
_REGISTRY = Registry().with_resource(
    _URI, Resource.from_contents(DOCUMENT, default_specification=DRAFT202012)
)
#: The Host of the story's requests: a development server's, so that the links the
#: service answers with are the examples' (``http://127.0.0.1:8000/v1/...``).
HOST = "127.0.0.1:8000"
#: The largest integer a browser reads exactly from JSON (Number.MAX_SAFE_INTEGER).
SAFE_INTEGER = 2**53 - 1
#: Response headers whose value differs from one request to the next: compared with
#: their example by shape, every number as any number.
VARYING_HEADERS = frozenset({"X-Request-ID", "RateLimit", "Retry-After"})


def follow(pointer: str) -> tuple[str, dict[str, Any]]:
    """The JSON pointer and the object of the document at ``pointer``, after each
    ``$ref`` it holds."""
    node: Any = DOCUMENT
    for part in pointer.removeprefix("/").split("/") if pointer else []:
        step = part.replace("~1", "/").replace("~0", "~")
        node = node[int(step)] if isinstance(node, list) else node[step]
    if "$ref" in node:
        return follow(node["$ref"].removeprefix("#"))
    return pointer, node


def escape(name: str) -> str:
    """``name`` as one step of a JSON pointer (RFC 6901)."""
    return name.replace("~", "~0").replace("/", "~1")


def valid(value: Any, pointer: str) -> bool:
    """Whether ``value`` is valid against the schema at ``pointer`` of the document."""
    validator = Draft202012Validator({"$ref": f"{_URI}#{pointer}"}, registry=_REGISTRY)
    return bool(validator.is_valid(value))


class Operation(NamedTuple):
    """An operation of the document: its id, its JSON pointer, its method (lower
    case, as the document has it) and a path to send it to."""

    operation_id: str
    pointer: str
    method: str
    path: str


def operations() -> list[Operation]:
    """The document's operations, each with a request path (``1`` for a path
    parameter, as :func:`tests.examples.operations` has it)."""
    paths = {op.operation_id: op.path for op in examples.operations()}
    return [
        Operation(operation["operationId"], f"/paths/{escape(template)}/{method}", method, path)
        for template, item in DOCUMENT["paths"].items()
        for method, operation in item.items()
        for path in [paths[operation["operationId"]]]
    ]


class Example(NamedTuple):
    """An example of a media type: where (its operation, status or ``request``), its
    name, the pointer of its schema and its value."""

    operation: Operation
    status: str
    name: str
    schema: str
    value: Any


def media_examples() -> Iterator[Example]:
    """Every example of a request body or response of the document."""
    for operation in operations():
        declared = follow(operation.pointer)[1]
        bodies = (
            [("request", f"{operation.pointer}/requestBody")] if "requestBody" in declared else []
        )
        bodies += [
            (status, f"{operation.pointer}/responses/{status}") for status in declared["responses"]
        ]
        for status, where in bodies:
            pointer, body = follow(where)
            for media_type in body.get("content", {}):
                at = f"{pointer}/content/{escape(media_type)}"
                for name in follow(at)[1].get("examples", {}):
                    value = follow(f"{at}/examples/{escape(name)}")[1]["value"]
                    yield Example(operation, status, name, f"{at}/schema", value)


def headers() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Every response header of the document: its name, pointer and object."""
    for operation in operations():
        for status in follow(operation.pointer)[1]["responses"]:
            pointer, response = follow(f"{operation.pointer}/responses/{status}")
            for name in response.get("headers", {}):
                yield name, *follow(f"{pointer}/headers/{escape(name)}")


def parameter_schemas() -> Iterator[tuple[Operation, dict[str, Any], str, dict[str, Any]]]:
    """Every parameter of the document: its operation, object, and its schema's
    pointer and object."""
    for operation in operations():
        for index, _ in enumerate(follow(operation.pointer)[1].get("parameters", [])):
            pointer, parameter = follow(f"{operation.pointer}/parameters/{index}")
            yield operation, parameter, *follow(f"{pointer}/schema")


# The document: an example everywhere, each valid, no number a browser rounds ------------


def test_every_schema_has_examples_valid_against_it() -> None:
    schemas = DOCUMENT["components"]["schemas"]
    for name, schema in schemas.items():
        assert schema.get("examples"), f"{name} has no examples"
        for value in schema["examples"]:
            assert valid(value, f"/components/schemas/{name}"), (name, value)


def test_every_request_body_and_response_has_examples_valid_against_its_schema() -> None:
    for operation in operations():
        declared = follow(operation.pointer)[1]
        bodies = [follow(f"{operation.pointer}/requestBody")] if "requestBody" in declared else []
        bodies += [follow(f"{operation.pointer}/responses/{s}") for s in declared["responses"]]
        for _, body in bodies:
            for media_type, content in body["content"].items():
                assert content.get("examples"), (operation.operation_id, media_type, body)
    for example in media_examples():
        assert valid(example.value, example.schema), example
        if example.status != "request" and not example.status.startswith("2"):
            assert example.value["status"] == int(example.status), example


def test_every_parameter_has_examples_valid_against_its_schema() -> None:
    found = list(parameter_schemas())
    assert {parameter["name"] for _, parameter, _, _ in found} == {
        "limit", "status", "cursor", "Idempotency-Key", "petId"
    }  # fmt: skip
    for operation, parameter, pointer, schema in found:
        # In the schema, where Swagger UI does not fill it into "Try it out".
        assert not {"example", "examples"} & parameter.keys(), parameter["name"]
        assert schema.get("examples"), (operation.operation_id, parameter["name"])
        for value in schema["examples"]:
            assert valid(value, pointer), (parameter["name"], value)


def test_every_header_has_an_example_valid_and_shown_in_its_description() -> None:
    """Swagger UI shows a header's description, not its example: the description
    shows the example too."""
    found = list(headers())
    assert {name for name, _, _ in found} >= {
        "Link", "X-Request-ID", "RateLimit", "RateLimit-Policy", "Retry-After",
        "WWW-Authenticate", "Deprecation", "Sunset", "Allow", "Idempotent-Replayed",
    }  # fmt: skip
    for name, pointer, header in found:
        assert "example" in header, name
        assert valid(header["example"], f"{pointer}/schema"), name
        assert f"`{header['example']}`" in header["description"], name


def test_no_number_in_the_document_is_one_a_browser_would_round() -> None:
    """A browser reads JSON numbers as doubles: Swagger UI showed the int64 maximum,
    2^63 - 1, as 9223372036854776000. The int64 ranges are stated by their format
    and in words instead."""

    def numbers(node: Any) -> Iterator[int | float]:
        if isinstance(node, dict):
            for value in node.values():
                yield from numbers(value)
        elif isinstance(node, list):
            for value in node:
                yield from numbers(value)
        elif isinstance(node, int | float) and not isinstance(node, bool):
            yield node

    found = list(numbers(DOCUMENT))
    assert found
    assert [n for n in found if abs(n) > SAFE_INTEGER] == []


# The service: each request example accepted, each response example answered ------------


class Scene:
    """One operation sent by a real client to this test's app and database, with a
    valid key (``auth``) unless told otherwise: what the request of a response
    example is made of."""

    def __init__(
        self,
        operation: Operation,
        *,
        client: TestClient,
        auth: dict[str, str],
        make_key: Callable[..., str],
        clock: FakeClock,
        database_url: str,
    ) -> None:
        self.operation = operation
        self.client = client
        self.auth = auth
        self.make_key = make_key
        self.clock = clock
        self.database_url = database_url

    def send(
        self,
        *,
        path: str | None = None,
        method: str | None = None,
        headers: dict[str, str] | list[tuple[str, str]] | None = None,
        body: Any = None,
        content: bytes | None = None,
        params: dict[str, str] | None = None,
        key: str | None = None,
        authorization: bool = True,
    ) -> httpx.Response:
        """The operation's request, ``key`` (else the scene's) as its bearer key;
        a POST sends ``body`` as JSON (else Rex) or ``content``."""
        sent: list[tuple[str, str]] = [("Host", HOST)]
        if authorization:
            sent.append(("Authorization", f"Bearer {key}" if key else self.auth["Authorization"]))
        sent += list(headers.items()) if isinstance(headers, dict) else headers or []
        method = method or self.operation.method.upper()
        if method == "POST" and content is None:
            body = body if body is not None else REQUEST_BODIES["rex"]
            return self.client.post(
                path or self.operation.path, json=body, headers=sent, params=params
            )
        return self.client.request(
            method, path or self.operation.path, content=content, headers=sent, params=params
        )

    def story(self) -> dict[str, httpx.Response]:
        """The request examples of createPet sent in their order, each answered."""
        return {
            name: self.client.post("/v1/pets", json=body, headers={**self.auth, "Host": HOST})
            for name, body in REQUEST_BODIES.items()
        }

    def key_without_the_scope(self) -> str:
        """A key with every scope but the operation's (D21)."""
        needed = follow(self.operation.pointer)[1]["security"][0]["bearerAuth"]
        return self.make_key(scopes=[scope for scope in keys.SCOPES if scope not in needed])


#: The request bodies of createPet's examples, by name, in their order.
REQUEST_BODIES = {
    example.name: example.value for example in media_examples() if example.status == "request"
}
#: The example of listPets' cursor: issued after Rex and Mittens for no status.
CURSOR = next(
    schema["examples"][0]
    for _, parameter, _, schema in parameter_schemas()
    if parameter["name"] == "cursor"
)


def invalid_body(body: dict[str, Any]) -> Callable[[Scene], httpx.Response]:
    return lambda scene: scene.send(body=body)


def raw_body(text: str) -> Callable[[Scene], httpx.Response]:
    content_type = {"Content-Type": "application/json"}
    return lambda scene: scene.send(content=text.encode(), headers=content_type)


def query(**params: str) -> Callable[[Scene], httpx.Response]:
    return lambda scene: scene.send(params=params)


def after_the_story(
    request: Callable[[Scene], httpx.Response],
) -> Callable[[Scene], httpx.Response]:
    def send(scene: Scene) -> httpx.Response:
        scene.story()
        return request(scene)

    return send


def created(name: str) -> Callable[[Scene], httpx.Response]:
    return lambda scene: scene.story()[name]


def key_expired(scene: Scene) -> httpx.Response:
    key = scene.make_key(expires_at=scene.clock() + timedelta(minutes=1))
    scene.clock.advance(minutes=2)
    return scene.send(key=key)


def after_sunset(scene: Scene) -> httpx.Response:
    scene.clock.set(pets.SUNSET)
    return scene.send()


def rate_limit_spent(scene: Scene) -> httpx.Response:
    key = scene.make_key(rate_limit="1/minute")
    scene.send(key=key)
    return scene.send(key=key)


def failed_authentications(scene: Scene) -> httpx.Response:
    unknown = "petstore_" + "A" * 43
    for _ in range(30):
        assert scene.send(key=unknown).status_code == 401
    return scene.send(key=unknown)


def reused_key(scene: Scene) -> httpx.Response:
    key = {"Idempotency-Key": '"import-rex-1"'}
    assert scene.send(body=REQUEST_BODIES["rex"], headers=key).status_code == 201
    return scene.send(body=REQUEST_BODIES["mittens"], headers=key)


def in_flight(scene: Scene) -> httpx.Response:
    """A create with a key while the first with it waits for the database."""
    key = {"Idempotency-Key": '"import-rex-1"'}
    with ThreadPoolExecutor(max_workers=1) as pool:
        with creates_held(scene.database_url) as wait_until_one_waits:
            first = pool.submit(scene.send, headers=key)
            wait_until_one_waits()
            second = scene.send(headers=key)
        assert first.result(timeout=30).status_code == 201
    return second


@contextmanager
def creates_held(database_url: str) -> Iterator[Callable[[], None]]:
    """Hold what the store needs to insert an animal, so that a create waits in the
    store until the block ends; yields a function that returns once one waits (on
    SQLite after 0.3 s: a writer waits in its busy handler, which nothing shows)."""
    if database_url.startswith("sqlite"):
        holder = sqlite3.connect(database_url.removeprefix("sqlite:///"), isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            yield lambda: time.sleep(0.3)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        return
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as pg:
        pg.execute("SELECT pg_advisory_lock(%s)", (ID_ORDER_LOCK,))

        def wait_until_one_waits() -> None:
            deadline = time.monotonic() + 10
            while pg.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            ).fetchone() != (1,):
                assert time.monotonic() < deadline, "no create waited"
                time.sleep(0.02)

        try:
            yield wait_until_one_waits
        finally:
            pg.execute("SELECT pg_advisory_unlock(%s)", (ID_ORDER_LOCK,))


def unexpected_fault(scene: Scene) -> httpx.Response:
    """A fault no rule expects: a row the service could never write for a read, a
    trigger that fails every insert for a create."""
    if scene.operation.method == "get":
        insert_corrupt_pet(scene.database_url, 1)
        return scene.send()
    if scene.database_url.startswith("sqlite"):
        run_sql(
            scene.database_url,
            "CREATE TRIGGER fault BEFORE INSERT ON pets BEGIN SELECT RAISE(ABORT, 'fault'); END",
        )
    else:
        run_sql(
            scene.database_url,
            "CREATE FUNCTION fault() RETURNS trigger LANGUAGE plpgsql"
            " AS $$ BEGIN RAISE EXCEPTION 'fault'; END $$",
        )
        run_sql(
            scene.database_url,
            "CREATE TRIGGER fault BEFORE INSERT ON pets FOR EACH ROW EXECUTE FUNCTION fault()",
        )
    return scene.send()


def database_unavailable(scene: Scene) -> httpx.Response:
    run_sql(scene.database_url, "DROP TABLE pets")
    return scene.send()


#: The request behind each response example of the document, by the example's name.
REQUESTS: dict[str, Callable[[Scene], httpx.Response]] = {
    # 2xx: the story
    "rex": created("rex"),
    "mittens": created("mittens"),
    "ruby": created("ruby"),
    "firstPage": after_the_story(query(limit="2")),
    "noneWithThisStatus": after_the_story(query(status="sold")),
    "byId": after_the_story(lambda scene: scene.send()),
    # listPets 400
    "limitOutOfRange": query(limit="0"),
    "unknownStatusFilter": query(status="lost"),
    "cursorNotIssued": query(cursor="abc"),
    "cursorOfAnotherStatus": query(status="available", cursor=CURSOR),
    "authorizationTwice": lambda scene: scene.send(
        headers=[("Authorization", scene.auth["Authorization"])]
    ),
    # createPet 400
    "categoryIdMissing": invalid_body({"name": "Rex"}),
    "categoryIdOutOfRange": invalid_body({"name": "Rex", "categoryId": 0}),
    "nameTooLong": invalid_body({"name": "R" * 101, "categoryId": 1}),
    "nameWithInvisibleCharacter": invalid_body({"name": "Rex\u200b", "categoryId": 1}),
    "unknownStatus": invalid_body({"name": "Rex", "categoryId": 1, "status": "lost"}),
    "unknownMember": invalid_body({"id": 7, "name": "Rex", "categoryId": 1}),
    "memberNamedTwice": raw_body('{"name": "Rex", "name": "Max", "categoryId": 1}'),
    "malformedJson": raw_body('{"name": "Rex", "categoryId": 1'),
    "idempotencyKeyNotValid": lambda scene: scene.send(headers={"Idempotency-Key": "import rex"}),
    # getPet 400, 404, 410
    "notAnInt64": lambda scene: scene.send(path="/v1/pets/rex"),
    "noSuchAnimal": lambda scene: scene.send(path="/v1/pets/42"),
    "afterSunset": after_sunset,
    # 401, 403, 405
    "noKey": lambda scene: scene.send(authorization=False),
    "notBearer": lambda scene: scene.send(
        authorization=False, headers={"Authorization": "Basic cmV4OnNlY3JldA=="}
    ),
    "keyNotValid": lambda scene: scene.send(key="petstore_" + "A" * 43),
    "keyExpired": key_expired,
    "lacksScope": lambda scene: scene.send(key=scene.key_without_the_scope()),
    "delete": lambda scene: scene.send(method="DELETE"),
    # createPet 409, 413, 415, 422
    "stillInFlight": in_flight,
    "over64KiB": raw_body('{"name": "' + "R" * 65536 + '", "categoryId": 1}'),
    "form": lambda scene: scene.send(
        content=b"name=Rex&categoryId=1",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    ),
    "otherBody": reused_key,
    # 429
    "rateLimitSpent": rate_limit_spent,
    "tooManyFailedAuthentications": failed_authentications,
    # 500, 503: faults of the database (FAULTS)
    "unexpected": unexpected_fault,
    "databaseUnavailable": database_unavailable,
}
#: The examples whose request damages the database (on PostgreSQL: a database of its own).
FAULTS = frozenset({"unexpected", "databaseUnavailable"})

RESPONSE_EXAMPLES = [example for example in media_examples() if example.status != "request"]


def example_params(*, faults: bool) -> list[Any]:
    return [
        pytest.param(e, id=f"{e.operation.operation_id}-{e.status}-{e.name}")
        for e in RESPONSE_EXAMPLES
        if (e.name in FAULTS) is faults
    ]


def test_every_response_example_has_its_request_and_every_request_an_example() -> None:
    assert {example.name for example in RESPONSE_EXAMPLES} == set(REQUESTS)


def comparable(body: Any) -> Any:
    """A body as compared with its example: the seconds of a rate limit's message
    depend on the moment in its window."""
    if isinstance(body, dict) and body.get("code") == "rate_limited":
        return {**body, "message": re.sub(r"retry in \d+ s", "retry in N s", body["message"])}
    return body


def shape(value: str) -> str:
    return re.sub(r"[0-9a-f]{32}|\d+", "#", value)


@pytest.fixture
def scene_of(
    client: TestClient,
    auth: dict[str, str],
    make_key: Callable[..., str],
    clock: FakeClock,
    database_url: str,
) -> Callable[[Operation], Scene]:
    return lambda operation: Scene(
        operation,
        client=client,
        auth=auth,
        make_key=make_key,
        clock=clock,
        database_url=database_url,
    )


def assert_answered(example: Example, response: httpx.Response) -> None:
    """``response`` is ``example``: its status and body, and, for a 2xx, the example
    of each documented header it carries (by shape for :data:`VARYING_HEADERS`)."""
    assert response.status_code == int(example.status), response.text
    assert comparable(response.json()) == comparable(example.value)
    if not example.status.startswith("2"):
        return
    pointer = f"{example.operation.pointer}/responses/{example.status}"
    for name, header in follow(pointer)[1].get("headers", {}).items():
        expected = follow(header["$ref"].removeprefix("#"))[1] if "$ref" in header else header
        if name.lower() not in response.headers:
            assert not expected.get("required"), name
            continue
        sent, documented = response.headers[name], str(expected["example"])
        if name in VARYING_HEADERS:
            sent, documented = shape(sent), shape(documented)
        assert sent == documented, name


@pytest.mark.parametrize("example", example_params(faults=False))
def test_each_response_example_is_what_the_service_answers(
    example: Example, scene_of: Callable[[Operation], Scene]
) -> None:
    assert_answered(example, REQUESTS[example.name](scene_of(example.operation)))


@pytest.mark.own_database
@pytest.mark.parametrize("example", example_params(faults=True))
def test_each_fault_example_is_what_the_service_answers(
    example: Example, scene_of: Callable[[Operation], Scene]
) -> None:
    assert_answered(example, REQUESTS[example.name](scene_of(example.operation)))


@pytest.mark.parametrize("name", list(REQUEST_BODIES))
def test_each_request_body_example_is_created(
    name: str, client: TestClient, auth: dict[str, str]
) -> None:
    """Each NewPet example alone, on an empty database: 201, the animal as sent with
    its id and, when it names none, the default status (D1)."""
    body = REQUEST_BODIES[name]
    response = client.post("/v1/pets", json=body, headers=auth)
    assert response.status_code == 201, response.text
    status = body.get("status", DEFAULT_STATUS)
    assert response.json() == examples.pet(1, body["name"], body["categoryId"], status)


@pytest.mark.parametrize(
    ("operation", "parameter", "value"),
    [
        pytest.param(operation, parameter, value, id=f"{parameter['name']}={value}")
        for operation, parameter, _, schema in parameter_schemas()
        for value in schema.get("examples", [])
    ],
)
def test_each_parameter_example_is_accepted(
    operation: Operation,
    parameter: dict[str, Any],
    value: Any,
    scene_of: Callable[[Operation], Scene],
) -> None:
    """Each parameter's example, alone in its operation's request after the story
    (so that the id and the cursor name animals): a 2xx."""
    scene = scene_of(operation)
    scene.story()
    name, where = parameter["name"], parameter["in"]
    if where == "query":
        response = scene.send(params={name: str(value)})
    elif where == "header":
        response = scene.send(headers={name: str(value)})
    else:
        response = scene.send(path=operation.path.replace("/1", f"/{value}"))
    assert 200 <= response.status_code < 300, response.text


def test_the_error_headers_are_their_examples(scene_of: Callable[[Operation], Scene]) -> None:
    """The examples of the headers of an error answer, each on a request that sends
    that case: a key not valid, a key without pets:write, DELETE /pets, a spent
    rate limit."""
    by_id = {operation.operation_id: operation for operation in operations()}
    header = DOCUMENT["components"]["headers"]
    create = scene_of(by_id["createPet"])
    cases = [
        ("WWW-Authenticate", REQUESTS["keyNotValid"](create)),
        ("WWW-Authenticate-Scope", REQUESTS["lacksScope"](create)),
        ("Allow", REQUESTS["delete"](create)),
        ("Retry-After", REQUESTS["rateLimitSpent"](create)),
    ]
    for name, response in cases:
        sent, documented = response.headers[name.removesuffix("-Scope")], header[name]["example"]
        if name in VARYING_HEADERS:
            sent, documented = shape(sent), shape(str(documented))
        assert sent == documented, name
