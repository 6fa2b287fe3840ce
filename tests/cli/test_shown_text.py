"""What ``petstore pets`` prints of text from outside: the service's answers (its
error codes and messages, the animals it returns), a file's name and content, a URL.
Each is shown through :func:`petstore.text.printable`, so no escape sequence reaches
the terminal (colour, window title, cursor moves) and no bidi or invisible character
hides or reorders what is shown; a URL is shown without its user name and password.

The hostile service is a real HTTP server on loopback, in a thread, answering every
request as the test says: the service a client may be pointed at, not ours.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from petstore.cli.main import main
from petstore.text import BIDI_CONTROLS, CONTROLS, INVISIBLE
from tests.cli import NO_REPEATS, client_runner, import_file
from tests.servers import LiveServer

#: What a hostile service (or file) sends: a colour, a window title ended by BEL, a
#: right-to-left override, invisible characters, a line break that starts a forged
#: line, and the 8-bit CSI.
HOSTILE = "\x1b[31mRED\x1b]0;pwned\x07\u202egnp.exe\u200b\u3164\r\nError: forged\x9b2J"
#: How each shows: escaped, the rest as it is.
SHOWN = "\\x1b[31mRED\\x1b]0;pwned\\x07\\u202egnp.exe\\u200b\\u3164\\r\\nError: forged\\x9b2J"
#: Every character that must not reach the terminal as itself.
UNSHOWN = re.compile(f"[{CONTROLS}\u2028\u2029{BIDI_CONTROLS}{INVISIBLE}]")
PASSWORD = "hunter2"

Answer = tuple[int, Any]


class Hostile:
    """An HTTP server on loopback answering each request with ``answer(method,
    path)``: a status and a JSON body, with ``Retry-After: 0`` so that the client's
    retries take no time."""

    def __init__(self) -> None:
        self.answer: Callable[[str, str], Answer] = lambda method, path: (500, {})
        hostile = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                self.reply()

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.reply()

            def reply(self) -> None:
                status, body = hostile.answer(self.command, self.path)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@pytest.fixture(scope="module")
def hostile() -> Iterator[Hostile]:
    service = Hostile()
    thread = threading.Thread(target=service.server.serve_forever, daemon=True)
    thread.start()
    yield service
    service.server.shutdown()
    service.server.server_close()
    thread.join()


def run(hostile: Hostile, tmp_path: Path, command: str, answer: Answer) -> Result:
    """``petstore pets COMMAND`` against ``hostile`` answering ``answer``; an import
    reads one record from a file whose name is hostile too."""
    hostile.answer = lambda method, path: answer
    runner = CliRunner(
        env={"PETSTORE_URL": hostile.url, "PETSTORE_API_KEY": "petstore_k", **NO_REPEATS}
    )
    if command == "import":
        return import_file(runner, tmp_path / f"{HOSTILE[:20]}.jsonl", '{"name":"x"}\n')
    arguments = {
        "list": ["list"],
        "list --json": ["list", "--json"],
        "add": ["add", "x", "--category-id", "1"],
        "get": ["get", "1"],
    }[command]
    return runner.invoke(main, ["pets", *arguments])


def assert_shown_escaped(result: Result) -> None:
    """Nothing of :data:`UNSHOWN` printed but line ends, and the hostile text shown
    escaped (as the command escapes it, or as JSON does)."""
    printed = result.stdout + result.stderr
    assert UNSHOWN.search(printed.replace("\n", "")) is None, printed
    assert "\\x1b[31mRED" in printed or "\\u001b[31mRED" in printed, printed


def error(status: int) -> Answer:
    return status, {"code": HOSTILE, "message": HOSTILE, "status": status}


def animal(name: str = HOSTILE, status: str = "available") -> dict[str, object]:
    return {"id": 1, "name": name, "categoryId": 1, "status": status}


#: Each command against each error status, but an import against 429: it waits out
#: a 429 and sends again, as long as it takes.
ERRORS = [
    (command, status)
    for command in ("list", "add", "get", "import")
    for status in (400, 401, 403, 404, 409, 410, 413, 415, 422, 429, 500, 503)
    if (command, status) != ("import", 429)
]


@pytest.mark.parametrize(("command", "status"), ERRORS)
def test_a_hostile_error_answer_is_shown_escaped(
    hostile: Hostile, tmp_path: Path, command: str, status: int
) -> None:
    result = run(hostile, tmp_path, command, error(status))
    assert result.exit_code != 0
    assert_shown_escaped(result)


@pytest.mark.parametrize(
    ("command", "answer"),
    [
        ("list", (200, [animal()])),
        ("list --json", (200, [animal()])),
        ("get", (200, animal())),
        ("add", (201, animal())),
        ("list", (200, [animal("Rex", status=HOSTILE)])),  # quoted by msgspec
        ("import", (201, animal())),
    ],
)
def test_hostile_animals_and_bodies_are_shown_escaped(
    hostile: Hostile, tmp_path: Path, command: str, answer: Answer
) -> None:
    assert_shown_escaped(run(hostile, tmp_path, command, answer))


def test_json_output_escapes_what_a_terminal_would_act_on_and_reads_back_the_same(
    hostile: Hostile, tmp_path: Path
) -> None:
    result = run(hostile, tmp_path, "list --json", (200, [animal()]))
    assert result.exit_code == 0
    assert result.stdout.isascii()
    assert json.loads(result.stdout)["name"] == HOSTILE


def test_a_csv_header_and_a_file_name_are_shown_escaped(tmp_path: Path) -> None:
    runner = CliRunner(
        env={"PETSTORE_URL": "http://127.0.0.1:9/v1", "PETSTORE_API_KEY": "k", **NO_REPEATS}
    )
    result = import_file(runner, tmp_path / f"{HOSTILE[:20]}.csv", f"{HOSTILE}\nRex,1\n")
    assert result.exit_code == 2
    assert_shown_escaped(result)
    header = SHOWN.split("\\r")[0]
    assert f"has no header: its first line must be name,categoryId[,status] (it is '{header}')" in (
        result.stderr
    )


def test_an_import_line_whose_member_name_holds_escapes_prints_none(
    live_server: LiveServer, tmp_path: Path
) -> None:
    """issue 60, P5: the service's message names the member, the importer prints it."""
    line = '{"\\u001b[31mRED\\u001b]0;pwned\\u0007":1,"name":"x","categoryId":1}'
    result = import_file(client_runner(live_server), tmp_path / "pets.jsonl", line + "\n")
    assert result.exit_code == 5
    printed = result.stdout + result.stderr
    assert "\x1b" not in printed
    assert "\x07" not in printed
    refusals = [row for row in result.stderr.splitlines() if row.startswith("line 1: ")]
    assert len(refusals) == 1
    assert "\\x1b[31mRED\\x1b]0;pwned\\x07: is not a member of a NewPet" in refusals[0]


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (
            f"http://user:{PASSWORD}@127.0.0.1:1/v1",
            "http://***@127.0.0.1:1/v1 holds a user name or password (shown as ***), which "
            "the service does not take: its one credential is the API key.",
        ),
        (f"https://{PASSWORD}@db1/v1", "https://***@db1/v1 holds a user name or password"),
        (f"http://user:{PASSWORD}@db1/v1/pets", "http://***@db1/v1/pets holds a user name"),
        (f"ftp://user:{PASSWORD}@db1/v1", "ftp://***@db1/v1 is not an http:// or https:// URL"),
        (f"user:{PASSWORD}@db1:8000/v1", "***@db1:8000/v1 is not an http:// or https:// URL"),
        (
            f"http://user:{PASSWORD}@db1:port/v1",
            "http://***@db1:port/v1 is not a URL: Invalid port",
        ),
    ],
)
@pytest.mark.parametrize("command", ["list", "import"])
def test_a_url_with_a_password_is_refused_without_printing_it(
    tmp_path: Path, url: str, says: str, command: str
) -> None:
    """issue 60, P6: ``pets list --url http://user:hunter2@127.0.0.1:1/v1`` printed
    ``no response from http://user:hunter2@...``."""
    (tmp_path / "one.jsonl").write_text('{"name":"x","categoryId":1}\n')
    arguments = ["list"] if command == "list" else ["import", str(tmp_path / "one.jsonl")]
    result = CliRunner().invoke(main, ["pets", *arguments, "--url", url, "--api-key", "x"])
    assert result.exit_code == 2, result.output
    assert PASSWORD not in result.output
    assert f"Error: {says}" in result.stderr
