"""The steps of a request, each on its own (issue 41): reading a request into its
immutable view (``http.reading.read_request``), the answer being built
(``http.exchange.Response``) and admission, the one rules call of who may call and
how often (``rules.admission.Admission``, D12-D15, D21, D22), against a real SQLite
store. The pipeline that runs them in order is tested over HTTP everywhere else."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import pytest

from petstore.server import errors
from petstore.server.http.exchange import Request, Response
from petstore.server.http.reading import read_request
from petstore.server.http.routes import Route, Router
from petstore.server.rules import keys
from petstore.server.rules.admission import Admission, Verdict
from petstore.server.rules.auth import KeyVerifier
from petstore.server.rules.auth_failures import FailedAuthentications
from petstore.server.rules.ratelimit import RateLimiter
from petstore.server.store import open_store
from petstore.server.store.counters import Counters
from tests.conftest import NOW

TRACE = "0af7651916cd43dd8448eb211c80319c"


async def _nothing(request: Request, response: Response) -> None:
    raise AssertionError("not called")


ROUTER = Router([Route("/v1/pets", GET=_nothing), Route("/v1/pets/{petId}", GET=_nothing)])


def read(
    headers: list[tuple[bytes, bytes]], *, path: str = "/v1/pets", trusted: bool = False
) -> Request:
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "query_string": b"limit=5",
        "scheme": "http",
        "client": ("10.0.0.9", 41000),
        "http_version": "1.1",
        "headers": headers,
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    request, route = read_request(scope, receive, ROUTER, trust_forwarded=trusted)
    assert (route and route.template) == request.route
    return request


def test_a_sane_request_id_is_kept_and_any_other_replaced_by_a_new_one() -> None:
    assert read([(b"x-request-id", b"client-id:42/a+b=")]).request_id == "client-id:42/a+b="
    made = {read(headers).request_id for headers in ([], [(b"x-request-id", b"has space")])}
    made.add(read([(b"x-request-id", b"x" * 129)]).request_id)
    assert len(made) == 3
    assert all(re.fullmatch("[0-9a-f]{32}", request_id) for request_id in made)


def test_the_first_of_repeated_headers_is_the_one_read() -> None:
    request = read([(b"host", b"a.example"), (b"accept", b"a/b"), (b"accept", b"c/d")])
    assert request.header(b"accept") == "a/b"
    assert request.header(b"authorization") is None
    assert request.malformed is None


def test_a_request_without_host_or_with_a_single_header_twice_is_malformed() -> None:
    """Issue 53 (N9)."""
    assert read([]).malformed is not None
    assert read([(b"host", b"")]).malformed is not None  # what granian writes for none
    twice = [(b"host", b"a.example"), (b"host", b"b.example")]
    assert read(twice).malformed == "Host: the header is sent more than once; send it once"
    keys = [(b"host", b"a"), (b"authorization", b"Bearer x"), (b"authorization", b"Bearer y")]
    assert str(read(keys).malformed).startswith("Authorization: ")


def test_the_route_its_parameter_and_the_query_are_read_once() -> None:
    request = read([], path="/v1/pets/17")
    assert (request.route, request.path_param) == ("/v1/pets/{petId}", "17")
    assert request.query == b"limit=5"
    assert read([], path="/v1/pets/17/more").route is None
    assert read([], path="/nowhere").route is None


def test_the_trace_id_is_a_valid_traceparents_and_none_otherwise() -> None:
    valid = f"00-{TRACE}-b7ad6b7169203331-01".encode()
    assert read([(b"traceparent", valid)]).trace_id == TRACE
    assert read([(b"traceparent", b"00-nonsense")]).trace_id is None
    assert read([]).trace_id is None


def test_forwarded_values_count_only_when_trusted_and_the_nearest_proxys_wins() -> None:
    headers = [
        (b"x-forwarded-for", b"6.6.6.6"),  # sent by the client itself
        (b"x-forwarded-for", b"6.6.6.7, 203.0.113.7"),  # the load balancer appended its own
        (b"x-forwarded-proto", b"https"),
    ]
    untrusted = read(headers)
    assert (untrusted.client, untrusted.scheme) == (("10.0.0.9", 41000), "http")
    trusted = read(headers, trusted=True)
    assert (trusted.client, trusted.scheme) == (("203.0.113.7", 0), "https")
    odd = read([(b"x-forwarded-for", b"1.2.3.4 "), (b"x-forwarded-proto", b"ftp")], trusted=True)
    assert odd.scheme == "http"
    assert odd.client == ("1.2.3.4", 0)


@pytest.mark.parametrize(
    ("forwarded", "client"),
    [
        (b"2001:DB8::0:1", ("2001:db8::1", 0)),
        (b"::ffff:192.0.2.1", ("192.0.2.1", 0)),
        (b"a\x1bb", ("10.0.0.9", 41000)),
        (b"1.2.3.4\n", ("10.0.0.9", 41000)),
        (b"1.2.3.4:80", ("10.0.0.9", 41000)),
        (b"[2001:db8::1]", ("10.0.0.9", 41000)),
        (b"fe80::1%eth0", ("10.0.0.9", 41000)),
        (b"010.0.0.1", ("10.0.0.9", 41000)),
        (b"", ("10.0.0.9", 41000)),
        (b"unknown", ("10.0.0.9", 41000)),
    ],
)
def test_a_trusted_forwarded_client_is_one_ip_address_or_the_peer(
    forwarded: bytes, client: tuple[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 53 (N4): the forwarded value was used as it came, not as an address."""
    with caplog.at_level("WARNING", logger="petstore.http"):
        assert read([(b"x-forwarded-for", forwarded)], trusted=True).client == client
    warned = [r.getMessage() for r in caplog.records if r.name == "petstore.http"]
    assert len(warned) == (client[1] != 0)
    assert not any("\x1b" in message or "\n" in message for message in warned)


