"""Where absolute links point (D9's rel="next", D14's rel="deprecation"): the
configured public URL of the environment, or the request's own Host only when it is
an allowed host; never a Host a client chose (petstore.server.http.links)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from petstore.server.app import create_app
from petstore.server.config import SettingsError, load_settings

SECRET = "a-private-cursor-secret-for-these-tests"


@pytest.fixture
def serve(
    database_url: str, make_key: Callable[..., str]
) -> Iterator[Callable[..., tuple[TestClient, dict[str, str]]]]:
    """An app of ``load_settings(**settings)`` on the test database, with two animals
    stored, and headers that authenticate."""
    clients: list[TestClient] = []

    def start(**settings: Any) -> tuple[TestClient, dict[str, str]]:
        app = create_app(load_settings(database_url=database_url, cursor_secret=SECRET, **settings))
        client = TestClient(app, raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        auth = {"Authorization": f"Bearer {make_key()}"}
        for name in ("Rex", "Bo"):
            made = client.post("/v1/pets", json={"name": name, "categoryId": 1}, headers=auth)
            assert made.status_code == 201, made.text
        return client, auth

    yield start
    for client in clients:
        client.__exit__(None, None, None)


def links(client: TestClient, auth: dict[str, str], **headers: str) -> tuple[str, str]:
    """The rel="next" of a listPets page and the rel="deprecation" of a getPet."""
    page = client.get("/v1/pets?limit=1", headers={**auth, **headers})
    pet = client.get("/v1/pets/1", headers={**auth, **headers})
    assert page.status_code == 200, page.text
    assert pet.status_code == 200, pet.text
    return page.headers["link"], pet.headers["link"]


def assert_links_under(base: str, found: tuple[str, str]) -> None:
    next_link, deprecation = found
    assert next_link.startswith(f"<{base}v1/pets?limit=1&cursor="), next_link
    assert next_link.endswith('>; rel="next"')
    assert deprecation == f'<{base}v1/docs/deprecations>; rel="deprecation"; type="text/html"'


# An empty Host names no host: 400 (RFC 9112, section 3.2; tests/server/http/test_request_steps.py).
@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:443", "localhost@evil.example", "localhost/x"]
)
def test_a_host_not_allowed_gets_the_development_url(
    serve: Callable[..., tuple[TestClient, dict[str, str]]], host: str
) -> None:
    client, auth = serve()
    assert_links_under("http://127.0.0.1:8000/", links(client, auth, host=host))


@pytest.mark.parametrize("host", ["localhost:8000", "127.0.0.1:9001", "[::1]:8000", "testserver"])
def test_an_allowed_host_in_development_gets_links_under_itself(
    serve: Callable[..., tuple[TestClient, dict[str, str]]], host: str
) -> None:
    client, auth = serve()
    assert_links_under(f"http://{host}/", links(client, auth, host=host))


@pytest.mark.parametrize("host", ["testserver", "localhost:8000", "evil.example"])
def test_production_links_use_the_configured_url_whatever_the_host(
    serve: Callable[..., tuple[TestClient, dict[str, str]]], host: str
) -> None:
    client, auth = serve(environment="production", base_url="https://pets.example.org/v1")
    assert_links_under("https://pets.example.org/", links(client, auth, host=host))


def test_staging_links_use_the_staging_url_and_keep_its_path(
    serve: Callable[..., tuple[TestClient, dict[str, str]]],
) -> None:
    client, auth = serve(
        environment="staging", staging_base_url="https://staging.example.org:8443/api/v1/"
    )
    found = links(client, auth, host="evil.example")
    assert_links_under("https://staging.example.org:8443/api/", found)


def test_x_forwarded_host_is_never_read(
    serve: Callable[..., tuple[TestClient, dict[str, str]]],
) -> None:
    client, auth = serve(trust_forwarded_headers=True)
    found = links(client, auth, host="localhost:8000", **{"x-forwarded-host": "evil.example"})
    assert_links_under("http://localhost:8000/", found)


def test_an_allowed_host_behind_a_trusted_proxy_gets_its_scheme(
    serve: Callable[..., tuple[TestClient, dict[str, str]]],
) -> None:
    client, auth = serve(
        environment="production",
        base_url="https://pets.example.org/v1",
        allowed_hosts="pets.internal",
        trust_forwarded_headers=True,
    )
    found = links(client, auth, host="Pets.Internal:8443", **{"x-forwarded-proto": "https"})
    assert_links_under("https://pets.internal:8443/", found)
    found = links(client, auth, host="evil.example", **{"x-forwarded-proto": "https"})
    assert_links_under("https://pets.example.org/", found)


def test_links_follow_each_request_s_scheme_and_host_in_turn(
    serve: Callable[..., tuple[TestClient, dict[str, str]]],
) -> None:
    # The fields of a getPet are kept by scheme and Host: none leaks into another's.
    client, auth = serve(trust_forwarded_headers=True)
    for host, scheme in [
        ("localhost:8000", "http"),
        ("localhost:8000", "https"),
        ("evil.example", "https"),
        ("127.0.0.1:9001", "http"),
        ("localhost:8000", "http"),
    ]:
        found = links(client, auth, host=host, **{"x-forwarded-proto": scheme})
        base = "http://127.0.0.1:8000/" if host == "evil.example" else f"{scheme}://{host}/"
        assert_links_under(base, found)


def test_an_empty_allow_list_gives_every_development_link_the_configured_url(
    serve: Callable[..., tuple[TestClient, dict[str, str]]],
) -> None:
    client, auth = serve(allowed_hosts="", port=8123)
    assert_links_under("http://127.0.0.1:8123/", links(client, auth, host="localhost"))


def test_allowed_hosts_are_read_comma_separated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PETSTORE_ALLOWED_HOSTS", "localhost, [::1],Pets.Internal")
    assert load_settings().allowed_hosts == ("localhost", "::1", "pets.internal")


@pytest.mark.parametrize("value", ["pets internal", "a/b", "localhost,", "evil@host"])
def test_an_allowed_host_that_is_no_host_name_is_refused(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("PETSTORE_ALLOWED_HOSTS", value)
    with pytest.raises(SettingsError, match=r"PETSTORE_ALLOWED_HOSTS: .* is not a host name"):
        load_settings()
