"""deploy/haproxy.cfg in front of a real ``petstore serve``, on loopback: TLS 1.2 and
1.3 only, with Mozilla's intermediate ciphers, HSTS on every answer; plain HTTP
answers a redirect to https and nothing else; the certificate is replaced through
the runtime API with no connection dropped; keepalived's check completes a TLS
exchange. The public side reaches the API and the health checks, and never
``/metrics``, however its path is spelled (the server percent-decodes before it
routes); what HAProxy answers itself carries the Error body (D10), and the public
``/readyz`` only its status."""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from dotenv import dotenv_values

from testbed.certificates import Certificates
from testbed.processes import Daemon, free_port, program, wait_for
from tests import ROOT
from tests.conftest import LiveServer

DEPLOY = ROOT / "deploy"
#: HSTS as every https answer carries it (RFC 6797).
HSTS = "max-age=63072000"

#: Spellings of /metrics a client may send; the server routes several of them to
#: its /metrics page when they reach it.
METRICS_SPELLINGS = [
    "/metrics",
    "/%6detrics",
    "/%6D%65%74%72%69%63%73",
    "/metrics/",
    "/metrics?x=1",
    "//metrics",
    "/./metrics",
    "/v1/../metrics",
    "/v1/%2e%2e/metrics",
    "/%2fmetrics",
    "/%256detrics",
    "/METRICS",
    "/metrics%00",
    "http://petstore.example.com/%6detrics",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Front:
    """HAProxy under ``root`` in front of ``server``: TLS on ``port`` with the
    certificate ``balancer`` of ``certificates`` (named 127.0.0.1), plain HTTP on
    ``redirect_port``."""

    server: LiveServer
    port: int
    redirect_port: int
    root: Path
    certificates: Certificates

    def trust(self) -> ssl.SSLContext:
        """A client's TLS context that trusts this front's CA only."""
        return ssl.create_default_context(cafile=self.certificates.ca)

    def connect(self, *, timeout: float = 30) -> ssl.SSLSocket:
        """A TLS connection to HAProxy, its certificate verified for 127.0.0.1."""
        conn = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        return self.trust().wrap_socket(conn, server_hostname="127.0.0.1")

    @property
    def socket(self) -> Path:
        """HAProxy's runtime API."""
        return self.root / "haproxy.sock"


def read_answer(conn: socket.socket) -> tuple[int, bytes, bytes]:
    """Read one answer from ``conn``: whole once its Content-Length has arrived, else
    at the end of the connection. Its status, head and body."""
    answer = b""
    while chunk := conn.recv(65536):
        answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        length = [
            line for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")
        ]
        if length and len(body) >= int(length[0].split(b":")[1]):
            break
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head, body


def exchange(
    front: Front, request: bytes, *, timeout: float = 30
) -> tuple[int, bytes, bytes, float]:
    """Send ``request`` byte for byte (no client library normalises it) to HAProxy over
    TLS and read its answer: status, head, body and the seconds it took."""
    with front.connect(timeout=timeout) as conn:
        started = time.monotonic()
        conn.sendall(request)
        status, head, body = read_answer(conn)
        return status, head, body, time.monotonic() - started


def plain_exchange(port: int, request: bytes) -> tuple[int, bytes, bytes]:
    """:func:`exchange` in plain HTTP to 127.0.0.1:``port``."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request)
        return read_answer(conn)


def instance_exchange(server: LiveServer, request: bytes) -> tuple[int, bytes, bytes]:
    """:func:`exchange` with the instance itself, over its TLS, verified."""
    assert server.trust is not None
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
        server.trust.wrap_socket(raw, server_hostname="127.0.0.1") as conn,
    ):
        conn.sendall(request)
        return read_answer(conn)


def get(target: str) -> bytes:
    """``GET <target>`` on a connection of its own."""
    return f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()


def raw_get(front: Front, target: str) -> tuple[int, bytes]:
    """The status and body of HAProxy's answer to ``GET <target>`` over TLS."""
    status, _, body, _ = exchange(front, get(target), timeout=10)
    return status, body


def header(head: bytes, name: str) -> str | None:
    """The value of header ``name`` in an answer's ``head`` (None when absent)."""
    for line in head.decode("latin-1").split("\r\n")[1:]:
        key, _, value = line.partition(":")
        if key.strip().lower() == name.lower():
            return value.strip()
    return None


def ready(front: Front) -> bool:
    """Whether HAProxy answers /readyz with 200 (its instance is up)."""
    try:
        return raw_get(front, "/readyz")[0] == 200
    except OSError:
        return False


def haproxy_env(
    root: Path, *, port: int, redirect_port: int, certificates: Certificates
) -> dict[str, str]:
    return {
        **os.environ,
        "PETSTORE_LB_BIND": f"127.0.0.1:{port}",
        "PETSTORE_LB_REDIRECT_BIND": f"127.0.0.1:{redirect_port}",
        "PETSTORE_LB_CERTIFICATE": str(certificates.pem("balancer")),
        "PETSTORE_LB_INSTANCES_CA": str(certificates.ca),
        "PETSTORE_LB_STATS_SOCKET": str(root / "haproxy.sock"),
        "PETSTORE_LB_MAXCONN": "100",
    }


def config_for(root: Path, server_port: int) -> Path:
    """deploy/haproxy.cfg with the instance's ``server`` line and its unchecked backup,
    as ``make cluster`` writes it."""
    config = root / "haproxy.cfg"
    text = (DEPLOY / "haproxy.cfg").read_text()
    config.write_text(
        f"{text}    server app1 127.0.0.1:{server_port} verifyhost 127.0.0.1\n"
        f"    server app1-backup 127.0.0.1:{server_port} verifyhost 127.0.0.1 backup no-check\n"
    )
    return config


def start_haproxy(root: Path, *, server_port: int, env: dict[str, str]) -> Daemon:
    """HAProxy (master-worker, in the foreground) with :func:`config_for`."""
    argv = [program("haproxy", package="haproxy"), "-W", "-db", "-f"]
    return Daemon([*argv, str(config_for(root, server_port))], log=root / "haproxy.log", env=env)


@pytest.fixture(scope="module")
def balanced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Front]:
    """A real server and HAProxy in front of it."""
    with haproxy_in_front(tmp_path_factory.mktemp("haproxy")) as front:
        yield front


