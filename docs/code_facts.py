"""Facts the pages take from the code as it is, so that they cannot drift from it.

``{petstore-settings}`` writes one section per field of
:class:`petstore.server.config.Settings`: its variable, what it accepts (from the
field's type and bounds), its default and its ``#:`` comment, with a link to the
section of the operations pages that explains it (:data:`EXPLAINING`).
``{petstore-migrations}`` lists the schema's migrations from the migrations folder,
the newest being the revision ``petstore db upgrade`` prints.

Both write Markdown that MyST parses in the page, so their links are checked like
any other (``make docs`` is strict).
"""

from __future__ import annotations

import ast
import enum
import re
import types
import typing
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import AnyUrl, SecretStr
from pydantic.fields import FieldInfo
from sphinx.application import Sphinx
from sphinx.pycode import ModuleAnalyzer
from sphinx.util.docutils import SphinxDirective

from petstore.server.config import Settings
from petstore.server.store import migrate

DOCS = Path(__file__).parent
#: The pages that explain settings, relative to docs/, in the order they are looked
#: in: a setting's row in a table of the first (when to change it), else the first
#: section of any that names it.
EXPLAINING = ("operations/run.md", "operations/tls.md", "performance.md", "operations/deploy.md")

# ``code`` and :role:`target` of reStructuredText, as the code's comments write them.
_RST_LITERAL = re.compile(r"``(.+?)``")
_RST_ROLE = re.compile(r":[a-z]+:`~?\.?([^`]+)`")
_TITLE = re.compile(r"^# +(.+?) *$", flags=re.MULTILINE)
_HEADING = re.compile(r"^(#{2,6}) +(.+?) *$")
_ROW = re.compile(r"^\| *`(PETSTORE_[A-Z0-9_]+)` *\|")
_NAMED = re.compile(r"`(PETSTORE_[A-Z0-9_]+)[`=]")
_BOUNDS = {"ge": "at least {}", "gt": "more than {}", "le": "at most {}", "lt": "less than {}"}


def markdown(text: str) -> str:
    """reStructuredText's inline literals and roles of a comment as Markdown code
    spans: a role's target is named, not linked (the server is not on the site)."""
    return _RST_ROLE.sub(r"`\1`", _RST_LITERAL.sub(r"`\1`", text))


def slug(heading: str) -> str:
    """The anchor MyST (and GitHub) give a heading: lower case, punctuation but ``-``
    and ``_`` dropped, spaces as ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def explained_where(pages: list[tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """Each variable the pages (path, text) explain, with a link's text and target:
    the section above its row in a table (`` | `PETSTORE_X` | ``) of any page first,
    else the first section that names it (`` `PETSTORE_X` `` or ``PETSTORE_X=``)."""
    rows: dict[str, tuple[str, str]] = {}
    named: dict[str, tuple[str, str]] = {}
    for path, text in pages:
        title = (found.group(1) if (found := _TITLE.search(text)) else path).replace("`", "")
        heading = ""
        for line in re.sub(r"```.*?```", "", text, flags=re.DOTALL).splitlines():
            if found := _HEADING.match(line):
                heading = found.group(2)
                continue
            if not heading:
                continue
            link = (f"{title}: {heading.replace('`', '')}", f"{path}#{slug(heading)}")
            if row := _ROW.match(line):
                rows.setdefault(row.group(1), link)
            for variable in _NAMED.findall(line):
                named.setdefault(variable, link)
    return {**named, **rows}


def accepts(annotation: Any, metadata: list[Any]) -> str:
    """What a field accepts, in words, from its type and its bounds (``ge``, ``le``)."""
    optional = False
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        optional = len(members) < len(typing.get_args(annotation))
        annotation = members[0] if len(members) == 1 else annotation
    if typing.get_origin(annotation) is typing.Annotated:
        annotation, *extra = typing.get_args(annotation)
        metadata = [*metadata, *(m for item in extra for m in getattr(item, "metadata", [item]))]
    bounds = {
        name: _number(getattr(item, name))
        for item in metadata
        for name in _BOUNDS
        if getattr(item, name, None) is not None
    }
    words = _type_words(annotation)
    if set(bounds) == {"ge", "le"}:
        words = f"{words} from {bounds['ge']} to {bounds['le']}"
    elif bounds:
        words += ", " + " and ".join(_BOUNDS[name].format(value) for name, value in bounds.items())
    return f"{words}; or unset" if optional else words


def _type_words(annotation: Any) -> str:
    if annotation is bool:
        return "`true` or `false` (also `1` or `0`, `yes` or `no`, `on` or `off`, in any case)"
    if annotation is int:
        return "a whole number"
    if annotation is float:
        return "a number"
    if annotation is str:
        return "text"
    if annotation is SecretStr:
        return "text, a secret: never shown, in a message or a log"
    if annotation is datetime:
        return "an ISO 8601 date and time"
    if annotation is Path:
        return "a path"
    if isinstance(annotation, type) and issubclass(annotation, AnyUrl):
        return "an `http://` or `https://` URL"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "one of " + ", ".join(f"`{member.value}`" for member in annotation)
    if typing.get_origin(annotation) is typing.Literal:
        return "one of " + ", ".join(f"`{value}`" for value in typing.get_args(annotation))
    if typing.get_origin(annotation) is tuple:
        return "a comma-separated list"
    raise ValueError(f"no words for the type {annotation!r}: add them to docs/code_facts.py")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def default(field: FieldInfo) -> str:
    """The field's default as the variable would be written (``true``, ``10``)."""
    value = field.default
    if value is None:
        return "unset"
    if isinstance(value, SecretStr):
        return "a public value, fit for development only (a secret's default is not shown)"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, enum.Enum):
        return f"`{value.value}`"
    if isinstance(value, datetime):
        return f"`{value.isoformat().replace('+00:00', 'Z')}`"
    if isinstance(value, float):
        return f"`{_number(value)}`"
    return f"`{value}`"


