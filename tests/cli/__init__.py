"""The ``petstore`` command: its subcommands through click's runner and as a process."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner, Result

from petstore.cli.main import main
from tests.servers import LiveServer

#: The client-side commands' tests judge each answer as it comes: the client's
#: repeats of a 503 or an unreachable address, for up to 20 s by default, are
#: tests/client/test_client_resilience.py's.
NO_REPEATS = {"PETSTORE_RETRY_FOR_SECONDS": "0"}


def client_runner(server: LiveServer) -> CliRunner:
    """click's runner for the client-side commands (``pets``), pointed at ``server``'s
    ``/v1`` with its development key, without repeats (:data:`NO_REPEATS`)."""
    return CliRunner(
        env={"PETSTORE_URL": f"{server.url}/v1", "PETSTORE_API_KEY": server.dev_key, **NO_REPEATS}
    )


def import_file(runner: CliRunner, path: Path, text: str | bytes) -> Result:
    """``petstore pets import PATH`` of a file holding ``text`` (bytes as they are,
    text as UTF-8)."""
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return runner.invoke(main, ["pets", "import", str(path)])