def test_a_request_cannot_be_changed() -> None:
    request = read([])
    with pytest.raises(AttributeError):
        request.path = "/v1/other"  # type: ignore[misc]


def answer(request: Request) -> tuple[Response, list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    return Response(request, send, [(b"x-request-id", b"r1")]), sent


def test_an_answer_sent_before_the_request_body_was_read_closes_the_connection() -> None:
    for headers, closes in (
        ([(b"content-length", b"12")], True),
        ([(b"transfer-encoding", b"chunked")], True),
        ([(b"content-length", b"0")], False),
        ([], False),
    ):
        response, sent = answer(read(headers))
        asyncio.run(response.respond(401, b"{}"))
        start = dict(sent[0]["headers"])
        assert (start.get(b"connection") == b"close") is closes, headers
        assert start[b"content-length"] == b"2"
        assert start[b"x-request-id"] == b"r1"
    response, sent = answer(read([(b"content-length", b"12")]))
    response.body_read = True
    asyncio.run(response.respond(201, b"{}"))
    assert b"connection" not in dict(sent[0]["headers"])


def test_a_verdict_goes_on_the_answer_and_its_refusal_is_raised() -> None:
    response, sent = answer(read([]))
    policy = (b"ratelimit-policy", b'"default";q=5;w=60')
    assert response.admit((7, [policy], None)) == 7
    assert response.api_key_id == 7
    refused, _ = answer(read([]))
    with pytest.raises(errors.Forbidden):
        refused.admit((8, [policy], errors.Forbidden("no", scope="pets:write")))
    assert refused.api_key_id == 8
    assert policy in refused.headers
    response.drop_header(b"x-request-id")
    asyncio.run(response.respond(200, b"{}"))
    assert dict(sent[0]["headers"]).keys() == {b"content-type", b"content-length", policy[0]}


async def admitting(
    database_url: str,
    tries: list[tuple[str | None, tuple[str, int] | None, str]],
    *,
    limit: str | None,
    failures: str | None = None,
    cache_seconds: float = 0,
) -> list[Verdict]:
    """The verdicts of an :class:`Admission` over the store at ``database_url`` (with
    the rate ``limit`` and the ``failures`` limit, None: none; keys verified kept for
    ``cache_seconds``) on each of ``tries``: (Authorization, client, scope), in order."""
    store = await open_store(database_url)
    try:
        admission = Admission(
            KeyVerifier(
                store.api_keys,
                clock=lambda: NOW,
                monotonic=lambda: 0.0,
                cache_seconds=cache_seconds,
            ),
            None if limit is None else RateLimiter(limit, counters=Counters()),
            None
            if failures is None
            else FailedAuthentications.from_notation(failures, clock=lambda: 0.0),
        )
        return [
            await admission.admit(None if header is None else header.encode(), client, scope)
            for header, client, scope in tries
        ]
    finally:
        await store.close()


def test_admission_refuses_in_order_and_every_verdict_carries_the_policy(
    database_url: str, make_key: Callable[..., str]
) -> None:
    reader = f"Bearer {make_key(scopes=[keys.READ])}"
    client = ("10.0.0.9", 1)
    tries = [(None, client, keys.READ), (reader, client, keys.WRITE)]
    tries += [(reader, client, keys.READ)] * 4
    verdicts = asyncio.run(admitting(database_url, tries, limit="3/minute"))

    api_key_id, headers, refusal = verdicts[0]
    assert (api_key_id, type(refusal)) == (None, errors.Unauthorized)
    assert headers == [(b"ratelimit-policy", b'"default";q=3;w=60')]
    api_key_id, headers, refusal = verdicts[1]
    assert isinstance(api_key_id, int)
    assert isinstance(refusal, errors.Forbidden)
    assert [name for name, _ in headers] == [b"ratelimit-policy"]  # not counted
    remaining = [dict(headers)[b"ratelimit"].split(b";")[1] for _, headers, _ in verdicts[2:]]
    assert remaining == [b"r=2", b"r=1", b"r=0", b"r=0"]
    assert [refusal is None for _, _, refusal in verdicts[2:]] == [True, True, True, False]
    refusal = verdicts[-1][2]
    assert isinstance(refusal, errors.RateLimited)
    assert refusal.headers["Retry-After"].isdigit()


def test_admission_without_limits_adds_no_fields_and_counts_failures_per_address(
    database_url: str, make_key: Callable[..., str]
) -> None:
    reader = f"Bearer {make_key(scopes=[keys.READ])}"
    unknown = "Bearer petstore_" + "A" * 43
    tries = [
        (reader, None, keys.READ),
        ("Bearer nope", ("10.0.0.9", 1), keys.READ),  # malformed: not counted
        (unknown, ("10.0.0.9", 1), keys.READ),
        (unknown, ("10.0.0.9", 2), keys.READ),
        (reader, ("10.0.0.9", 3), keys.READ),  # over its failures, and no key known here
        (reader, ("10.0.0.10", 1), keys.READ),
    ]
    verdicts = asyncio.run(admitting(database_url, tries, limit=None, failures="2/minute"))
    assert verdicts[0][1:] == ([], None)
    assert [type(refusal) for _, _, refusal in verdicts[1:]] == [
        errors.Unauthorized,
        errors.Unauthorized,
        errors.Unauthorized,
        errors.RateLimited,
        type(None),
    ]
    assert all(headers == [] for _, headers, _ in verdicts)


def test_a_key_known_valid_is_admitted_from_an_address_over_its_failures(
    database_url: str, make_key: Callable[..., str]
) -> None:
    """The failure limit stops made-up keys, not an address's good ones (a shared NAT):
    a key this instance verified before passes; a key it never saw waits the window."""
    reader = f"Bearer {make_key(scopes=[keys.READ])}"
    never_seen = f"Bearer {make_key(scopes=[keys.READ])}"
    unknown = "Bearer petstore_" + "B" * 43
    nat = ("192.0.2.1", 1)
    tries = [(reader, nat, keys.READ), (unknown, nat, keys.READ), (unknown, nat, keys.READ)]
    tries += [(reader, nat, keys.READ), (unknown, nat, keys.READ), (never_seen, nat, keys.READ)]
    verdicts = asyncio.run(
        admitting(database_url, tries, limit=None, failures="2/minute", cache_seconds=5)
    )
    assert [type(refusal) for _, _, refusal in verdicts] == [
        type(None),
        errors.Unauthorized,
        errors.Unauthorized,
        type(None),
        errors.RateLimited,
        errors.RateLimited,
    ]