@contextmanager
def haproxy_in_front(root: Path) -> Iterator[Front]:
    """A real server under ``root`` and HAProxy in front of it, until the block ends."""
    certificates = Certificates(root / "certificates")
    certificates.make("balancer,127.0.0.1")
    server = LiveServer(root / "server", tls=certificates)
    (root / "server").mkdir()
    server.start()
    front = Front(
        server=server, port=free_port(), redirect_port=free_port(), root=root,
        certificates=certificates,
    )  # fmt: skip
    env = haproxy_env(
        root, port=front.port, redirect_port=front.redirect_port, certificates=certificates,
    )  # fmt: skip
    haproxy = start_haproxy(root, server_port=server.port, env=env)
    try:
        wait_for(lambda: ready(front), what="HAProxy with its instance up", seconds=30)
        yield front
    finally:
        haproxy.stop(grace=5)
        server.stop()


def runtime_api(front: Front, command: str) -> str:
    """HAProxy's answer to one runtime-API ``command``."""
    with socket.socket(socket.AF_UNIX) as api:
        api.connect(str(front.socket))
        api.sendall(command.encode() + b"\n")
        return b"".join(iter(lambda: api.recv(65536), b"")).decode()


def state_of(front: Front, server: str) -> str:
    """``server``'s status in the backend (``UP``, ``DOWN``...)."""
    answer = runtime_api(front, "show stat")
    for row in answer.splitlines():
        fields = row.split(",")
        if fields[:2] == ["petstore", server]:
            return fields[17]
    raise AssertionError(f"no server {server} in {answer!r}")


# TLS itself.


