"""The docs' promises a reader acts on: the facts they take from the code (settings,
migrations) match it, the operations pages carry no old section numbers, every code
block says its language, and the pages that moved out of the README say what it
said."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from petstore.server.config import Settings
from petstore.server.store import migrate
from tests import ROOT

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
#: Pages read outside the site too: every code block of theirs names its language.
READ_AS_MARKDOWN = [*PAGES, ROOT / "README.md", ROOT / "CHANGELOG.md"]


def _code_facts() -> ModuleType:
    """docs/code_facts.py, the Sphinx extension that writes the generated facts."""
    spec = importlib.util.spec_from_file_location("code_facts", DOCS / "code_facts.py")
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_settings_reference_has_every_setting_with_what_it_accepts() -> None:
    """Generated from Settings: each field's variable, its bounds and default, and
    the link to where run.md says when to change it."""
    facts = _code_facts()
    pages = [(path, (DOCS / path).read_text()) for path in facts.EXPLAINING]
    text = facts.settings_markdown(Settings, pages=pages)
    headings = re.findall(r"^## `(PETSTORE_\w+)`$", text, flags=re.MULTILINE)
    assert headings == [f"PETSTORE_{name.upper()}" for name in Settings.model_fields]
    port = text[text.index("## `PETSTORE_PORT`") :].split("\n## ")[0]
    assert "- Accepts a whole number from 1 to 65535." in port
    assert "- Default: `8000`." in port
    run_md = "(../operations/run.md#server-and-process)"
    assert f"- Explained in [Running Petstore: Server and process]{run_md}." in port
    explained = re.findall(r"^- Explained in ", text, flags=re.MULTILINE)
    assert len(explained) == len(Settings.model_fields), "every setting explained on a page"
    pool = text[text.index("## `PETSTORE_DATABASE_POOL_SIZE`") :].split("\n## ")[0]
    assert "PostgreSQL connections per worker process" in pool  # its #: comment
    secret = text[text.index("## `PETSTORE_CURSOR_SECRET`") :].split("\n## ")[0]
    assert Settings.model_fields["cursor_secret"].default.get_secret_value() not in secret


def test_the_migrations_list_is_the_folders() -> None:
    facts = _code_facts()
    folder = Path(migrate.__file__).parent / "migrations" / "versions"
    text = facts.migrations_markdown(folder)
    assert re.findall(r"^- `(\d{4})`: ", text, flags=re.MULTILINE) == list(migrate.revisions())
    assert f"`Database is at revision {migrate.head_revision()}.`" in text


def test_revisions_the_docs_show_are_this_releases() -> None:
    """What `db upgrade` prints and the refusal of an older schema, as the pages quote
    them, name the newest revision (0004 was shown long after 0005 came)."""
    quoted = [
        (page.name, shown or needed)
        for page in PAGES
        for shown, needed in re.findall(
            r"Database is at revision (\d{4})|this code needs (\d{4})", page.read_text()
        )
    ]
    assert quoted
    assert [name for name, revision in quoted if revision != migrate.head_revision()] == []


def test_no_page_keeps_a_section_number_of_the_old_guide() -> None:
    numbered = [
        f"{page.relative_to(ROOT)}: {line}"
        for page in PAGES
        for line in page.read_text().splitlines()
        if re.match(r"#{1,6} \d+\. ", line) or re.search(r"\]\([^)]*#\d+-", line)
    ]
    assert numbered == []


@pytest.mark.parametrize("page", READ_AS_MARKDOWN, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_code_block_names_its_language(page: Path) -> None:
    """An unnamed block was coloured by a guess (a source tree's "with" as Python)."""
    fences = re.findall(r"^ *```(.*)$", page.read_text(), flags=re.MULTILINE)
    openings = fences[::2]
    assert "" not in openings, f"{page.name}: a block without a language"


def test_the_home_page_leads_by_task_not_by_file_name() -> None:
    home = (DOCS / "README.md").read_text()
    for path in ("## Use it", "## Deploy it", "## Operate it", "## Reference", "## Internals"):
        assert path in home
    assert re.findall(r"\[[^\]]*\.md\]\(", home) == []
    assert "section numbers" not in home


def test_the_import_says_how_a_rerun_and_a_faster_import_work() -> None:
    """A re-run adds nothing twice only with the same API key within 24 hours (D16); a
    key with its own limit imports faster (D22)."""
    page = (DOCS / "command.md").read_text()
    section = page[page.index("## Importing animals") :]
    section = section[: section.index("\n## ")]
    assert "same API key within 24" in section
    assert "--rate-limit 6000/minute" in section
    assert "waiting" in section


def test_the_python_example_runs_with_the_virtualenv_python() -> None:
    page = (DOCS / "clients.md").read_text()
    section = page[page.index("## From Python") :]
    assert ".venv/bin/python" in section[: section.index("```python")]


def test_generated_typescript_types_leave_status_optional() -> None:
    page = (DOCS / "clients.md").read_text()
    section = page[page.index("## Generated clients") :]
    assert "openapi-typescript@7" in section
    assert "--default-non-nullable false" in section
    assert "make lint-openapi" in section
