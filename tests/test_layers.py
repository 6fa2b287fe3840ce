"""The layers run one way (docs/architecture.md): every import between the package's
modules goes from a higher layer to a lower one, the rules know nothing of HTTP or
of the stores' drivers, and the client loads nothing of the server."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import petstore

PACKAGE = Path(petstore.__file__).parent

#: Top to bottom. A module may import modules of lower layers only (and, inside the
#: store package, its own modules).
LAYERS: list[set[str]] = [
    {"petstore.__main__"},
    {"petstore.cli"},
    {"petstore.cli_keys", "petstore.cli_pets"},
    {"petstore.cli_store"},
    {"petstore.cli_import"},
    {"petstore.client"},
    {"petstore.client_core"},
    {"petstore.client_errors"},
    {"petstore.app"},
    {"petstore.service", "petstore.docs"},
    {"petstore.routes", "petstore.api"},
    {"petstore.asgi", "petstore.parsing"},
    {"petstore.auth", "petstore.pagination"},
    {"petstore.pets", "petstore.keys", "petstore.idempotency", "petstore.ratelimit"},
    {"petstore.store"},  # and every module of the store package
    {"petstore.shutdown"},
    {"petstore.batch", "petstore.db", "petstore.metrics", "petstore.logs", "petstore.tracing"},
    {"petstore.errors", "petstore.config", "petstore.accesslines"},
    {"petstore"},
    {"petstore.schemas"},
]
RULES = {
    "petstore.pets",
    "petstore.keys",
    "petstore.idempotency",
    "petstore.ratelimit",
    "petstore.auth",
    "petstore.pagination",
    "petstore.parsing",
}
HTTP_AND_DRIVERS = {"starlette", "granian", "httpx", "psycopg", "psycopg_pool", "sqlite3"}
SERVER = {"starlette", "granian", "psycopg", "psycopg_pool", "alembic", "sqlalchemy", "redis"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at module level or inside functions."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            # `from petstore import errors` imports the module petstore.errors
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


MODULES = {
    _module_name(path): path
    for path in sorted(PACKAGE.rglob("*.py"))
    if "migrations" not in path.relative_to(PACKAGE).parts
}
RANK = {module: rank for rank, layer in enumerate(LAYERS) for module in layer}
RANK.update(
    {module: RANK["petstore.store"] for module in MODULES if module.startswith("petstore.store.")}
)


def test_every_module_has_a_layer() -> None:
    assert set(MODULES) == set(RANK)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down_the_layers(module: str) -> None:
    upward = sorted(
        imported
        for imported in _imports(MODULES[module]) & set(RANK)
        if imported != module
        and RANK[imported] <= RANK[module]
        and not (module.startswith("petstore.store") and imported.startswith("petstore.store"))
        and imported != "petstore"  # the package itself: its version and wire types
    )
    assert upward == [], f"{module} imports from its own layer or above: {upward}"


@pytest.mark.parametrize("module", sorted(RULES))
def test_rules_import_no_http_and_no_database_driver(module: str) -> None:
    imported = {name.split(".")[0] for name in _imports(MODULES[module])}
    assert imported & HTTP_AND_DRIVERS == set()


def test_importing_the_client_loads_nothing_of_the_server() -> None:
    probe = "import sys, petstore.client, petstore.cli_pets; print(' '.join(sys.modules))"
    loaded = set(subprocess.check_output([sys.executable, "-c", probe], text=True).split())
    assert {name.split(".")[0] for name in loaded} & SERVER == set()
    server_modules = {name for name in loaded if name.startswith("petstore.")}
    client_side = {
        "petstore.cli_pets",
        "petstore.cli_import",
        "petstore.client",
        "petstore.client_core",
        "petstore.client_errors",
    }
    assert server_modules <= client_side | {"petstore.schemas"}