def handshake(
    front: Front, version: str, ciphers: str = "DEFAULT"
) -> subprocess.CompletedProcess[str]:
    """``openssl s_client`` to HAProxy offering only ``version`` (``-tls1_2``) and, up
    to TLS 1.2, ``ciphers``, the certificate verified; at security level 0 on our
    side, so that a refusal is HAProxy's, never the client's own."""
    return subprocess.run(
        ["openssl", "s_client", "-connect", f"127.0.0.1:{front.port}", "-verify_return_error",
         "-CAfile", str(front.certificates.ca), "-servername", "127.0.0.1", version,
         "-cipher", f"{ciphers}:@SECLEVEL=0"],
        input="", capture_output=True, text=True, timeout=10, check=False,
    )  # fmt: skip


def negotiated(shaken: subprocess.CompletedProcess[str]) -> tuple[str, str] | None:
    """The protocol and cipher ``openssl s_client`` agreed on, None when it failed."""
    found = re.search(r"^New, (TLSv[0-9.]+), Cipher is (\S+)$", shaken.stdout, re.MULTILINE)
    if shaken.returncode != 0 or found is None or found[2] == "(NONE)":
        return None
    return found[1], found[2]


@pytest.mark.parametrize("version", ["-tls1", "-tls1_1"])
def test_tls_1_0_and_1_1_are_refused(balanced: Front, version: str) -> None:
    shaken = handshake(balanced, version)
    assert negotiated(shaken) is None, shaken.stdout
    assert "alert protocol version" in shaken.stderr


@pytest.mark.parametrize(("version", "name"), [("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")])
def test_tls_1_2_and_1_3_are_accepted_with_a_verified_certificate(
    balanced: Front, version: str, name: str
) -> None:
    shaken = handshake(balanced, version)
    found = negotiated(shaken)
    assert found is not None, shaken.stdout + shaken.stderr
    assert found[0] == name
    assert "Verify return code: 0 (ok)" in shaken.stdout


@pytest.mark.parametrize(
    "cipher",
    [
        "ECDHE-ECDSA-AES128-SHA256",  # CBC: not in the intermediate profile
        "ECDHE-ECDSA-AES256-SHA",  # CBC with SHA-1
    ],
)
def test_a_tls_1_2_cipher_outside_the_intermediate_profile_is_refused(
    balanced: Front, cipher: str
) -> None:
    """OpenSSL's defaults would take these (HAProxy without the profile's list does);
    the intermediate profile keeps AEAD ciphers with forward secrecy only."""
    shaken = handshake(balanced, "-tls1_2", cipher)
    assert negotiated(shaken) is None, shaken.stdout
    assert "alert handshake failure" in shaken.stderr


def test_a_tls_1_2_client_gets_a_forward_secret_aead_cipher(balanced: Front) -> None:
    shaken = handshake(balanced, "-tls1_2", "ECDHE-ECDSA-CHACHA20-POLY1305")
    assert negotiated(shaken) == ("TLSv1.2", "ECDHE-ECDSA-CHACHA20-POLY1305")


def test_a_bind_setting_holding_ssl_options_still_serves_tls_only(tmp_path: Path) -> None:
    """Issue 59: with ``bind "${PETSTORE_LB_BIND}"`` alone, ``:8443 ssl crt x.pem`` in
    the setting passed ``haproxy -c`` and served plain HTTP. Whatever the setting
    holds now, the listener speaks TLS: a plain request gets no HTTP answer."""
    certificates = Certificates(tmp_path / "certificates")
    certificates.make("balancer,127.0.0.1")
    port = free_port()
    env = haproxy_env(tmp_path, port=port, redirect_port=free_port(), certificates=certificates)
    env["PETSTORE_LB_BIND"] = f"127.0.0.1:{port} ssl crt x.pem"  # the issue's
    haproxy = start_haproxy(tmp_path, server_port=free_port(), env=env)
    try:
        wait_for(lambda: listening_on(port), what="HAProxy", seconds=10)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(get("/metrics"))
            assert not conn.recv(1024).startswith(b"HTTP/")
        trust = ssl.create_default_context(cafile=certificates.ca)
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            trust.wrap_socket(raw, server_hostname="127.0.0.1") as conn,
        ):
            conn.sendall(get("/metrics"))
            status, head, _ = read_answer(conn)  # HAProxy's own answer
        assert (status, header(head, "strict-transport-security")) == (404, HSTS)
    finally:
        haproxy.stop(grace=5)