def settings_markdown(settings: type[Settings], *, pages: list[tuple[str, str]]) -> str:
    """One section per setting, in the order of the class (its groups by topic), each
    linking to where ``pages`` (paths relative to docs/, and texts) explain it."""
    prefix = str(settings.model_config.get("env_prefix", ""))
    comments = ModuleAnalyzer.for_module(settings.__module__).find_attr_docs()
    sections = explained_where(pages)
    parts = []
    for name, field in settings.model_fields.items():
        variable = f"{prefix}{name.upper()}"
        said = field.description or " ".join(comments.get((settings.__name__, name), []))
        part = [f"## `{variable}`", ""]
        if said.strip():
            part += [markdown(said.strip()), ""]
        part += [
            f"- Accepts {accepts(field.annotation, field.metadata)}.",
            f"- Default: {default(field)}.",
        ]
        if variable in sections:
            text, target = sections[variable]
            part.append(f"- Explained in [{text}](../{target}).")
        parts.append("\n".join([*part, ""]))
    return "\n".join(parts)


def migrations_markdown(folder: Path) -> str:
    """Each migration file's revision and the first line of its docstring, oldest
    first, and which is the newest."""
    lines = []
    for revision in migrate.revisions():
        (path,) = folder.glob(f"{revision}_*.py")
        summary = (ast.get_docstring(ast.parse(path.read_text())) or "").splitlines()[0]
        lines.append(f"- `{revision}`: {markdown(summary)}")
    newest = migrate.head_revision()
    lines += [
        "",
        f"This release's newest revision is **`{newest}`**: `petstore db upgrade` "
        f"prints `Database is at revision {newest}.`",
    ]
    return "\n".join(lines)


class SettingsDirective(SphinxDirective):
    """``{petstore-settings}``: the settings reference."""

    def run(self) -> list[Any]:
        pages = []
        for path in EXPLAINING:
            self.env.note_dependency(str(DOCS / path))
            pages.append((path, (DOCS / path).read_text(encoding="utf-8")))
        text = settings_markdown(Settings, pages=pages)
        return self.parse_text_to_nodes(text, allow_section_headings=True)


class MigrationsDirective(SphinxDirective):
    """``{petstore-migrations}``: the list of migrations."""

    def run(self) -> list[Any]:
        folder = Path(migrate.__file__).parent / "migrations" / "versions"
        return self.parse_text_to_nodes(migrations_markdown(folder))


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("petstore-settings", SettingsDirective)
    app.add_directive("petstore-migrations", MigrationsDirective)
    return {"parallel_read_safe": True}