def listening_on(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def test_http2_is_offered_and_answers_as_http_1_1_does(balanced: Front) -> None:
    """ALPN h2,http/1.1: an HTTP/2 client gets the same answers, HAProxy's own (the
    Error body, HSTS) and the instance's, which it reaches over HTTP/1.1."""
    with httpx.Client(http2=True, verify=balanced.trust(), timeout=10) as client:
        base = f"https://127.0.0.1:{balanced.port}"
        healthy = client.get(f"{base}/healthz")
        refused = client.get(f"{base}/%6detrics")
    assert (healthy.http_version, healthy.status_code) == ("HTTP/2", 200)
    assert healthy.json() == {"status": "ok"}
    assert healthy.headers["strict-transport-security"] == HSTS
    assert (refused.http_version, refused.status_code) == ("HTTP/2", 404)
    assert refused.json()["code"] == "not_found"
    assert refused.headers["strict-transport-security"] == HSTS


# Port 80.


@pytest.mark.parametrize(
    ("request_line", "host", "location"),
    [
        ("GET /v1/pets?limit=1", "petstore.example.com",
         "https://petstore.example.com/v1/pets?limit=1"),
        ("GET /v1/pets?limit=1", "petstore.example.com:80",
         "https://petstore.example.com/v1/pets?limit=1"),
        ("GET /readyz", "petstore.example.com", "https://petstore.example.com/readyz"),
        ("GET /healthz", "[2001:db8::4]:80", "https://[2001:db8::4]/healthz"),
        ("GET /metrics", "10.0.0.4", "https://10.0.0.4/metrics"),
        ("POST /v1/pets", "petstore.example.com", "https://petstore.example.com/v1/pets"),
    ],
)  # fmt: skip
def test_plain_http_is_a_308_to_https_and_never_reaches_an_instance(
    balanced: Front, request_line: str, host: str, location: str
) -> None:
    """Every request on port 80, the health checks and a POST with a key and a body
    included, is answered 308 (the method and body kept on the repeat, RFC 9110
    15.4.9) to the same URL on https's port; the instance logs none of them."""
    server = balanced.server
    before = settled(server)
    body = b'{"name":"Rex","categoryId":1}' if request_line.startswith("POST") else b""
    request = (
        f"{request_line} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {server.dev_key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body
    status, answer_head, _ = plain_exchange(balanced.redirect_port, request)
    assert (status, header(answer_head, "location")) == (308, location)
    time.sleep(0.3)  # an access line would be written within 0.1 s
    assert served(server) == before


def test_plain_http_without_a_host_is_400_with_the_error_body(balanced: Front) -> None:
    status, head, body = plain_exchange(balanced.redirect_port, b"GET / HTTP/1.0\r\n\r\n")
    assert status == 400
    assert "no Host" in error_body(head, body, 400, "invalid_request")


# HSTS and the Error bodies, over TLS.


def test_hsts_on_the_instances_answers_and_haproxys_own(balanced: Front) -> None:
    """RFC 6797 on every https answer: an instance's 200, HAProxy's own 404 and, with
    every instance out of rotation, its 503."""
    status, head, _, _ = exchange(balanced, get("/healthz"))
    assert (status, header(head, "strict-transport-security")) == (200, HSTS)
    status, head, body, _ = exchange(balanced, get("/metrics"))
    assert (status, header(head, "strict-transport-security")) == (404, HSTS)
    error_body(head, body, 404, "not_found")
    servers = ("app1", "app1-backup")
    try:
        for name in servers:
            runtime_api(balanced, f"set server petstore/{name} state maint")
        status, head, body, _ = exchange(balanced, get("/v1/pets"))
        assert (status, header(head, "strict-transport-security")) == (503, HSTS)
        assert "no instance can answer now" in error_body(head, body, 503, "unavailable")
        assert header(head, "retry-after") == "1"
    finally:
        for name in servers:
            runtime_api(balanced, f"set server petstore/{name} state ready")
        wait_for(lambda: ready(balanced), what="the instance back in rotation", seconds=10)


def test_when_every_instance_fails_its_checks_the_backups_serve(tmp_path: Path) -> None:
    """D27: when every instance fails its checks at once (as under heavy packet loss on
    the path to the database), HAProxy sends requests to them unchecked (the backup
    lines, ``option allbackups``) rather than answering 503 itself. Here the
    instance's /readyz fails because its schema reads as too old; it serves still."""
    with haproxy_in_front(tmp_path) as front:
        server = front.server
        assert raw_get(front, "/healthz")[0] == 200
        database = server.database_url.removeprefix("sqlite:///")
        with sqlite3.connect(database) as connection:
            connection.execute("UPDATE alembic_version SET version_num = '0001'")
        wait_for(lambda: state_of(front, "app1") == "DOWN", what="app1 DOWN", seconds=10)
        before = served(server)
        status, body = raw_get(front, "/healthz")
        assert (status, json.loads(body)) == (200, {"status": "ok"})
        wait_for(lambda: served(server) > before, what="the instance's access line", seconds=5)


# The configuration as shipped.


@pytest.mark.parametrize("deployment", ["production", "staging"])
def test_the_shipped_haproxy_config_is_valid_with_each_deployments_settings(
    tmp_path: Path, deployment: str
) -> None:
    """``haproxy -c`` of deploy/haproxy.cfg with deploy/<deployment>/haproxy.env, no
    warning; the file sets every variable the configuration reads and no other (the
    certificate's path and the socket pointed here, where /etc and /run are not ours)."""
    config = config_for(tmp_path, free_port())
    settings = {k: v for k, v in dotenv_values(DEPLOY / deployment / "haproxy.env").items() if v}
    assert set(settings) == set(re.findall(r"\$\{(PETSTORE_\w+)\}", config.read_text()))
    certificates = Certificates(tmp_path / "certificates")
    certificates.make("petstore.example.com")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PETSTORE_")}
    env.update(settings)
    env.update(
        PETSTORE_LB_CERTIFICATE=str(certificates.pem("petstore.example.com")),
        PETSTORE_LB_INSTANCES_CA=str(certificates.ca),
        PETSTORE_LB_STATS_SOCKET=str(tmp_path / "haproxy.sock"),
    )
    checked = subprocess.run(
        [program("haproxy", package="haproxy"), "-c", "-f", str(config)],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Configuration file is valid" in checked.stdout
    assert "WARNING" not in checked.stdout + checked.stderr
    assert settings["PETSTORE_LB_BIND"].endswith(":443")
    assert settings["PETSTORE_LB_REDIRECT_BIND"].endswith(":80")


@pytest.mark.parametrize("target", METRICS_SPELLINGS)
def test_metrics_are_unreachable_through_haproxy_however_spelled(
    balanced: Front, target: str
) -> None:
    status, body = raw_get(balanced, target)
    assert status in (400, 403, 404), (status, body[:200])
    assert b"petstore_requests_total" not in body


def test_the_server_itself_answers_a_percent_encoded_metrics_path(balanced: Front) -> None:
    # What makes the load balancer's refusal necessary: the instance decodes the path.
    status, _, body = instance_exchange(balanced.server, get("/%6detrics"))
    assert status == 200
    assert b"petstore_requests_total" in body


@pytest.mark.parametrize(
    ("target", "status"),
    [
        ("/healthz", 200),
        ("/readyz", 200),
        ("/v1/pets", 401),
        ("/v1/pets/1", 401),
        ("/v1/openapi.json", 200),
        ("/v1/docs", 200),
        ("/v1/%70ets", 401),
    ],
)
def test_the_api_and_health_checks_are_reachable_through_haproxy(
    balanced: Front, target: str, status: int
) -> None:
    assert raw_get(balanced, target)[0] == status


def error_body(head: bytes, body: bytes, status: int, code: str) -> str:
    """The Error body's message, once head and body are the JSON Error of ``status``
    and ``code`` (D10)."""
    assert b"\r\ncontent-type: application/json" in head.lower(), head
    error = json.loads(body)
    assert (error["status"], error["code"]) == (status, code), error
    return str(error["message"])


def test_an_oversized_content_length_is_413_at_once(balanced: Front) -> None:
    """Issue 53 (N7): a Content-Length over 1 MiB with no body waited 10 s for it,
    then answered 408."""
    head = b"POST /v1/pets HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
    status, answer_head, body, took = exchange(balanced, head + b"Content-Length: 2000000\r\n\r\n")
    assert status == 413
    error_body(answer_head, body, 413, "payload_too_large")
    assert header(answer_head, "strict-transport-security") == HSTS
    assert took < 1


def test_a_body_too_slow_is_400_with_the_error_body(balanced: Front) -> None:
    """Issue 53 (N7): HAProxy's answer said ``"code":"invalid_request","status":408``;
    the instances answer a body too slow 400 (D17), and so does HAProxy now."""
    request = (
        b"POST /v1/pets HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
        b'Content-Length: 40\r\n\r\n{"name"'
    )
    status, head, body, took = exchange(balanced, request)
    assert status == 400
    assert "did not arrive within 10 s" in error_body(head, body, 400, "invalid_request")
    assert 9.5 < took < 12


@pytest.mark.parametrize("target", ["/readyz", "/%72eadyz", "/readyz?verbose=1"])
def test_the_public_readyz_says_only_the_status(balanced: Front, target: str) -> None:
    """Issue 53 (N11): the public /readyz told anyone whether the rate limits fail
    open. The instance's own port still says it."""
    status, head, body, _ = exchange(balanced, get(target))
    assert (status, json.loads(body)) == (200, {"status": "ready"})
    assert b"\r\ncontent-type: application/json" in head.lower()
    _, _, own = instance_exchange(balanced.server, get("/readyz"))
    assert json.loads(own) == {"status": "ready", "rateLimits": "ok"}


@pytest.mark.parametrize(
    ("request_head", "status"),
    [
        (b"GET /v1/pets HTTP/1.1\r\nHost: a\r\nHost: b\r\n", 400),
        (b"GET /v1 pets HTTP/1.1\r\nHost: a\r\n", 400),
        (b"POST /v1/pets HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity, chunked\r\n", 422),
    ],
)
def test_what_haproxys_http_parser_refuses_never_reaches_an_instance(
    balanced: Front, request_head: bytes, status: int
) -> None:
    """HAProxy 2.6 answers these from its HTTP/1 parser, with its own HTML body (and
    none of the headers the rules add, HSTS included) that no errorfile or http-error
    changes (docs/operations/troubleshoot.md): the status is pinned here, and that no
    instance saw the request."""
    server = balanced.server
    before = settled(server)
    got, _, _, _ = exchange(balanced, request_head + b"Connection: close\r\n\r\n0\r\n\r\n")
    assert got == status
    time.sleep(0.3)  # an access line would be written within 0.1 s
    assert served(server) == before


def settled(server: LiveServer) -> int:
    """:func:`served` once it has stayed the same for half a second (an earlier test's
    request, such as a body that never arrived, is logged when the instance's own
    deadline ends it), within 15 s."""
    deadline = time.monotonic() + 15
    count = served(server)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        if (now := served(server)) == count:
            return count
        count = now
    raise AssertionError(f"{server} kept logging requests for 15 s")


def served(server: LiveServer) -> int:
    """How many requests other than HAProxy's checks ``server`` has logged."""
    lines = server.output().splitlines()
    return sum(1 for line in lines if "petstore.access" in line and "/readyz" not in line)


# keepalived's check.


def check(address: str, port: int) -> tuple[int, float]:
    """deploy/keepalived/haproxy-answers on ``address``:``port``: its exit status and
    the seconds it took."""
    started = time.monotonic()
    done = subprocess.run(
        [str(DEPLOY / "keepalived" / "haproxy-answers"), address, str(port)],
        capture_output=True, timeout=10, check=False,
    )  # fmt: skip
    return done.returncode, time.monotonic() - started


def test_keepalived_check_passes_on_haproxys_tls_port(balanced: Front) -> None:
    status, took = check("127.0.0.1", balanced.port)
    assert status == 0
    assert took < 1.5


def test_keepalived_check_fails_on_plain_http_or_nothing(balanced: Front) -> None:
    """A listener that answers plain HTTP (HAProxy's own port 80, which the old check
    passed) and a port where nothing listens both fail."""
    assert check("127.0.0.1", balanced.redirect_port)[0] == 1
    assert check("127.0.0.1", free_port())[0] == 1


# Replacing the certificate.


def serial_of(certificate: Path) -> str:
    """The serial number of a PEM certificate, in hex as ``getpeercert()`` says it."""
    shown = subprocess.run(
        ["openssl", "x509", "-noout", "-serial", "-in", str(certificate)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return shown.strip().removeprefix("serial=").upper()


def peer_serial(conn: ssl.SSLSocket) -> str:
    certificate = conn.getpeercert()
    assert certificate is not None
    return str(certificate["serialNumber"]).upper()


def test_the_certificate_is_replaced_without_dropping_a_connection(tmp_path: Path) -> None:
    """deploy/tls/replace-haproxy-certificate after make-certificates renewed the
    certificate: keep-alive connections open across it go on (each request answered
    200, on the certificate they were made with), a request whose body was half sent
    when it happened is answered, and every new handshake gets the new certificate."""
    with haproxy_in_front(tmp_path) as front:
        pem, key = front.certificates.pem("balancer"), front.server.dev_key
        old = serial_of(front.certificates.certificate("balancer"))
        ping = b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n"  # no rate limit: as fast as it goes
        kept = [front.connect(timeout=10) for _ in range(4)]
        statuses: list[int] = []
        failures: list[BaseException] = []
        stop = threading.Event()

        def keep_asking(conn: ssl.SSLSocket) -> None:
            try:
                while not stop.is_set():
                    conn.sendall(ping)
                    statuses.append(read_answer(conn)[0])
            except (OSError, IndexError, ValueError) as exc:
                failures.append(exc)

        body = b'{"name":"Halfway","categoryId":1}'
        halfway = front.connect(timeout=10)
        halfway.sendall(
            b"POST /v1/pets HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {key}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body[:10]
        )
        askers = [threading.Thread(target=keep_asking, args=(conn,)) for conn in kept]
        for asker in askers:
            asker.start()
        time.sleep(0.3)
        before = len(statuses)
        front.certificates.make("balancer,127.0.0.1")
        new = serial_of(front.certificates.certificate("balancer"))
        replaced = subprocess.run(
            [str(DEPLOY / "tls" / "replace-haproxy-certificate"), str(front.socket), str(pem)],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        time.sleep(0.3)
        stop.set()
        for asker in askers:
            asker.join(10)
        halfway.sendall(body[10:])
        with halfway:
            assert read_answer(halfway)[0] == 201
        assert replaced.returncode == 0, replaced.stderr
        assert f"Serial: {new}" in replaced.stdout
        assert new != old
        assert failures == []
        assert len(statuses) > before > 0
        assert set(statuses) == {200}
        for conn in kept:
            with conn:
                assert peer_serial(conn) == old
                conn.sendall(ping)
                assert read_answer(conn)[0] == 200
        with front.connect() as fresh:
            assert peer_serial(fresh) == new


def test_a_certificate_haproxy_refuses_leaves_the_old_one_served(
    balanced: Front, tmp_path: Path
) -> None:
    """A PEM whose key is not the certificate's: the script exits 1 and HAProxy goes on
    serving the certificate it had."""
    pem = balanced.certificates.pem("balancer")
    served_before = pem.read_text()
    old = serial_of(balanced.certificates.certificate("balancer"))
    other = Certificates(tmp_path / "other")
    other.make("balancer,127.0.0.1")
    mine = balanced.certificates.key("balancer").read_text()
    try:
        pem.write_text(other.certificate("balancer").read_text() + mine)
        replaced = subprocess.run(
            [str(DEPLOY / "tls" / "replace-haproxy-certificate"), str(balanced.socket), str(pem)],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    finally:
        pem.write_text(served_before)
    assert replaced.returncode == 1
    assert "refused" in replaced.stderr
    with balanced.connect() as conn:
        assert peer_serial(conn) == old
